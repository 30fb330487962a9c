//go:build !purego

package ps

import "golang.org/x/sys/cpu"

// vectorized is whether ScanGradient's blocks are tested with AVX2 (tests
// turn it off to check it against the 64-bit words).
var vectorized = cpu.X86.HasAVX2

// hitsAVX2 reports whether ((bits & 0x7f800000) + carry) has its sign bit
// set for any of the n floats at p (n a multiple of 16): the test
// ScanGradient makes of two floats a word, eight a register.
//
//go:noescape
func hitsAVX2(p *float32, n int, carry uint32) bool

// hitsVec tests the leading multiple of 16 floats of b and returns how
// many it tested (0 without AVX2) and whether any hit.
func hitsVec(b []float32, carry uint32) (int, bool) {
	n := len(b) / 16 * 16
	if !vectorized || n == 0 {
		return 0, false
	}
	return n, hitsAVX2(&b[0], n, carry)
}
