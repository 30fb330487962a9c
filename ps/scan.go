package ps

import (
	"fmt"
	"math"
	"unsafe"
)

// Scan is the finiteness and magnitude scan of one gradient, run piece by
// piece in order by whoever decodes the gradient, each piece while it is
// in the cache and the next is arriving, instead of over the whole push
// after its last byte, when the step waits for it. A push that carries a
// Scan of every float (Push.Scan) is not passed over again: the shard
// takes the bound for its growth check, and the first NaN or ±Inf for its
// refusal, from it. The zero Scan has scanned nothing.
type Scan struct {
	n         int     // floats scanned
	bound     float64 // the largest ScanGradient bound of the pieces
	nonFinite bool    // a piece held a NaN or ±Inf: the first is bad, badValue
	bad       int
	badValue  float32
}

// Add scans piece, the gradient's next len(piece) floats.
func (sc *Scan) Add(piece []float32) {
	if !sc.nonFinite {
		if i, b := ScanGradient(piece); i >= 0 {
			sc.nonFinite, sc.bad, sc.badValue = true, sc.n+i, piece[i]
		} else {
			sc.bound = max(sc.bound, b)
		}
	}
	sc.n += len(piece)
}

// Merge adds o, the scan of the gradient's floats at..at+o's length made
// apart (one lane of a push-pull), to sc: the lanes' scans merged, one
// after the other in any order, are the scan of their floats together.
func (sc *Scan) Merge(at int, o Scan) {
	sc.n += o.n
	sc.bound = max(sc.bound, o.bound)
	if o.nonFinite && (!sc.nonFinite || at+o.bad < sc.bad) {
		sc.nonFinite, sc.bad, sc.badValue = true, at+o.bad, o.badValue
	}
}

// Floats is how many floats sc has scanned.
func (sc *Scan) Floats() int { return sc.n }

// scanned returns the largest magnitude of in's gradient (at least
// scanFloor), from its Scan where that covers every float, else from a
// scan here, or an error naming its first NaN or ±Inf.
func (in *Push) scanned() (float64, error) {
	sc := in.Scan
	if sc == nil || sc.n != len(in.Grads) {
		sc = &Scan{}
		sc.Add(in.Grads)
	}
	if sc.nonFinite {
		return 0, fmt.Errorf("%w: gradient at index %d is %v, want a finite value", ErrInvalidArgument, vectorIndex(sc.bad, in.Ranges), sc.badValue)
	}
	return sc.bound, nil
}

// ScanGradient returns the index of the first NaN or ±Inf in g, or -1
// and a bound on the magnitudes in g: the largest magnitude where that is
// at least scanFloor, else scanFloor. NaN, ±Inf and every float32 of
// magnitude scanFloor or more have an exponent of at least
// scanFloorExp: adding (256 − scanFloorExp) to the exponent carries into
// the cleared sign bit exactly then. It tests sixteen floats at a time in
// AVX2 registers where there are (scan_amd64.s), else two at a time in a 64-bit word,
// branch-free over blocks, and looks at a block float by
// float (for the first NaN or ±Inf, and the largest magnitude) only when
// the test hits: every push is checked whole before anything is applied,
// so this runs over every gradient, and ordinary gradients, all below
// scanFloor, cost no more than the finite check alone. A Scan runs it
// over each piece of a push as it arrives.
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
