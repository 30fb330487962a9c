package ps

import (
	"math"
	"testing"
)

// TestScanVectorIsTheWords puts each kind of value ScanGradient must see
// (NaN, ±Inf, the floor itself, the float just below it, a huge finite
// value) at every index of a block and a tail, on either side of an
// 8-byte boundary, and checks that the AVX2 test and the 64-bit words
// give the same index and bound, and the right ones.
func TestScanVectorIsTheWords(t *testing.T) {
	if !vectorized {
		t.Skip("no vector scan on this machine (not amd64 with AVX2, or built with purego): the 64-bit words test every block")
	}
	defer func(v bool) { vectorized = v }(vectorized)
	below := math.Nextafter32(scanFloor, 0)
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), scanFloor, -scanFloor, below, -3e38}
	backing := make([]float32, 1+1024+37)
	for i := range backing {
		backing[i] = float32(i%13) * 0.25
	}
	for _, g := range [][]float32{backing[:1024+37], backing[1:]} {
		for at := range g {
			for _, v := range specials {
				saved := g[at]
				g[at] = v
				var idx [2]int
				var bound [2]float64
				for j, vec := range []bool{false, true} {
					vectorized = vec
					idx[j], bound[j] = ScanGradient(g)
				}
				g[at] = saved
				if idx != [2]int{idx[0], idx[0]} || bound != [2]float64{bound[0], bound[0]} {
					t.Fatalf("%v at %d of %d: index %d bound %g from the vector test, %d and %g from the words", v, at, len(g), idx[1], bound[1], idx[0], bound[0])
				}
				wantIdx, wantBound := -1, float64(scanFloor)
				switch a := math.Abs(float64(v)); {
				case math.IsNaN(a) || math.IsInf(a, 0):
					wantIdx, wantBound = at, 0
				case a >= scanFloor:
					wantBound = a
				}
				if idx[1] != wantIdx || bound[1] != wantBound {
					t.Fatalf("%v at %d of %d: index %d bound %g, want %d and %g", v, at, len(g), idx[1], bound[1], wantIdx, wantBound)
				}
			}
		}
	}
}
