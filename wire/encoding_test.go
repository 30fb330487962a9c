package wire

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEncodingAppendDecode(t *testing.T) {
	tests := []struct {
		name string
		enc  Encoding
		in   []float32 // every value exact in enc
		want []byte    // the first value's bytes
	}{
		{name: "float32", enc: Float32, in: []float32{1, -0.25, float32(math.Inf(1)), 3e-39, 0x1p-149}, want: []byte{0, 0, 0x80, 0x3f}},
		{name: "float16", enc: Float16, in: []float32{1, -2, 0.5, 65504, 0x1p-24}, want: []byte{0x00, 0x3c}},
		{name: "bfloat16", enc: BFloat16, in: []float32{1, -2, 0.5}, want: []byte{0x80, 0x3f}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enc := tc.enc.Append([]byte{0xaa}, tc.in)
			require.Len(t, enc, 1+tc.enc.Size()*len(tc.in))
			assert.Equal(t, byte(0xaa), enc[0], "Append appends")
			assert.Equal(t, tc.want, enc[1:1+tc.enc.Size()], "little-endian")

			put := make([]byte, tc.enc.Size()*len(tc.in)+3)
			tc.enc.Put(put, tc.in)
			assert.Equal(t, enc[1:], put[:len(put)-3], "Put writes what Append appends")

			out := make([]float32, len(tc.in))
			require.NoError(t, tc.enc.Decode(out, enc[1:]))
			assert.Equal(t, tc.in, out)

			q := append([]float32(nil), tc.in...)
			tc.enc.Quantize(q)
			assert.Equal(t, tc.in, q, "exact values stay")

			assert.Panics(t, func() { tc.enc.Put(make([]byte, tc.enc.Size()*len(tc.in)-1), tc.in) }, "Put into a short dst")
		})
	}
}

func TestEncodingDecodeLength(t *testing.T) {
	tests := []struct {
		name string
		enc  Encoding
		dst  int
		src  int
		want string
	}{
		{name: "float16 odd", enc: Float16, dst: 4, src: 7, want: "decode float16: src has 7 bytes, want 8 (2 per float)"},
		{name: "bfloat16 long", enc: BFloat16, dst: 1, src: 4, want: "decode bfloat16: src has 4 bytes, want 2 (2 per float)"},
		{name: "float32 short", enc: Float32, dst: 2, src: 7, want: "decode float32: src has 7 bytes, want 8 (4 per float)"},
		{name: "unknown", enc: Encoding(9), dst: 1, src: 4, want: "decode: unknown Encoding(9)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.EqualError(t, tc.enc.Decode(make([]float32, tc.dst), make([]byte, tc.src)), tc.want)
		})
	}
}

func TestEncodingUnknown(t *testing.T) {
	e := Encoding(9)
	assert.Equal(t, "Encoding(9)", e.String())
	assert.Zero(t, e.Size())
	assert.Panics(t, func() { e.Put(make([]byte, 8), []float32{1}) })
	assert.Panics(t, func() { e.Quantize([]float32{1}) })
}

// TestFloat32Portable: the loops of big-endian hosts write and read what
// a little-endian host's memory holds.
func TestFloat32Portable(t *testing.T) {
	x := []float32{1, -0.25, float32(math.Inf(1)), 3e-39, float32(math.NaN())}
	w := make([]byte, 4*len(x))
	putFloat32Portable(w, x)
	if NativeLittleEndian {
		assert.Equal(t, Float32Bytes(x), w)
	}
	assert.Equal(t, Float32.Append(nil, x), w)
	y := make([]float32, len(x))
	getFloat32Portable(y, w)
	for i := range x {
		assert.Equal(t, math.Float32bits(x[i]), math.Float32bits(y[i]), "value %d", i)
	}
}

func TestLimits(t *testing.T) {
	assert.Equal(t, 1<<20, MaxPieceBytes)
	assert.Equal(t, MaxPieceBytes+64<<10, MaxMessageBytes, "a piece and its header fit")
}
