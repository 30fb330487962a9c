package wire

import (
	"errors"
	"fmt"
	"slices"
)

// Encoding is how float32 values travel: 4 or 2 little-endian bytes each,
// or 1 byte each with a scale per block (Int8).
type Encoding uint8

const (
	// Float32 is IEEE 754 single precision, 4 bytes: the values as they are.
	Float32 Encoding = iota
	// Float16 is IEEE 754 half precision, 2 bytes: 11 significant bits,
	// range ±65504 (larger values become ±Inf), subnormals down to 2⁻²⁴.
	Float16
	// BFloat16 is bfloat16, 2 bytes: the top half of a float32, rounded;
	// 8 significant bits, float32's range.
	BFloat16
	// Int8 is symmetric int8 with a float32 scale per block of Int8Block
	// values (see Int8Block), 1 byte a value: the scales travel beside
	// the values, so it is written with PutInt8 and read with DecodeInt8,
	// not with Put and Decode.
	Int8
)

// encodingNames are the encodings' names, by Encoding.
var encodingNames = [...]string{Float32: "float32", Float16: "float16", BFloat16: "bfloat16", Int8: "int8"}

func (e Encoding) String() string {
	if int(e) >= len(encodingNames) {
		return fmt.Sprintf("Encoding(%d)", uint8(e))
	}
	return encodingNames[e]
}

// Size is the number of bytes one value takes in e, 0 for an unknown e.
func (e Encoding) Size() int {
	switch e {
	case Float32:
		return 4
	case Float16, BFloat16:
		return 2
	case Int8:
		return 1
	}
	return 0
}

// Put writes src into dst in e (rounding to nearest even for the 16-bit
// encodings). dst must hold at least Size()·len(src) bytes; Put panics if
// it does not, or if e is unknown or Int8 (whose scales PutInt8 writes).
// It does not allocate.
func (e Encoding) Put(dst []byte, src []float32) {
	switch e {
	case Float32:
		putFloat32(dst, src)
	case Float16:
		putFloat16(dst, src)
	case BFloat16:
		putBFloat16(dst, src)
	case Int8:
		panic("wire: Put in int8 has nowhere to write the scales: use PutInt8")
	default:
		panic(fmt.Sprintf("wire: Put in unknown %v", e))
	}
}

// Append appends src to dst in e and returns the extended slice. It
// allocates only when dst lacks the capacity, and panics where Put does.
func (e Encoding) Append(dst []byte, src []float32) []byte {
	n, k := len(dst), e.Size()*len(src)
	dst = slices.Grow(dst, k)[:n+k]
	e.Put(dst[n:], src)
	return dst
}

// Decode writes the values src holds in e into dst; src must hold exactly
// Size()·len(dst) bytes. Every 16-bit value is exactly a float32. Int8
// needs its scales: DecodeInt8.
func (e Encoding) Decode(dst []float32, src []byte) error {
	size := e.Size()
	if size == 0 {
		return fmt.Errorf("decode: unknown %v", e)
	}
	if e == Int8 {
		return errors.New("decode int8: needs the blocks' scales (DecodeInt8)")
	}
	if len(src) != size*len(dst) {
		return fmt.Errorf("decode %v: src has %d bytes, want %d (%d per float)", e, len(src), size*len(dst), size)
	}
	switch e {
	case Float16:
		getFloat16(dst, src)
	case BFloat16:
		getBFloat16(dst, src)
	default:
		getFloat32(dst, src)
	}
	return nil
}

// Quantize rounds every value of x, in place, to the nearest value e can
// carry: what Decode gives back after Put (Int8: DecodeInt8 after
// PutInt8, block by block from x[0]). Float32 leaves x as it is. It
// panics if e is unknown.
func (e Encoding) Quantize(x []float32) {
	switch e {
	case Float32:
	case Float16:
		quantizeFloat16(x)
	case BFloat16:
		quantizeBFloat16(x)
	case Int8:
		quantizeInt8(x)
	default:
		panic(fmt.Sprintf("wire: Quantize to unknown %v", e))
	}
}
