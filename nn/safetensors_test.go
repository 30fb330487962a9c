package nn

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testLayout() (Layout, []float32) {
	var l Layout
	l.Add("fc1.weight", 3, 2)
	l.Add("fc1.bias", 3)
	l.Add("fc2.weight", 1, 3)
	vec := make([]float32, l.Size())
	for i := range vec {
		vec[i] = float32(i) - 2.5
	}
	return l, vec
}

func TestSafetensorsRoundTrip(t *testing.T) {
	l, vec := testLayout()
	path := filepath.Join(t.TempDir(), "m.safetensors")
	require.NoError(t, SaveSafetensors(path, l, vec, map[string]string{"model": "test"}))
	l2, vec2, meta, err := LoadSafetensors(path)
	require.NoError(t, err)
	assert.True(t, l.Equal(l2), "layout %v, want %v", l2, l)
	assert.Equal(t, vec, vec2)
	assert.Equal(t, "test", meta["model"])
}

func TestSafetensorsFormat(t *testing.T) {
	// The header must be what PyTorch's safetensors expects.
	l, vec := testLayout()
	var b bytes.Buffer
	require.NoError(t, WriteSafetensors(&b, l, vec, nil))
	hlen := binary.LittleEndian.Uint64(b.Bytes()[:8])
	assert.Zero(t, (8+hlen)%8, "data must start 8-byte aligned")
	assert.Contains(t, string(b.Bytes()[8:8+hlen]), `"fc1.bias":{"dtype":"F32","shape":[3],"data_offsets":[24,36]}`)
	assert.Equal(t, int(8+hlen)+4*len(vec), b.Len())
}

func TestSafetensorsRejects(t *testing.T) {
	l, vec := testLayout()
	var good bytes.Buffer
	require.NoError(t, WriteSafetensors(&good, l, vec, nil))
	g := good.Bytes()
	hlen := int(binary.LittleEndian.Uint64(g[:8]))
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"truncated data", g[:len(g)-3]},
		{"extra data", append(append([]byte(nil), g...), 0, 0, 0, 0)},
		{"huge header length", append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, g[8:]...)},
		{"not json", append(append([]byte(nil), g[:8]...), bytes.Repeat([]byte{'x'}, len(g)-8)...)},
		{"wrong dtype", bytes.Replace(g, []byte(`"F32"`), []byte(`"F16"`), 1)},
		{"header only", g[:8+hlen]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := ReadSafetensors(bytes.NewReader(tc.data), int64(len(tc.data)))
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrSafetensors), "%v", err)
		})
	}
}

func FuzzReadSafetensors(f *testing.F) {
	l, vec := testLayout()
	var b bytes.Buffer
	_ = WriteSafetensors(&b, l, vec, map[string]string{"k": "v"})
	f.Add(b.Bytes())
	f.Add([]byte{})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		l, v, _, err := ReadSafetensors(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		// Whatever parses must round-trip.
		var out bytes.Buffer
		if err := WriteSafetensors(&out, l, v, nil); err != nil {
			t.Fatalf("parsed layout %v does not write back: %v", l, err)
		}
	})
}
