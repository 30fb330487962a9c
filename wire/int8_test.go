package wire

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInt8RoundTrip: every value comes back within half its block's scale
// (absmax/254, with float32's rounding of x/scale on top), zeros exactly,
// each block's absmax exactly ±127·scale; Quantize gives what the round
// trip gives.
func TestInt8RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		n    int
		gen  func(i int) float32
	}{
		{"one short block", 100, func(int) float32 { return float32(rng.NormFloat64()) }},
		{"blocks and a short one", 3*Int8Block + 17, func(int) float32 { return float32(rng.NormFloat64() * 1e-3) }},
		{"magnitudes by block", 4 * Int8Block, func(i int) float32 {
			return float32(rng.NormFloat64() * math.Pow(10, float64(i/Int8Block-6)))
		}},
		{"sparse", 2 * Int8Block, func(i int) float32 {
			if i%97 == 0 {
				return float32(rng.NormFloat64())
			}
			return 0
		}},
		{"tiny: a subnormal scale", 50, func(int) float32 { return float32(rng.NormFloat64() * 1e-37) }},
		{"tinier: the scale underflows", 50, func(int) float32 { return float32(rng.NormFloat64() * 1e-44) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := make([]float32, tc.n)
			for i := range x {
				x[i] = tc.gen(i)
			}
			b := make([]byte, tc.n)
			scales := make([]float32, Int8Scales(tc.n))
			PutInt8(b, scales, x)
			got := make([]float32, tc.n)
			require.NoError(t, DecodeInt8(got, b, scales))
			for blk, s := range scales {
				require.Greater(t, s, float32(0))
				lo, hi := blk*Int8Block, min((blk+1)*Int8Block, tc.n)
				var absmax float32
				for i := lo; i < hi; i++ {
					absmax = max(absmax, float32(math.Abs(float64(x[i]))))
				}
				if s != 1 {
					assert.InDelta(t, absmax/127, s, float64(absmax)*1e-6, "block %d's scale is its absmax/127", blk)
				}
				for i := lo; i < hi; i++ {
					require.LessOrEqual(t, math.Abs(float64(got[i]-x[i])), 0.5001*float64(s), "value %d: %g came back as %g (scale %g)", i, x[i], got[i], s)
					if x[i] == 0 {
						require.Zero(t, got[i], "a zero stays zero")
					}
				}
			}
			q := append([]float32(nil), x...)
			Int8.Quantize(q)
			assert.Equal(t, got, q, "Quantize is the round trip")
		})
	}
}

// TestInt8ZerosAndNonFinite: a block of zeros has scale 1 and decodes to
// zeros; a block with a NaN or an Inf gets a scale that DecodeInt8 (and a
// shard) refuses, and the other blocks are unharmed.
func TestInt8ZerosAndNonFinite(t *testing.T) {
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		x := make([]float32, 2*Int8Block)
		x[Int8Block+5] = bad
		b, scales := make([]byte, len(x)), make([]float32, 2)
		PutInt8(b, scales, x)
		assert.Equal(t, float32(1), scales[0])
		_, err := CheckInt8Scales(scales)
		assert.ErrorIs(t, err, ErrScaleNonFinite, "%v", bad)
		assert.Error(t, DecodeInt8(make([]float32, len(x)), b, scales))
		got := make([]float32, Int8Block)
		require.NoError(t, DecodeInt8(got, b[:Int8Block], scales[:1]))
		assert.Equal(t, make([]float32, Int8Block), got)
	}
}

func TestDecodeInt8Refuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dst    int
		src    int
		scales []float32
		want   string
		is     error
	}{
		{"short src", 4, 3, []float32{1}, "decode int8: src has 3 bytes, want 4 (1 per float)", nil},
		{"too few scales", Int8Block + 1, Int8Block + 1, []float32{1}, "decode int8: 2049 values with 1 scales, want 2 (one per 2048 values)", nil},
		{"too many scales", 4, 4, []float32{1, 1}, "decode int8: 4 values with 2 scales, want 1 (one per 2048 values)", nil},
		{"zero scale", 4, 4, []float32{0}, "decode int8: scale 0: int8 scale is not > 0 (want a finite scale > 0): 0", ErrScaleNotPositive},
		{"negative scale", 4, 4, []float32{-1}, "decode int8: scale 0: int8 scale is not > 0 (want a finite scale > 0): -1", ErrScaleNotPositive},
		{"nan scale", Int8Block + 1, Int8Block + 1, []float32{1, float32(math.NaN())}, "decode int8: scale 1: int8 scale is not finite (want a finite scale > 0): NaN", ErrScaleNonFinite},
		{"inf scale", 4, 4, []float32{float32(math.Inf(1))}, "decode int8: scale 0: int8 scale is not finite (want a finite scale > 0): +Inf", ErrScaleNonFinite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := DecodeInt8(make([]float32, tc.dst), make([]byte, tc.src), tc.scales)
			assert.EqualError(t, err, tc.want)
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
			}
		})
	}
}

func TestInt8Encoding(t *testing.T) {
	assert.Equal(t, "int8", Int8.String())
	assert.Equal(t, 1, Int8.Size())
	assert.Panics(t, func() { Int8.Put(make([]byte, 4), []float32{1}) }, "Put has nowhere for the scales")
	assert.ErrorContains(t, Int8.Decode(make([]float32, 1), make([]byte, 1)), "DecodeInt8")
	assert.Panics(t, func() { PutInt8(make([]byte, 1), make([]float32, 1), make([]float32, 2)) }, "short dst")
	assert.Panics(t, func() { PutInt8(make([]byte, Int8Block+1), make([]float32, 1), make([]float32, Int8Block+1)) }, "too few scales")
}

func BenchmarkPutInt8(b *testing.B) {
	x := make([]float32, 1<<18)
	for i := range x {
		x[i] = float32(i%1000) - 500
	}
	dst, scales := make([]byte, len(x)), make([]float32, Int8Scales(len(x)))
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		PutInt8(dst, scales, x)
	}
}
