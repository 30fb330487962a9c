package wire

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func f32(bits uint32) float32 { return math.Float32frombits(bits) }

func TestFloat16Encode(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{name: "one", in: 1, want: 0x3c00},
		{name: "minus two", in: -2, want: 0xc000},
		{name: "zero", in: 0, want: 0x0000},
		{name: "minus zero", in: float32(math.Copysign(0, -1)), want: 0x8000},
		{name: "0.1 rounds", in: 0.1, want: 0x2e66},
		{name: "max finite 65504", in: 65504, want: 0x7bff},
		{name: "65519 rounds down to max", in: 65519, want: 0x7bff},
		{name: "65520 (tie) rounds to even: Inf", in: 65520, want: 0x7c00},
		{name: "1e6 overflows to Inf", in: 1e6, want: 0x7c00},
		{name: "-1e6 overflows to -Inf", in: -1e6, want: 0xfc00},
		{name: "max float32 overflows", in: math.MaxFloat32, want: 0x7c00},
		{name: "+Inf", in: float32(math.Inf(1)), want: 0x7c00},
		{name: "-Inf", in: float32(math.Inf(-1)), want: 0xfc00},
		{name: "min normal 2^-14", in: 0x1p-14, want: 0x0400},
		{name: "min subnormal 2^-24", in: 0x1p-24, want: 0x0001},
		{name: "max subnormal 1023·2^-24", in: 1023 * 0x1p-24, want: 0x03ff},
		{name: "just below min normal rounds up to it", in: 1023.5 * 0x1p-24, want: 0x0400},
		{name: "2^-25 (tie) rounds to even: 0", in: 0x1p-25, want: 0x0000},
		{name: "just above 2^-25 rounds to min subnormal", in: f32(0x33000001), want: 0x0001},
		{name: "1.5·2^-24 (tie) rounds to even: 2·2^-24", in: 1.5 * 0x1p-24, want: 0x0002},
		{name: "2.5·2^-24 (tie) rounds to even: 2·2^-24", in: 2.5 * 0x1p-24, want: 0x0002},
		{name: "2^-26 underflows to 0", in: 0x1p-26, want: 0x0000},
		{name: "-2^-24", in: -0x1p-24, want: 0x8001},
		{name: "float32 subnormal underflows", in: f32(1), want: 0x0000},
		{name: "1+2^-11 (tie) rounds to even: 1", in: 1 + 0x1p-11, want: 0x3c00},
		{name: "1+3·2^-11 (tie) rounds to even: 1+2^-9", in: 1 + 3*0x1p-11, want: 0x3c02},
		{name: "just above the tie rounds up", in: f32(0x3f801001), want: 0x3c01},
		{name: "2047 exact", in: 2047, want: 0x67ff},
		{name: "2049 (tie) rounds to even: 2048", in: 2049, want: 0x6800},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, float16Bits(tc.in), "float16Bits(%g)", tc.in)
			got := Float16.Append(nil, []float32{tc.in})
			assert.Equal(t, []byte{byte(tc.want), byte(tc.want >> 8)}, got, "little-endian encoding")
		})
	}
}

func TestFloat16NaN(t *testing.T) {
	for _, bits := range []uint32{0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff} {
		h := float16Bits(f32(bits))
		assert.Equal(t, uint16(0x7c00), h&0x7c00, "NaN %#x: exponent must be all ones", bits)
		assert.NotZero(t, h&0x3ff, "NaN %#x must not become Inf", bits)
		assert.Equal(t, bits>>31 == 1, h>>15 == 1, "NaN %#x keeps its sign", bits)
		assert.True(t, math.IsNaN(float64(float16Float32(h))))
	}
}

func TestFloat16Decode(t *testing.T) {
	tests := []struct {
		name string
		in   uint16
		want float32
	}{
		{name: "one", in: 0x3c00, want: 1},
		{name: "max finite", in: 0x7bff, want: 65504},
		{name: "min subnormal", in: 0x0001, want: 0x1p-24},
		{name: "max subnormal", in: 0x03ff, want: 1023 * 0x1p-24},
		{name: "min normal", in: 0x0400, want: 0x1p-14},
		{name: "minus zero", in: 0x8000, want: float32(math.Copysign(0, -1))},
		{name: "-2^-24", in: 0x8001, want: -0x1p-24},
		{name: "+Inf", in: 0x7c00, want: float32(math.Inf(1))},
		{name: "-Inf", in: 0xfc00, want: float32(math.Inf(-1))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := make([]float32, 1)
			require.NoError(t, Float16.Decode(got, []byte{byte(tc.in), byte(tc.in >> 8)}))
			assert.Equal(t, math.Float32bits(tc.want), math.Float32bits(got[0]), "got %g, want %g", got[0], tc.want)
		})
	}
	assert.True(t, math.IsNaN(float64(float16Float32(0x7e00))))
	assert.True(t, math.IsNaN(float64(float16Float32(0x7c01))))
}

