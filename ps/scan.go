package ps

import (
	"math"
	"unsafe"
)

// ScanGradient returns the index of the first NaN or ±Inf in g, or -1
// and a bound on the magnitudes in g: the largest magnitude where that is
// at least scanFloor, else scanFloor. NaN, ±Inf and every float32 of
// magnitude scanFloor or more have an exponent of at least
// scanFloorExp: adding (256 − scanFloorExp) to the exponent carries into
// the cleared sign bit exactly then. It tests sixteen floats at a time in
// AVX2 registers where there are (scan_amd64.s; 5-6x the words over the
// default model's wider sibling), else two at a time in a 64-bit word,
// branch-free over blocks, and looks at a block float by
// float (for the first NaN or ±Inf, and the largest magnitude) only when
// the test hits: every push is checked whole before anything is applied,
// so this runs over every gradient, and ordinary gradients, all below
// scanFloor, cost no more than the finite check alone. rpc runs it over
// each piece of a push as it arrives (the push's bound is the largest of
// the pieces') and passes the bound as Push.Scanned.
func ScanGradient(g []float32) (int, float64) {
	const (
		exp   = 0x7f8000007f800000
		carry = (256 - scanFloorExp) << 23 * (1 + 1<<32)
		sign  = 0x8000000080000000
		block = 1024 // floats
	)
	var top float32 // the largest magnitude in the blocks that hit
	for lo := 0; lo < len(g); lo += block {
		var hit uint64
		b := g[lo:min(lo+block, len(g))]
		// Sixteen floats at a time in AVX2 registers where there are
		// (all but a tail), then the rest two a word.
		k, vhit := hitsVec(b, carry&0xffffffff)
		if vhit {
			hit = sign
		}
		b = b[k:]
		// Two floats per 8-byte load; a float before an 8-byte boundary
		// and one left over at the end are tested alone.
		if len(b) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
			hit |= (uint64(math.Float32bits(b[0]))&exp + carry) & sign
			b = b[1:]
		}
		if len(b) >= 2 {
			words := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/2)
			for _, w := range words {
				hit |= (w&exp + carry) & sign
			}
		}
		if len(b)%2 == 1 {
			hit |= (uint64(math.Float32bits(b[len(b)-1]))&exp + carry) & sign
		}
		if hit == 0 {
			continue
		}
		for j, v := range g[lo:min(lo+block, len(g))] {
			if math.Float32bits(v)&0x7f800000 == 0x7f800000 {
				return lo + j, 0
			}
			top = max(top, float32(math.Abs(float64(v))))
		}
	}
	return -1, max(float64(top), scanFloor)
}

// scanFloor is the magnitude below which ScanGradient does not look at
// gradients float by float: 2^20, far above any ordinary gradient, and
// far enough below MaxMagnitude to prove every update it bounds safe.
const (
	scanFloorExp = 127 + 20
	scanFloor    = 1 << 20
)
