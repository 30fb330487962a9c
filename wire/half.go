package wire

import (
	"encoding/binary"
	"math"
)

// The 16-bit formats. Encoding to one rounds to nearest, ties to even;
// values too large for the format become ±Inf, NaN stays NaN (quieted),
// and Float16 keeps subnormals (down to 2⁻²⁴) exactly as IEEE 754 does.
// The loops here are the hot paths of compressed collectives and pushes:
// they were tuned (see BenchmarkEncoding) and are kept small.

// Float16 limits, as float32 bits of magnitudes.
const (
	f16MinNormal = 113 << 23                      // 2⁻¹⁴, the smallest normal half
	f16Overflow  = (127 + 16) << 23               // 2¹⁶: at or above, a half is Inf
	f32Inf       = 0xff << 23                     // +Inf
	f16Rebias    = (127 - 15) << 23               // float32 minus half exponent bias
	denormMagic  = (127 - 15 + 23 - 10 + 1) << 23 // 0.5: aligns subnormal halves
)

// float16Bits rounds f to the nearest IEEE 754 half-precision value (ties
// to even) and returns its bits. It is F. Giesen's branch-light
// float_to_half_fast3_rtne. The common case, a normal half, is a few
// integer operations (putFloat16 and quantizeFloat16 repeat it inline):
// rebias the exponent and round by adding 0xfff, plus one when the kept
// mantissa is odd (ties to even); a carry runs into the exponent, up to
// Inf from 65520 on.
func float16Bits(f float32) uint16 {
	u := math.Float32bits(f)
	a := u &^ 0x80000000
	if a-f16MinNormal < f16Overflow-f16MinNormal {
		return uint16(u>>16)&0x8000 | uint16((a-f16Rebias+0xfff+(a>>13)&1)>>13)
	}
	return float16BitsRare(u)
}

// float16BitsRare is float16Bits for zeros, subnormal halves, overflow,
// Inf and NaN. Subnormals let a float32 addition of a magic constant
// (which rounds to nearest even, as Go's float32 arithmetic does) align
// the mantissa. It is kept out of line so that the hot loops stay small.
//
//go:noinline
func float16BitsRare(u uint32) uint16 {
	sign := uint16(u>>16) & 0x8000
	a := u &^ 0x80000000
	switch {
	case a > f32Inf:
		return sign | 0x7e00 | uint16(a>>13)&0x3ff // NaN, quieted
	case a >= f16Overflow:
		return sign | 0x7c00
	default:
		v := math.Float32frombits(a) + math.Float32frombits(denormMagic)
		return sign | uint16(math.Float32bits(v)-denormMagic)
	}
}

// float16Float32 returns the float32 value of the half-precision bits h
// (exact: every half is a float32).
func float16Float32(h uint16) float32 {
	const shiftedExp = 0x7c00 << 13
	u := uint32(h&0x7fff) << 13
	exp := u & shiftedExp
	u += (127 - 15) << 23
	switch exp {
	case shiftedExp: // Inf or NaN
		u += (128 - 16) << 23
	case 0: // zero or subnormal: renormalize with a float32 subtraction (exact)
		u += 1 << 23
		u = math.Float32bits(math.Float32frombits(u) - math.Float32frombits(113<<23))
	}
	return math.Float32frombits(u | uint32(h&0x8000)<<16)
}

// bfloat16Bits rounds f to the nearest bfloat16 (ties to even) and returns
// its bits.
func bfloat16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7f800000 == 0x7f800000 && b&0x7fffff != 0 {
		return uint16(b>>16) | 0x40 // NaN, quieted (and kept a NaN)
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// bfloat16Float32 returns the float32 value of the bfloat16 bits h.
func bfloat16Float32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// roundBFloat16 returns f rounded to the nearest bfloat16 value.
func roundBFloat16(f float32) float32 { return bfloat16Float32(bfloat16Bits(f)) }

func putFloat16(dst []byte, src []float32) {
	dst = dst[:2*len(src)]
	for i, v := range src {
		// float16Bits, inlined by hand (it is too large for the compiler).
		u := math.Float32bits(v)
		a := u &^ 0x80000000
		var h uint16
		if a-f16MinNormal < f16Overflow-f16MinNormal {
			h = uint16(u>>16)&0x8000 | uint16((a-f16Rebias+0xfff+(a>>13)&1)>>13)
		} else {
			h = float16BitsRare(u)
		}
		binary.LittleEndian.PutUint16(dst[2*i:], h)
	}
}

func getFloat16(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = float16Float32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

func putBFloat16(dst []byte, src []float32) {
	dst = dst[:2*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], bfloat16Bits(v))
	}
}

func getBFloat16(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = bfloat16Float32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// quantizeFloat16 rounds every value of x to the nearest half-precision
// value.
func quantizeFloat16(x []float32) {
	for i, v := range x {
		// float16Float32(float16Bits(v)), with the common case done on
		// the float32 bits directly: round the mantissa to 10 bits as
		// float16Bits does, keeping the float32 exponent.
		u := math.Float32bits(v)
		a := u &^ 0x80000000
		if a-f16MinNormal < f16Overflow-f16MinNormal {
			r := (a + 0xfff + (a>>13)&1) &^ 0x1fff
			if r >= f16Overflow {
				r = f32Inf
			}
			x[i] = math.Float32frombits(u&0x80000000 | r)
		} else {
			x[i] = float16Float32(float16BitsRare(u))
		}
	}
}

// quantizeBFloat16 rounds every value of x to the nearest bfloat16 value.
func quantizeBFloat16(x []float32) {
	for i, v := range x {
		x[i] = roundBFloat16(v)
	}
}
