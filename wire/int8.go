package wire

import (
	"errors"
	"fmt"
	"math"
)

// Int8Block is how many consecutive values share one scale in Int8.
//
// Int8 is symmetric absmax quantization: a block's scale is its largest
// |x| divided by 127 and each x travels as round(x/scale), an int8 in
// [-127, 127]. Symmetric, because the pseudo-gradients it is for are
// centred on zero: zero stays exactly zero (weights a round did not move
// arrive unmoved), no zero point travels, and decoding is one multiply.
// Per block rather than per message or per shard chunk (a chunk is up to
// 262,144 floats by default, a whole small model), so that one large
// value, or a layer of larger updates, costs precision only in its own
// 2048 values; the scales add 4 bytes per 2048 (0.2%).
const Int8Block = 2048

// Int8Scales is how many scales n values take in Int8: one per block of
// Int8Block, the last one possibly shorter.
func Int8Scales(n int) int { return (n + Int8Block - 1) / Int8Block }

// PutInt8 writes src into dst as Int8 and each block's scale into scales.
// dst must hold len(src) bytes and scales Int8Scales(len(src)) values;
// PutInt8 panics if they do not. A value decodes to within half its
// block's scale (absmax/254) of what it was. A block of zeros gets scale
// 1; a block holding a NaN or ±Inf gets a NaN or +Inf scale (and zeros),
// which a receiver refuses as it refuses any non-finite push. It does not
// allocate.
func PutInt8(dst []byte, scales, src []float32) {
	if len(dst) < len(src) || len(scales) < Int8Scales(len(src)) {
		panic(fmt.Sprintf("wire: PutInt8 of %d values into %d bytes and %d scales, want %d and %d", len(src), len(dst), len(scales), len(src), Int8Scales(len(src))))
	}
	for b := 0; b*Int8Block < len(src); b++ {
		lo := b * Int8Block
		hi := min(lo+Int8Block, len(src))
		scales[b] = putInt8Block(dst[lo:hi], src[lo:hi])
	}
}

// int8Scale is the scale of block x: its largest |x| over 127, 1 for a
// block of zeros (or of values so small that the scale underflows to 0,
// which then all round to 0), NaN or +Inf where x holds one.
func int8Scale(x []float32) float32 {
	var m float32
	for _, v := range x {
		a := float32(math.Abs(float64(v)))
		if a != a { // NaN
			return a
		}
		m = max(m, a)
	}
	s := m / 127
	if s == 0 {
		return 1
	}
	return s
}

// putInt8Block writes x, quantized, into dst and returns its scale.
func putInt8Block(dst []byte, x []float32) float32 {
	s := int8Scale(x)
	if math.IsInf(float64(s), 0) || s != s {
		clear(dst[:len(x)])
		return s
	}
	if inv := 1 / s; !math.IsInf(float64(inv), 0) {
		for i, v := range x {
			dst[i] = byte(int8(roundInt8(v * inv)))
		}
		return s
	}
	for i, v := range x { // a subnormal scale, whose inverse overflows
		dst[i] = byte(int8(roundInt8(float32(float64(v) / float64(s)))))
	}
	return s
}

// roundInt8 rounds v to the nearest integer (halves away from zero),
// clamped to [-127, 127].
func roundInt8(v float32) int32 {
	var q int32
	if v >= 0 {
		q = int32(min(v, 127) + 0.5)
	} else {
		q = int32(max(v, -127) - 0.5)
	}
	return max(min(q, 127), -127)
}

// DecodeInt8 writes the values src and scales hold in Int8 into dst: src
// must hold exactly len(dst) bytes and scales Int8Scales(len(dst)) values,
// each finite and > 0.
func DecodeInt8(dst []float32, src []byte, scales []float32) error {
	if len(src) != len(dst) {
		return fmt.Errorf("decode int8: src has %d bytes, want %d (1 per float)", len(src), len(dst))
	}
	if want := Int8Scales(len(dst)); len(scales) != want {
		return fmt.Errorf("decode int8: %d values with %d scales, want %d (one per %d values)", len(dst), len(scales), want, Int8Block)
	}
	if i, err := CheckInt8Scales(scales); err != nil {
		return fmt.Errorf("decode int8: scale %d: %w", i, err)
	}
	for b, s := range scales {
		lo := b * Int8Block
		hi := min(lo+Int8Block, len(dst))
		for i, q := range src[lo:hi] {
			dst[lo+i] = float32(int8(q)) * s
		}
	}
	return nil
}

// CheckInt8Scales checks that every scale is finite and > 0, and says
// which is not and why (ErrScaleNonFinite, ErrScaleNotPositive).
func CheckInt8Scales(scales []float32) (int, error) {
	for i, s := range scales {
		switch {
		case s != s || math.IsInf(float64(s), 0):
			return i, fmt.Errorf("%w: %v", ErrScaleNonFinite, s)
		case s <= 0:
			return i, fmt.Errorf("%w: %v", ErrScaleNotPositive, s)
		}
	}
	return 0, nil
}

// The ways an Int8 scale is wrong.
var (
	ErrScaleNonFinite   = errors.New("int8 scale is not finite (want a finite scale > 0)")
	ErrScaleNotPositive = errors.New("int8 scale is not > 0 (want a finite scale > 0)")
)

// quantizeInt8 rounds x, in place and block by block, to what DecodeInt8
// gives back after PutInt8 (NaN for every value of a block with a NaN or
// ±Inf).
func quantizeInt8(x []float32) {
	for lo := 0; lo < len(x); lo += Int8Block {
		blk := x[lo:min(lo+Int8Block, len(x))]
		s := int8Scale(blk)
		if math.IsInf(float64(s), 0) || s != s {
			for i := range blk {
				blk[i] = float32(math.NaN())
			}
			continue
		}
		if inv := 1 / s; !math.IsInf(float64(inv), 0) {
			for i, v := range blk {
				blk[i] = float32(roundInt8(v*inv)) * s
			}
			continue
		}
		for i, v := range blk {
			blk[i] = float32(roundInt8(float32(float64(v)/float64(s)))) * s
		}
	}
}
