package nn

import (
	"fmt"
	"strings"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// gonum's Sgemm splits a product into 64×64 blocks of C and, once there are
// four or more of them, runs each block in its own goroutine (allocating a
// channel, a closure and a goroutine per block). The CPU backend instead cuts
// C into tiles of at most cpuTileM×cpuTileN, few enough blocks that gonum
// stays serial, and the inner dimension into slabs of cpuTileK so the panels
// it streams stay in cache. The result is the same kernels, run serially,
// with no allocation. The tile sizes measured best, on the products of the
// default models, of a handful tried (64×64×64 like gonum's blocks,
// 64×128×128, 32×192×128, …); BenchmarkCPUGemm compares the result with
// gonum's own path.
const (
	gonumBlock = 64 // gonum's blockSize
	gonumMinPB = 4  // gonum's minParBlock

	cpuTileM = 64
	cpuTileN = 192
	cpuTileK = 256
)

// CPU is the Backend that runs on the host with gonum's pure-Go float32
// BLAS (SSE kernels on amd64). It runs every product serially on the
// calling goroutine and allocates nothing: Shoal scales out with one worker
// per core rather than with threads inside a GEMM.
//
// A CPU holds no state; it is safe for concurrent use, although models use
// their backend from one goroutine at a time. The zero value is ready to
// use.
type CPU struct {
	impl       gonum.Implementation
	mb, nb, kb int // tile sizes, 0 for the defaults; see cpuTileM
}

var _ Backend = (*CPU)(nil)

// NewCPU returns the gonum-backed CPU backend.
func NewCPU() *CPU { return &CPU{} }

// tiles returns the tile sizes: the defaults, unless a benchmark set others.
func (c *CPU) tiles() (mb, nb, kb int) {
	if c.mb == 0 {
		return cpuTileM, cpuTileN, cpuTileK
	}
	return c.mb, c.nb, c.kb
}

// Name returns "cpu/gonum".
func (*CPU) Name() string { return "cpu/gonum" }

// Gemm computes C = alpha·op(A)·op(B) + beta·C; see Backend. It panics, as
// gonum does, on a negative dimension, a leading dimension too small for
// its matrix, or a slice too short.
func (c *CPU) Gemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, cm []float32, ldc int) {
	// gonum would only scale C for an empty product too, but for a large
	// C it would do so after entering its parallel path.
	if gemmTrivial(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, cm, ldc) {
		return
	}
	ta, tb := blas.NoTrans, blas.NoTrans
	if tA {
		ta = blas.Trans
	}
	if tB {
		tb = blas.Trans
	}
	mb, nb, kb := c.tiles()
	if blocks(m, gonumBlock)*blocks(n, gonumBlock) < gonumMinPB && k <= kb {
		c.impl.Sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cm, ldc)
		return
	}
	// Balanced tiles: ceil(m/mb) row tiles of equal height, and so on.
	mt := evenTile(m, mb)
	nt := evenTile(n, nb)
	kt := evenTile(k, kb)
	for i := 0; i < m; i += mt {
		mi := min(mt, m-i)
		for j := 0; j < n; j += nt {
			nj := min(nt, n-j)
			ct := cm[i*ldc+j:]
			for l := 0; l < k; l += kt {
				kl := min(kt, k-l)
				var at, bt []float32
				if tA {
					at = a[l*lda+i:]
				} else {
					at = a[i*lda+l:]
				}
				if tB {
					bt = b[j*ldb+l:]
				} else {
					bt = b[l*ldb+j:]
				}
				bl := beta
				if l > 0 {
					bl = 1
				}
				c.impl.Sgemm(ta, tb, mi, nj, kl, alpha, at, lda, bt, ldb, bl, ct, ldc)
			}
		}
	}
}

// gemmTrivial checks a Gemm's operands (see checkGemm) and computes the
// products that multiply nothing: for m or n zero there is nothing to do,
// for k or alpha zero C = beta·C. It reports whether it did the product.
func gemmTrivial(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	checkGemm(tA, tB, m, n, k, lda, ldb, ldc, len(a), len(b), len(c))
	if m == 0 || n == 0 {
		return true
	}
	if k == 0 || alpha == 0 {
		scale(beta, c, m, n, ldc)
		return true
	}
	return false
}

// checkGemm panics, as gonum does, on a negative dimension, a leading
// dimension smaller than its matrix's row length, or a slice too short.
func checkGemm(tA, tB bool, m, n, k, lda, ldb, ldc, la, lb, lc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("nn: Gemm: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	checkMat(tA, m, k, lda, la, "A")
	checkMat(tB, k, n, ldb, lb, "B")
	checkMat(false, m, n, ldc, lc, "C")
}

// checkMat checks a rows×cols operand stored row-major, transposed in
// storage when t, with leading dimension ld in a slice of length l.
func checkMat(t bool, rows, cols, ld, l int, name string) {
	if t {
		rows, cols = cols, rows
	}
	if ld < max(1, cols) {
		panic(fmt.Sprintf("nn: Gemm: ld%s = %d, want >= %d", strings.ToLower(name), ld, max(1, cols)))
	}
	if rows > 0 && cols > 0 && l < (rows-1)*ld+cols {
		panic(fmt.Sprintf("nn: Gemm: len(%s) = %d, want >= %d for a %d×%d matrix with leading dimension %d",
			strings.ToLower(name), l, (rows-1)*ld+cols, rows, cols, ld))
	}
}

// scale sets C = beta·C for the m×n matrix C with leading dimension ldc
// (beta 0 clears C, NaNs included).
func scale(beta float32, c []float32, m, n, ldc int) {
	if beta == 1 {
		return
	}
	if beta == 0 && ldc == n {
		clear(c[:m*n])
		return
	}
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

func blocks(dim, size int) int { return (dim + size - 1) / size }

// evenTile returns the tile length that cuts dim into the fewest tiles of at
// most max, all of about the same length.
func evenTile(dim, max int) int {
	return blocks(dim, blocks(dim, max))
}
