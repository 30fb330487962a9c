package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// naiveGemm is C = alpha·op(A)·op(B) + beta·C in float64.
func naiveGemm(tA, tB bool, m, n, k int, alpha float64, a []float32, lda int, b []float32, ldb int, beta float64, c []float64, ldc int) {
	at := func(i, l int) float64 {
		if tA {
			return float64(a[l*lda+i])
		}
		return float64(a[i*lda+l])
	}
	bt := func(l, j int) float64 {
		if tB {
			return float64(b[j*ldb+l])
		}
		return float64(b[l*ldb+j])
	}
	for i := range m {
		for j := range n {
			var s float64
			for l := range k {
				s += at(i, l) * bt(l, j)
			}
			c0 := 0.0
			if beta != 0 {
				c0 = beta * c[i*ldc+j]
			}
			c[i*ldc+j] = alpha*s + c0
		}
	}
}

func TestCPUGemmMatchesNaive(t *testing.T) {
	type dims struct{ m, n, k int }
	shapes := []dims{
		{1, 1, 1}, {1, 7, 63}, {7, 1, 65}, {63, 65, 1}, {65, 63, 7},
		{7, 65, 63}, {64, 64, 64}, {65, 193, 257}, {130, 7, 300}, {3, 400, 2},
	}
	scalars := []struct{ alpha, beta float32 }{{1, 0}, {0.5, 1}, {-1.5, 0.25}}
	rng := rand.New(rand.NewPCG(7, 7))
	backends := []struct {
		name string
		be   *CPU
	}{
		{"default", NewCPU()},
		// Tiny tiles put tile edges everywhere, in all three dimensions.
		{"tiles 5x7x3", &CPU{mb: 5, nb: 7, kb: 3}},
	}
	for _, bk := range backends {
		be := bk.be
		for _, d := range shapes {
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					for pi, sc := range scalars {
						// Awkward leading dimensions: padded by a few elements,
						// except for one case at the minimum.
						pad := 3 * pi
						ra, ca := d.m, d.k
						if tA {
							ra, ca = d.k, d.m
						}
						rb, cb := d.k, d.n
						if tB {
							rb, cb = d.n, d.k
						}
						lda, ldb, ldc := ca+pad, cb+pad, d.n+pad
						name := fmt.Sprintf("%s/%dx%dx%d/tA=%v/tB=%v/alpha=%v/beta=%v", bk.name, d.m, d.n, d.k, tA, tB, sc.alpha, sc.beta)
						t.Run(name, func(t *testing.T) {
							a := randVec(rng, (ra-1)*lda+ca)
							b := randVec(rng, (rb-1)*ldb+cb)
							c := randVec(rng, (d.m-1)*ldc+d.n)
							if sc.beta == 0 {
								for i := range c {
									c[i] = float32(math.NaN()) // beta 0 must ignore C
								}
							}
							want := make([]float64, len(c))
							for i, v := range c {
								want[i] = float64(v)
							}
							naiveGemm(tA, tB, d.m, d.n, d.k, float64(sc.alpha), a, lda, b, ldb, float64(sc.beta), want, ldc)
							be.Gemm(tA, tB, d.m, d.n, d.k, sc.alpha, a, lda, b, ldb, sc.beta, c, ldc)
							// Entries are sums of k products of values in (-1, 1).
							tol := float64(d.k+2) * 0x1p-22
							for i := range d.m {
								for j := range d.n {
									got, w := float64(c[i*ldc+j]), want[i*ldc+j]
									require.InDelta(t, w, got, tol, "C[%d][%d]", i, j)
								}
								// Padding between rows is left alone.
								for j := d.n; j < ldc && i*ldc+j < len(c); j++ {
									if sc.beta != 0 {
										require.Equal(t, float32(want[i*ldc+j]), c[i*ldc+j], "padding C[%d][%d] changed", i, j)
									}
								}
							}
						})
					}
				}
			}
		}
	}
}

func TestCPUGemmPanicsOnBadArguments(t *testing.T) {
	be := NewCPU()
	a := make([]float32, 6)
	b := make([]float32, 6)
	c := make([]float32, 4)
	tests := []struct {
		name string
		call func()
		msg  string
	}{
		{"short A", func() { be.Gemm(false, false, 2, 2, 3, 1, a[:5], 3, b, 2, 0, c, 2) },
			"nn: Gemm: len(a) = 5, want >= 6 for a 2×3 matrix with leading dimension 3"},
		{"short C", func() { be.Gemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c[:3], 2) },
			"nn: Gemm: len(c) = 3, want >= 4 for a 2×2 matrix with leading dimension 2"},
		{"small ldb", func() { be.Gemm(false, true, 2, 2, 3, 1, a, 3, b, 2, 0, c, 2) },
			"nn: Gemm: ldb = 2, want >= 3"},
		{"negative m", func() { be.Gemm(false, false, -1, 2, 3, 1, a, 3, b, 2, 0, c, 2) },
			"nn: Gemm: negative dimension m=-1 n=2 k=3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tc.msg, tc.call)
		})
	}
}

// TestCPUGemmSerialNoAlloc checks that a product large enough for gonum's
// Sgemm to go parallel runs without allocating (so without goroutines).
func TestCPUGemmSerialNoAlloc(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	m, n, k := 300, 300, 300
	a, b, c := randVec(rng, m*k), randVec(rng, k*n), make([]float32, m*n)
	be := NewCPU()
	allocs := testing.AllocsPerRun(3, func() {
		be.Gemm(false, true, m, n, k, 1, a, k, b, k, 0, c, n)
	})
	assert.Zero(t, allocs)
	assert.Equal(t, "cpu/gonum", be.Name())
}
