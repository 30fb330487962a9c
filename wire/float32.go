package wire

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// Float32Bytes returns the memory of f as bytes, without copying: f's
// wire form when NativeLittleEndian. The bytes alias f.
func Float32Bytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

// putFloat32 writes src into dst as little-endian float32: one memory copy
// on a little-endian host.
func putFloat32(dst []byte, src []float32) {
	if NativeLittleEndian {
		copy(dst[:4*len(src)], Float32Bytes(src))
		return
	}
	putFloat32Portable(dst, src)
}

// getFloat32 reads little-endian float32 from src into dst.
func getFloat32(dst []float32, src []byte) {
	if NativeLittleEndian {
		copy(Float32Bytes(dst), src[:4*len(dst)])
		return
	}
	getFloat32Portable(dst, src)
}

// putFloat32Portable is putFloat32 on any host (a big-endian one).
func putFloat32Portable(dst []byte, src []float32) {
	dst = dst[:4*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

// getFloat32Portable is getFloat32 on any host (a big-endian one).
func getFloat32Portable(dst []float32, src []byte) {
	src = src[:4*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}
