package shoalpb

import (
	"encoding/binary"
	"fmt"
	"math"
)

// MaxPieceBytes is the largest tensor payload Shoal puts in one message
// (about 1 MiB); larger transfers are streamed in pieces of at most this.
const MaxPieceBytes = 1 << 20

// AppendFloats appends src to dst as little-endian float32 bytes.
func AppendFloats(dst []byte, src []float32) []byte {
	n := len(dst)
	if cap(dst)-n < 4*len(src) {
		dst = append(dst, make([]byte, 4*len(src))...)
	}
	dst = dst[:n+4*len(src)]
	_ = PutFloats(dst[n:], src)
	return dst
}

// DecodeFloats writes the little-endian float32 values of src into dst,
// which must have exactly len(src)/4 elements.
func DecodeFloats(dst []float32, src []byte) error {
	if len(src)%4 != 0 {
		return fmt.Errorf("tensor bytes: %d is not a multiple of 4 (float32)", len(src))
	}
	if len(dst) != len(src)/4 {
		return fmt.Errorf("tensor bytes: %d floats, want %d", len(src)/4, len(dst))
	}
	if littleEndian {
		copy(floatBytes(dst), src)
		return nil
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
	return nil
}
