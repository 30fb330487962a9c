//go:build !cgo

package nn

import "github.com/shoalml/shoal/internal/dl"

// Without cgo there is no dlopen: NewOpenBLAS always returns
// ErrUnavailable and NewBestCPU picks the gonum backend.

// blasLib stands in for the cgo build's loaded library; none ever exists.
type blasLib struct {
	path, config string
	skipped      []BLASAttempt
}

func loadOpenBLAS(dl.Search) (*blasLib, error) {
	return nil, &OpenBLASError{Reason: "built without cgo (CGO_ENABLED=0); the gonum backend is used"}
}

func (*blasLib) threads() int   { return 0 }
func (*blasLib) setThreads(int) {}

func (*blasLib) sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	panic("nn: OpenBLAS without cgo")
}
