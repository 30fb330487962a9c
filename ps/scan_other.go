//go:build !amd64 || purego

package ps

// Without AVX2 (another architecture, or the purego tag) ScanGradient
// tests every block two floats a word.

var vectorized = false

func hitsVec(b []float32, carry uint32) (int, bool) { return 0, false }
