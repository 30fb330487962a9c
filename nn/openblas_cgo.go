//go:build cgo

package nn

// The binding includes no OpenBLAS header and links no OpenBLAS library:
// the CBLAS prototypes are written out below, the library is dlopened
// (package internal/dl) and its functions are called through one-line
// trampolines. The CBLAS enums
// are C enums (int); OpenBLAS's blasint is int unless it was built with
// INTERFACE64, which loadOpenBLAS refuses.

/*
#cgo noescape shoal_sgemm
#cgo nocallback shoal_sgemm
#include <stddef.h>
#include <stdint.h>

typedef void (*shoal_sgemm_fn)(int order, int ta, int tb, int m, int n, int k,
	float alpha, const float *a, int lda, const float *b, int ldb,
	float beta, float *c, int ldc);
typedef void (*shoal_set_threads_fn)(int);
typedef int (*shoal_get_threads_fn)(void);
typedef char *(*shoal_get_config_fn)(void);

static void shoal_sgemm(void *f, int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) { ((shoal_sgemm_fn)f)(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); }
static void shoal_set_threads(void *f, int n) { ((shoal_set_threads_fn)f)(n); }
static int shoal_get_threads(void *f) { return ((shoal_get_threads_fn)f)(); }
static const char *shoal_get_config(void *f) { return ((shoal_get_config_fn)f)(); }

*/
import "C"

import (
	"errors"
	"strings"
	"unsafe"

	"github.com/shoalml/shoal/internal/dl"
)

// CBLAS constants (cblas.h).
const (
	cblasRowMajor = 101
	cblasNoTrans  = 111
	cblasTrans    = 112
)

// blasLib is a loaded OpenBLAS: its handle and the functions used. It is
// never unloaded.
type blasLib struct {
	path, config string
	skipped      []BLASAttempt  // tried and refused before this one
	sgemmFn      unsafe.Pointer // cblas_sgemm
	setThreadsFn unsafe.Pointer // openblas_set_num_threads, or nil
	getThreadsFn unsafe.Pointer // openblas_get_num_threads, or nil
}

func loadOpenBLAS(s dl.Search) (*blasLib, error) {
	return searchBLAS(s, dl.FileExists, openBLASLib)
}

// openBLASLib dlopens c.Arg and resolves the functions; it closes the
// library again if it is not a usable OpenBLAS.
func openBLASLib(c dl.Candidate) (*blasLib, error) {
	h, err := dl.Open(c.Arg)
	if err != nil {
		return nil, err
	}
	lib := &blasLib{}
	if lib.sgemmFn, err = h.Sym("cblas_sgemm"); err != nil {
		h.Close()
		return nil, err
	}
	if cfg, err := h.Sym("openblas_get_config"); err == nil {
		lib.config = strings.TrimSpace(C.GoString(C.shoal_get_config(cfg)))
	} else if openblasOnly(c) {
		h.Close()
		return nil, errors.New("exports cblas_sgemm but is not OpenBLAS (no openblas_get_config); a reference BLAS would be slower than gonum")
	}
	if strings.Contains(lib.config, "USE64BITINT") {
		h.Close()
		return nil, errors.New("built with 64-bit integers (" + lib.config + "); want the 32-bit-int interface")
	}
	lib.setThreadsFn, _ = h.Sym("openblas_set_num_threads")
	lib.getThreadsFn, _ = h.Sym("openblas_get_num_threads")
	lib.path = h.Path(lib.sgemmFn)
	if lib.config == "" {
		lib.config = "OpenBLAS"
	}
	return lib, nil
}

func (l *blasLib) threads() int {
	if l.getThreadsFn == nil {
		return 0
	}
	return int(C.shoal_get_threads(l.getThreadsFn))
}

func (l *blasLib) setThreads(n int) {
	if l.setThreadsFn != nil {
		C.shoal_set_threads(l.setThreadsFn, C.int(n))
	}
}

// sgemm calls cblas_sgemm on row-major operands. The caller has checked
// the arguments and that m, n, k > 0, so every slice has an element 0.
func (l *blasLib) sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	ta, tb := C.int(cblasNoTrans), C.int(cblasNoTrans)
	if tA {
		ta = cblasTrans
	}
	if tB {
		tb = cblasTrans
	}
	C.shoal_sgemm(l.sgemmFn, cblasRowMajor, ta, tb, C.int(m), C.int(n), C.int(k),
		C.float(alpha), (*C.float)(unsafe.Pointer(&a[0])), C.int(lda),
		(*C.float)(unsafe.Pointer(&b[0])), C.int(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}
