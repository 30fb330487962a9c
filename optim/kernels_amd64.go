//go:build !purego

package optim

import "golang.org/x/sys/cpu"

// vectorized is whether the AVX2 kernels run (tests turn it off to check
// them against the scalar loops).
var vectorized = cpu.X86.HasAVX2

// vecBlock is how many floats the AVX2 kernels take per iteration: they
// do len/vecBlock·vecBlock of a slice and the Go loops the rest.
const vecBlock = 16

// The AVX2 kernels compute the loops of stepMomentum and stepSGD without
// weight decay eight floats at a time, with the same operations in the
// same order, each rounded to float32 (VMULPS, VADDPS, VSUBPS; no fused
// multiply-add), so their results are the scalar loops' bit for bit. n is
// a multiple of vecBlock; d is p or does not overlap it.

//go:noescape
func momentumAVX2(d, p, grad, buf *float32, n int, lr, mu float32)

//go:noescape
func sgdAVX2(d, p, grad *float32, n int, lr float32)

// vecLen is how many of n floats the kernels do: the leading multiple of
// vecBlock, 0 without AVX2.
func vecLen(n int) int {
	if !vectorized {
		return 0
	}
	return n / vecBlock * vecBlock
}

// momentumVec runs the momentum kernel over vecLen(len(p)) floats and
// returns how many it did.
func momentumVec(d, p, g, buf []float32, lr, mu float32) int {
	n := vecLen(len(p))
	if n == 0 {
		return 0
	}
	_, _, _ = d[n-1], g[n-1], buf[n-1]
	momentumAVX2(&d[0], &p[0], &g[0], &buf[0], n, lr, mu)
	return n
}

// sgdVec is momentumVec for plain SGD.
func sgdVec(d, p, g []float32, lr float32) int {
	n := vecLen(len(p))
	if n == 0 {
		return 0
	}
	_, _ = d[n-1], g[n-1]
	sgdAVX2(&d[0], &p[0], &g[0], n, lr)
	return n
}
