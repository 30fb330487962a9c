//go:build !amd64 || purego

package optim

// Without AVX2 kernels (another architecture, or the purego tag) the Go
// loops do every float.

var vectorized = false

func momentumVec(d, p, g, buf []float32, lr, mu float32) int { return 0 }

func sgdVec(d, p, g []float32, lr float32) int { return 0 }
