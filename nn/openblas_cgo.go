//go:build cgo

package nn

// The binding includes no OpenBLAS header and links no OpenBLAS library:
// the CBLAS prototypes are written out below, the library is dlopened and
// its functions are called through one-line trampolines. The CBLAS enums
// are C enums (int); OpenBLAS's blasint is int unless it was built with
// INTERFACE64, which loadOpenBLAS refuses.

/*
#cgo LDFLAGS: -ldl
#cgo noescape shoal_sgemm
#cgo nocallback shoal_sgemm
#define _GNU_SOURCE
#include <dlfcn.h>
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

// shoal_copy_err copies the calling thread's dlerror() into err (dlerror is
// per thread, so it must be read in the same C call as the failure).
static void shoal_copy_err(char *err, size_t n) {
	const char *e = dlerror();
	size_t i = 0;
	if (e == NULL) e = "unknown error";
	for (; i + 1 < n && e[i] != 0; i++) err[i] = e[i];
	err[i] = 0;
}

static void *shoal_dlopen(const char *path, char *err, size_t n) {
	void *h;
	dlerror();
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) shoal_copy_err(err, n);
	return h;
}

static void *shoal_dlsym(void *h, const char *name, char *err, size_t n) {
	void *p;
	dlerror();
	p = dlsym(h, name);
	if (p == NULL) shoal_copy_err(err, n);
	return p;
}

static void shoal_dlclose(void *h) { dlclose(h); }

// shoal_dladdr_path returns the file of the object that holds sym.
static const char *shoal_dladdr_path(void *sym) {
	Dl_info info;
	if (dladdr(sym, &info) == 0) return NULL;
	return info.dli_fname;
}
*/
import "C"

import (
	"errors"
	"path/filepath"
	"strings"
	"unsafe"
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

func loadOpenBLAS(s blasSearch) (*blasLib, error) {
	return s.search(fileExists, openBLASLib)
}

// openBLASLib dlopens c.arg and resolves the functions; it closes the
// library again if it is not a usable OpenBLAS.
func openBLASLib(c blasCandidate) (*blasLib, error) {
	var errBuf [512]C.char
	h := C.shoal_dlopen(cString(c.arg), &errBuf[0], C.size_t(len(errBuf)))
	if h == nil {
		return nil, errors.New(C.GoString(&errBuf[0]))
	}
	sym := func(name string) (unsafe.Pointer, error) {
		p := C.shoal_dlsym(h, cString(name), &errBuf[0], C.size_t(len(errBuf)))
		if p == nil {
			return nil, errors.New(C.GoString(&errBuf[0]))
		}
		return p, nil
	}
	lib := &blasLib{}
	var err error
	if lib.sgemmFn, err = sym("cblas_sgemm"); err != nil {
		C.shoal_dlclose(h)
		return nil, err
	}
	if cfg, err := sym("openblas_get_config"); err == nil {
		lib.config = strings.TrimSpace(C.GoString(C.shoal_get_config(cfg)))
	} else if c.openblasOnly {
		C.shoal_dlclose(h)
		return nil, errors.New("exports cblas_sgemm but is not OpenBLAS (no openblas_get_config); a reference BLAS would be slower than gonum")
	}
	if strings.Contains(lib.config, "USE64BITINT") {
		C.shoal_dlclose(h)
		return nil, errors.New("built with 64-bit integers (" + lib.config + "); want the 32-bit-int interface")
	}
	lib.setThreadsFn, _ = sym("openblas_set_num_threads")
	lib.getThreadsFn, _ = sym("openblas_get_num_threads")
	lib.path = c.arg
	if p := C.shoal_dladdr_path(lib.sgemmFn); p != nil {
		lib.path = C.GoString(p)
	}
	if r, err := filepath.EvalSymlinks(lib.path); err == nil {
		lib.path = r
	}
	if lib.config == "" {
		lib.config = "OpenBLAS"
	}
	return lib, nil
}

// cString returns s NUL-terminated in Go memory, for C calls that do not
// keep it (dlopen and dlsym copy their arguments); it saves including
// <stdlib.h> for C.CString's free.
func cString(s string) *C.char {
	b := append([]byte(s), 0)
	return (*C.char)(unsafe.Pointer(&b[0]))
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