func TestBFloat16(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{name: "one", in: 1, want: 0x3f80},
		{name: "pi rounds down", in: math.Pi, want: 0x4049},
		{name: "minus zero", in: float32(math.Copysign(0, -1)), want: 0x8000},
		{name: "tie rounds to even (down)", in: f32(0x3f808000), want: 0x3f80},
		{name: "tie rounds to even (up)", in: f32(0x3f818000), want: 0x3f82},
		{name: "above the tie rounds up", in: f32(0x3f808001), want: 0x3f81},
		{name: "max float32 overflows to Inf", in: math.MaxFloat32, want: 0x7f80},
		{name: "+Inf", in: float32(math.Inf(1)), want: 0x7f80},
		{name: "-Inf", in: float32(math.Inf(-1)), want: 0xff80},
		{name: "float32 subnormal rounds", in: f32(0x000116c2), want: 0x0001},
		{name: "min float32 subnormal rounds to 0", in: f32(1), want: 0x0000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, bfloat16Bits(tc.in), "bfloat16Bits(%g)", tc.in)
			got := BFloat16.Append(nil, []float32{tc.in})
			assert.Equal(t, []byte{byte(tc.want), byte(tc.want >> 8)}, got, "little-endian encoding")
		})
	}
	for _, bits := range []uint32{0x7fc00000, 0x7f800001, 0xff800001} {
		h := bfloat16Bits(f32(bits))
		assert.True(t, math.IsNaN(float64(bfloat16Float32(h))), "NaN %#x must stay NaN, got %#x", bits, h)
	}
}

// TestHalfRoundTrip decodes every 16-bit pattern and encodes it again:
// every non-NaN value comes back with the same bits.
func TestHalfRoundTrip(t *testing.T) {
	for _, f := range []struct {
		name   string
		decode func(uint16) float32
		encode func(float32) uint16
	}{
		{"float16", float16Float32, float16Bits},
		{"bfloat16", bfloat16Float32, bfloat16Bits},
	} {
		t.Run(f.name, func(t *testing.T) {
			for h := range 1 << 16 {
				v := f.decode(uint16(h))
				if math.IsNaN(float64(v)) {
					require.True(t, math.IsNaN(float64(f.decode(f.encode(v)))), "%#04x: NaN must stay NaN", h)
					continue
				}
				require.Equal(t, uint16(h), f.encode(v), "%#04x decodes to %g", h, v)
			}
		})
	}
}

// nearest16 is the reference rounding to a 16-bit format whose finite
// non-negative values are the codes 0..maxFinite in increasing order and
// whose Inf is maxFinite+1, worth overflow for rounding purposes.
func nearest16(f float32, decode func(uint16) float32, maxFinite uint16, overflow float64) uint16 {
	var sign uint16
	if math.Signbit(float64(f)) {
		sign = 0x8000
	}
	a := math.Abs(float64(f))
	val := func(h int) float64 {
		if h > int(maxFinite) {
			return overflow
		}
		return float64(decode(uint16(h)))
	}
	h := sort.Search(int(maxFinite)+2, func(i int) bool { return val(i) >= a })
	if h > int(maxFinite)+1 || math.IsInf(a, 1) {
		return sign | (maxFinite + 1)
	}
	if h == 0 || val(h) == a {
		return sign | uint16(h)
	}
	lo, hi := a-val(h-1), val(h)-a
	if lo < hi || (lo == hi && (h-1)%2 == 0) {
		return sign | uint16(h-1)
	}
	return sign | uint16(h)
}

// checkNearest checks every rounding path (scalar, slice encoders,
// in-place Quantize) of f against nearest16.
func checkNearest(t *testing.T, bits uint32) {
	f := f32(bits)
	if math.IsNaN(float64(f)) {
		return
	}
	for _, tc := range []struct {
		name      string
		bits      func(float32) uint16
		decode    func(uint16) float32
		enc       Encoding
		maxFinite uint16
		overflow  float64
	}{
		{"float16", float16Bits, float16Float32, Float16, 0x7bff, 65536},
		{"bfloat16", bfloat16Bits, bfloat16Float32, BFloat16, 0x7f7f, 0x1p128},
	} {
		want := nearest16(f, tc.decode, tc.maxFinite, tc.overflow)
		require.Equal(t, want, tc.bits(f), "%s of %g (%#08x)", tc.name, f, bits)
		require.Equal(t, []byte{byte(want), byte(want >> 8)}, tc.enc.Append(nil, []float32{f}), "%s: encode %g (%#08x)", tc.name, f, bits)
		wantF := math.Float32bits(tc.decode(want))
		q := []float32{f}
		tc.enc.Quantize(q)
		require.Equal(t, wantF, math.Float32bits(q[0]), "%s: quantize %g (%#08x)", tc.name, f, bits)
	}
}

// TestHalfNearest checks random float32s against a brute-force nearest
// search: round to nearest, ties to even, overflow to Inf.
func TestHalfNearest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		checkNearest(t, rng.Uint32())
		// Values around the half range, where rounding is most delicate.
		checkNearest(t, 0x33000000+rng.Uint32N(0x47800000-0x33000000+0x100000))
	}
	// Every tie and its neighbours around every half exponent.
	for e := uint32(100); e <= 145; e++ {
		for _, m := range []uint32{0, 1, 0xfff, 0x1000, 0x1001, 0x2fff, 0x3000, 0x3001, 0x7fefff, 0x7ff000, 0x7fffff} {
			checkNearest(t, e<<23|m)
			checkNearest(t, 1<<31|e<<23|m)
		}
	}
}

func FuzzHalfNearest(f *testing.F) {
	for _, b := range []uint32{0, 0x3f800000, 0x477fe000, 0x477ff000, 0x33000000, 0x33400000, 0x387fc000, 0x7f7fffff, 0x3f808000} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, bits uint32) { checkNearest(t, bits) })
}
