package nn

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLayoutAddFindSizeView(t *testing.T) {
	var l Layout
	assert.Zero(t, l.Size())
	w := l.Add("fc1.weight", 3, 4)
	b := l.Add("fc1.bias", 3)
	k := l.Add("conv.weight", 2, 1, 3, 3)
	require.NoError(t, l.Validate())

	assert.Equal(t, Tensor{Name: "fc1.weight", Shape: []int{3, 4}, Offset: 0}, w)
	assert.Equal(t, Tensor{Name: "fc1.bias", Shape: []int{3}, Offset: 12}, b)
	assert.Equal(t, 15, k.Offset)
	assert.Equal(t, 18, k.Size())
	assert.Equal(t, 33, l.Size())

	got, ok := l.Find("fc1.bias")
	require.True(t, ok)
	assert.Equal(t, b, got)
	_, ok = l.Find("fc2.bias")
	assert.False(t, ok)

	vec := make([]float32, l.Size())
	for i := range vec {
		vec[i] = float32(i)
	}
	v := b.View(vec)
	assert.Equal(t, []float32{12, 13, 14}, v)
	assert.Equal(t, 3, cap(v), "a view must not reach into the next tensor")

	assert.Equal(t, "fc1.weight[3 4] fc1.bias[3] conv.weight[2 1 3 3]", l.String())

	shape := []int{5, 6}
	t2 := l.Add("x", shape...)
	shape[0] = 99
	assert.Equal(t, []int{5, 6}, t2.Shape, "Add must copy the shape")
}

func TestLayoutValidate(t *testing.T) {
	tests := []struct {
		name    string
		tensors []Tensor
		wantErr string
	}{
		{"empty", nil, ""},
		{"contiguous", []Tensor{{"a", []int{2, 3}, 0}, {"b", []int{4}, 6}}, ""},
		{"empty name", []Tensor{{"", []int{2}, 0}}, `layout tensor 0: empty name`},
		{"duplicate", []Tensor{{"a", []int{2}, 0}, {"a", []int{2}, 2}}, `layout tensor 1: duplicate name "a"`},
		{"no shape", []Tensor{{"a", nil, 0}}, `layout tensor "a": empty shape`},
		{"zero dim", []Tensor{{"a", []int{2, 0}, 0}}, `layout tensor "a": shape [2 0] has a non-positive dimension`},
		{"gap", []Tensor{{"a", []int{2}, 0}, {"b", []int{2}, 3}}, `layout tensor "b": offset 3, want 2 (tensors must be contiguous)`},
		{"not at zero", []Tensor{{"a", []int{2}, 1}}, `layout tensor "a": offset 1, want 0 (tensors must be contiguous)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Layout{Tensors: tc.tensors}.Validate()
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.EqualError(t, err, tc.wantErr)
		})
	}
}

func TestLayoutEqual(t *testing.T) {
	var a, b Layout
	a.Add("w", 2, 3)
	b.Add("w", 2, 3)
	assert.True(t, a.Equal(b))
	b.Add("b", 2)
	assert.False(t, a.Equal(b))
	var c Layout
	c.Add("w", 3, 2)
	assert.False(t, a.Equal(c))
	var d Layout
	d.Add("v", 2, 3)
	assert.False(t, a.Equal(d))
}

// TestModelLayouts pins the tensor names and shapes that checkpoints (and
// PyTorch code reading them) rely on.
func TestModelLayouts(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string
		size int
	}{
		{"mlp default", Spec{Arch: "mlp"},
			"fc1.weight[256 784] fc1.bias[256] fc2.weight[128 256] fc2.bias[128] fc3.weight[10 128] fc3.bias[10]",
			784*256 + 256 + 256*128 + 128 + 128*10 + 10},
		{"mlp sized", Spec{Arch: "mlp", Hidden: []int{32}, Channels: 3, Height: 4, Width: 5, Classes: 7},
			"fc1.weight[32 60] fc1.bias[32] fc2.weight[7 32] fc2.bias[7]",
			60*32 + 32 + 32*7 + 7},
		{"cnn default", Spec{Arch: "cnn"},
			"conv1.weight[16 1 3 3] conv1.bias[16] conv2.weight[32 16 3 3] conv2.bias[32] fc1.weight[128 1568] fc1.bias[128] fc2.weight[10 128] fc2.bias[10]",
			16*9 + 16 + 32*16*9 + 32 + 128*1568 + 128 + 128*10 + 10},
		{"cnn odd input", Spec{Arch: "cnn", Channels: 3, Height: 9, Width: 10, Classes: 5},
			"conv1.weight[16 3 3 3] conv1.bias[16] conv2.weight[32 16 3 3] conv2.bias[32] fc1.weight[128 128] fc1.bias[128] fc2.weight[5 128] fc2.bias[5]",
			16*27 + 16 + 32*16*9 + 32 + 128*128 + 128 + 128*5 + 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(tc.spec, NewCPU())
			require.NoError(t, err)
			l := m.Layout()
			require.NoError(t, l.Validate())
			assert.Equal(t, tc.want, l.String())
			assert.Equal(t, tc.size, l.Size())
		})
	}
}

func TestTensorWork(t *testing.T) {
	w, err := TensorWork(Spec{Arch: "mlp", Hidden: []int{256, 128}})
	require.NoError(t, err)
	assert.Equal(t, []float64{784 * 256, 256, 256 * 128, 128, 128 * 10, 10}, w)

	w, err = TensorWork(Spec{Arch: "cnn"})
	require.NoError(t, err)
	// conv1 1→16 3×3 on 28×28, conv2 16→32 3×3 on 14×14, fc1 1568→128, fc2.
	assert.Equal(t, []float64{16 * 9 * 784, 16 * 784, 32 * 16 * 9 * 196, 32 * 196, 1568 * 128, 128, 128 * 10, 10}, w)

	_, err = TensorWork(Spec{Arch: "rnn"})
	assert.Error(t, err)
}
