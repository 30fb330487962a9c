//go:build cgo

package gpu

// The binding includes no CUDA header and links no CUDA library: the types
// and prototypes it needs are written out below, the libraries are
// dlopened (package internal/dl) and every function is called through a
// one-line trampoline. Names are CUDA 13's versioned exports (GPU.md).

/*
#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

typedef CUresult (*fn_i)(unsigned int);
typedef CUresult (*fn_pi)(int *);
typedef CUresult (*fn_pi_i)(int *, int);
typedef CUresult (*fn_name)(char *, int, int);
typedef CUresult (*fn_attr)(int *, int, int);
typedef CUresult (*fn_totalmem)(size_t *, int);
typedef CUresult (*fn_pp_i)(void **, int);
typedef CUresult (*fn_dev)(int);
typedef CUresult (*fn_p)(void *);
typedef CUresult (*fn_pp_u)(void **, unsigned int);
typedef CUresult (*fn_alloc)(CUdeviceptr *, size_t);
typedef CUresult (*fn_free)(CUdeviceptr);
typedef CUresult (*fn_hostalloc)(void **, size_t, unsigned int);
typedef CUresult (*fn_htod)(CUdeviceptr, const void *, size_t, void *);
typedef CUresult (*fn_dtoh)(void *, CUdeviceptr, size_t, void *);
typedef CUresult (*fn_memset)(CUdeviceptr, unsigned int, size_t, void *);
typedef CUresult (*fn_modload)(void **, const void *);
typedef CUresult (*fn_getfn)(void **, void *, const char *);
typedef CUresult (*fn_launch)(void *, unsigned int, unsigned int, unsigned int,
	unsigned int, unsigned int, unsigned int, unsigned int, void *, void **, void **);
typedef CUresult (*fn_errstr)(CUresult, const char **);

static CUresult shoal_cu_i(void *f, unsigned int a) { return ((fn_i)f)(a); }
static CUresult shoal_cu_pi(void *f, int *a) { return ((fn_pi)f)(a); }
static CUresult shoal_cu_pi_i(void *f, int *a, int b) { return ((fn_pi_i)f)(a, b); }
static CUresult shoal_cu_name(void *f, char *a, int n, int d) { return ((fn_name)f)(a, n, d); }
static CUresult shoal_cu_attr(void *f, int *a, int attr, int d) { return ((fn_attr)f)(a, attr, d); }
static CUresult shoal_cu_totalmem(void *f, size_t *a, int d) { return ((fn_totalmem)f)(a, d); }
static CUresult shoal_cu_pp_i(void *f, void **a, int d) { return ((fn_pp_i)f)(a, d); }
static CUresult shoal_cu_dev(void *f, int d) { return ((fn_dev)f)(d); }
static CUresult shoal_cu_p(void *f, void *a) { return ((fn_p)f)(a); }
static CUresult shoal_cu_pp_u(void *f, void **a, unsigned int u) { return ((fn_pp_u)f)(a, u); }
static CUresult shoal_cu_alloc(void *f, CUdeviceptr *p, size_t n) { return ((fn_alloc)f)(p, n); }
static CUresult shoal_cu_free(void *f, CUdeviceptr p) { return ((fn_free)f)(p); }
static CUresult shoal_cu_hostalloc(void *f, void **p, size_t n, unsigned int fl) { return ((fn_hostalloc)f)(p, n, fl); }
static CUresult shoal_cu_htod(void *f, CUdeviceptr d, const void *h, size_t n, void *s) { return ((fn_htod)f)(d, h, n, s); }
static CUresult shoal_cu_dtoh(void *f, void *h, CUdeviceptr d, size_t n, void *s) { return ((fn_dtoh)f)(h, d, n, s); }
static CUresult shoal_cu_memset(void *f, CUdeviceptr d, unsigned int v, size_t n, void *s) { return ((fn_memset)f)(d, v, n, s); }
static CUresult shoal_cu_modload(void *f, void **m, const void *img) { return ((fn_modload)f)(m, img); }
static CUresult shoal_cu_getfn(void *f, void **fn, void *m, const char *name) { return ((fn_getfn)f)(fn, m, name); }
static CUresult shoal_cu_errstr(void *f, CUresult r, const char **s) { return ((fn_errstr)f)(r, s); }

// CUDA graphs: stream capture, instantiation, launch (optional symbols).
typedef CUresult (*fn_begincap)(void *, int);
typedef CUresult (*fn_endcap)(void *, void **);
typedef CUresult (*fn_instantiate)(void **, void *, unsigned long long);
typedef CUresult (*fn_glaunch)(void *, void *);
static CUresult shoal_cu_begincap(void *f, void *s, int mode) { return ((fn_begincap)f)(s, mode); }
static CUresult shoal_cu_endcap(void *f, void *s, void **g) { return ((fn_endcap)f)(s, g); }
static CUresult shoal_cu_instantiate(void *f, void **e, void *g) { return ((fn_instantiate)f)(e, g, 0); }
static CUresult shoal_cu_glaunch(void *f, void *e, void *s) { return ((fn_glaunch)f)(e, s); }

// shoal_cu_launch builds the kernel's parameter array from the packed
// arguments args (each at offs[i]) on the C stack, so no Go pointer is
// stored in memory that C reads.
static CUresult shoal_cu_launch(void *f, void *fn, unsigned int grid, unsigned int block, unsigned int shmem,
		void *stream, uint8_t *args, const int32_t *offs, int nargs) {
	void *params[16];
	int i;
	if (nargs > 16) return 1;
	for (i = 0; i < nargs; i++) params[i] = args + offs[i];
	return ((fn_launch)f)(fn, grid, 1, 1, block, 1, 1, shmem, stream, params, NULL);
}

// cuBLAS.
typedef int (*fn_bcreate)(void **);
typedef int (*fn_bdestroy)(void *);
typedef int (*fn_bstream)(void *, void *);
typedef int (*fn_sgemm)(void *, int, int, int, int, int, const float *, const float *, int,
	const float *, int, const float *, float *, int);
static int shoal_blas_create(void *f, void **h) { return ((fn_bcreate)f)(h); }
static int shoal_blas_destroy(void *f, void *h) { return ((fn_bdestroy)f)(h); }
static int shoal_blas_stream(void *f, void *h, void *s) { return ((fn_bstream)f)(h, s); }
typedef int (*fn_bworkspace)(void *, CUdeviceptr, size_t);
static int shoal_blas_workspace(void *f, void *h, CUdeviceptr p, size_t n) { return ((fn_bworkspace)f)(h, p, n); }
static int shoal_blas_sgemm(void *f, void *h, int ta, int tb, int m, int n, int k, float alpha,
		CUdeviceptr a, int lda, CUdeviceptr b, int ldb, float beta, CUdeviceptr c, int ldc) {
	return ((fn_sgemm)f)(h, ta, tb, m, n, k, &alpha, (const float *)a, lda, (const float *)b, ldb, &beta, (float *)c, ldc);
}
// cublasGemmEx: the data types are cudaDataType_t (CUDA_R_32F 0,
// CUDA_R_16F 2, CUDA_R_16BF 14), the compute type cublasComputeType_t
// (CUBLAS_COMPUTE_32F 68: alpha and beta are floats), the algorithm
// CUBLAS_GEMM_DEFAULT (-1), which takes the tensor cores for half inputs.
typedef int (*fn_gemmex)(void *, int, int, int, int, int, const void *, const void *, int, int,
	const void *, int, int, const void *, void *, int, int, int, int);
static int shoal_blas_gemmex(void *f, void *h, int ta, int tb, int m, int n, int k, float alpha,
		CUdeviceptr a, int atype, int lda, CUdeviceptr b, int btype, int ldb, float beta, CUdeviceptr c, int ctype, int ldc) {
	return ((fn_gemmex)f)(h, ta, tb, m, n, k, &alpha, (const void *)a, atype, lda, (const void *)b, btype, ldb,
		&beta, (void *)c, ctype, ldc, 68, -1);
}

// NVRTC.
typedef int (*fn_nvver)(int *, int *);
typedef int (*fn_nvcreate)(void **, const char *, const char *, int, const char *const *, const char *const *);
typedef int (*fn_nvcompile)(void *, int, const char *const *);
typedef int (*fn_nvsize)(void *, size_t *);
typedef int (*fn_nvget)(void *, char *);
typedef int (*fn_nvdestroy)(void **);
typedef const char *(*fn_nverr)(int);
static int shoal_nv_version(void *f, int *a, int *b) { return ((fn_nvver)f)(a, b); }
static int shoal_nv_create(void *f, void **p, const char *src, const char *name) { return ((fn_nvcreate)f)(p, src, name, 0, NULL, NULL); }
static int shoal_nv_compile(void *f, void *p, int n, const char *const *opts) { return ((fn_nvcompile)f)(p, n, opts); }
static int shoal_nv_size(void *f, void *p, size_t *n) { return ((fn_nvsize)f)(p, n); }
static int shoal_nv_get(void *f, void *p, char *out) { return ((fn_nvget)f)(p, out); }
static int shoal_nv_destroy(void *f, void **p) { return ((fn_nvdestroy)f)(p); }
static const char *shoal_nv_err(void *f, int r) { return ((fn_nverr)f)(r); }
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/shoalml/shoal/internal/dl"
)

// libs is the loaded CUDA libraries and their functions.
type libs struct {
	cudaPath, nvrtcPath, cublasPath string

	cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName,
	cuDeviceGetAttribute, cuDeviceTotalMem, cuDevicePrimaryCtxRetain,
	cuDevicePrimaryCtxRelease, cuCtxSetCurrent, cuStreamCreate, cuStreamDestroy,
	cuStreamSynchronize, cuMemAlloc, cuMemFree, cuMemHostAlloc, cuMemFreeHost,
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemsetD32Async, cuModuleLoadData,
	cuModuleUnload, cuModuleGetFunction, cuLaunchKernel, cuGetErrorName,
	cuGetErrorString unsafe.Pointer

	cublasCreate, cublasDestroy, cublasSetStream, cublasSgemm, cublasGemmEx unsafe.Pointer

	// Optional: nil where the library lacks them (see graphSymbols).
	cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiate, cuGraphLaunch,
	cuGraphExecDestroy, cuGraphDestroy, cublasSetWorkspace unsafe.Pointer
	// graphsMissing names the graph functions the driver lacks.
	graphsMissing []string

	nvrtcVersion, nvrtcCreateProgram, nvrtcCompileProgram, nvrtcGetProgramLogSize,
	nvrtcGetProgramLog, nvrtcGetCUBINSize, nvrtcGetCUBIN, nvrtcDestroyProgram,
	nvrtcGetErrorString unsafe.Pointer
}

// symbol names one function of a library and where to store it.
type symbol struct {
	name string
	p    *unsafe.Pointer
}

func (l *libs) cudaSymbols() []symbol {
	return []symbol{
		{"cuInit", &l.cuInit}, {"cuDriverGetVersion", &l.cuDriverGetVersion},
		{"cuDeviceGetCount", &l.cuDeviceGetCount}, {"cuDeviceGet", &l.cuDeviceGet},
		{"cuDeviceGetName", &l.cuDeviceGetName}, {"cuDeviceGetAttribute", &l.cuDeviceGetAttribute},
		{"cuDeviceTotalMem_v2", &l.cuDeviceTotalMem}, {"cuDevicePrimaryCtxRetain", &l.cuDevicePrimaryCtxRetain},
		{"cuDevicePrimaryCtxRelease_v2", &l.cuDevicePrimaryCtxRelease}, {"cuCtxSetCurrent", &l.cuCtxSetCurrent},
		{"cuStreamCreate", &l.cuStreamCreate}, {"cuStreamDestroy_v2", &l.cuStreamDestroy},
		{"cuStreamSynchronize", &l.cuStreamSynchronize}, {"cuMemAlloc_v2", &l.cuMemAlloc},
		{"cuMemFree_v2", &l.cuMemFree}, {"cuMemHostAlloc", &l.cuMemHostAlloc}, {"cuMemFreeHost", &l.cuMemFreeHost},
		{"cuMemcpyHtoDAsync_v2", &l.cuMemcpyHtoDAsync}, {"cuMemcpyDtoHAsync_v2", &l.cuMemcpyDtoHAsync},
		{"cuMemsetD32Async", &l.cuMemsetD32Async}, {"cuModuleLoadData", &l.cuModuleLoadData},
		{"cuModuleUnload", &l.cuModuleUnload}, {"cuModuleGetFunction", &l.cuModuleGetFunction},
		{"cuLaunchKernel", &l.cuLaunchKernel}, {"cuGetErrorName", &l.cuGetErrorName},
		{"cuGetErrorString", &l.cuGetErrorString},
	}
}

// graphSymbols are the driver's CUDA graph functions, optional: a driver
// without them runs every step's launches one by one. CUDA 13's names
// (cuStreamBeginCapture is a macro for the _v2 that takes a capture mode).
func (l *libs) graphSymbols() []symbol {
	return []symbol{{"cuStreamBeginCapture_v2", &l.cuStreamBeginCapture}, {"cuStreamEndCapture", &l.cuStreamEndCapture},
		{"cuGraphInstantiateWithFlags", &l.cuGraphInstantiate}, {"cuGraphLaunch", &l.cuGraphLaunch},
		{"cuGraphExecDestroy", &l.cuGraphExecDestroy}, {"cuGraphDestroy", &l.cuGraphDestroy}}
}

func (l *libs) cublasSymbols() []symbol {
	return []symbol{{"cublasCreate_v2", &l.cublasCreate}, {"cublasDestroy_v2", &l.cublasDestroy},
		{"cublasSetStream_v2", &l.cublasSetStream}, {"cublasSgemm_v2", &l.cublasSgemm}, {"cublasGemmEx", &l.cublasGemmEx}}
}

func (l *libs) nvrtcSymbols() []symbol {
	return []symbol{{"nvrtcVersion", &l.nvrtcVersion}, {"nvrtcCreateProgram", &l.nvrtcCreateProgram},
		{"nvrtcCompileProgram", &l.nvrtcCompileProgram}, {"nvrtcGetProgramLogSize", &l.nvrtcGetProgramLogSize},
		{"nvrtcGetProgramLog", &l.nvrtcGetProgramLog}, {"nvrtcGetCUBINSize", &l.nvrtcGetCUBINSize},
		{"nvrtcGetCUBIN", &l.nvrtcGetCUBIN}, {"nvrtcDestroyProgram", &l.nvrtcDestroyProgram},
		{"nvrtcGetErrorString", &l.nvrtcGetErrorString}}
}

// opener returns the open function of a search: dlopen, then resolve every
// symbol into syms, closing the library again if one is missing, and
// those of optional that it has (the others are left nil and their names
// appended to missing).
func opener(syms, optional []symbol, missing *[]string) func(dl.Candidate) (string, error) {
	return func(c dl.Candidate) (string, error) {
		h, err := dl.Open(c.Arg)
		if err != nil {
			return "", err
		}
		for _, s := range syms {
			p, err := h.Sym(s.name)
			if err != nil {
				h.Close()
				return "", fmt.Errorf("lacks %s, so it is not the library wanted or too old (%w)", s.name, err)
			}
			*s.p = p
		}
		for _, s := range optional {
			if *s.p, err = h.Sym(s.name); err != nil {
				*missing = append(*missing, s.name)
			}
		}
		return h.Path(*syms[0].p), nil
	}
}

// load finds and opens the three libraries.
func load(e searchEnv) (*libs, error) {
	l := &libs{}
	cuda, nvrtc, cublasLt, cublas := e.searches()
	var err error
	if l.cudaPath, _, err = dl.Find(cuda, dl.FileExists, opener(l.cudaSymbols(), l.graphSymbols(), &l.graphsMissing)); err != nil {
		return nil, &LoadError{Library: "libcuda", Hint: "the NVIDIA driver's library; set " + EnvLibCUDA + " to its path", Err: err}
	}
	if l.nvrtcPath, _, err = dl.Find(nvrtc, dl.FileExists, opener(l.nvrtcSymbols(), nil, nil)); err != nil {
		return nil, &LoadError{Library: "libnvrtc", Hint: "CUDA's run-time compiler, from a CUDA toolkit or the nvidia-cuda-nvrtc wheel; set " + EnvCUDALibDir, Err: err}
	}
	// cuBLAS's own dependency first, from the same kind of folder; its
	// absence is reported by libcublas's dlopen.
	_, _, _ = dl.Find(cublasLt, dl.FileExists, func(c dl.Candidate) (string, error) {
		_, err := dl.Open(c.Arg)
		return c.Arg, err
	})
	if l.cublasPath, _, err = dl.Find(cublas, dl.FileExists, opener(l.cublasSymbols(), []symbol{{"cublasSetWorkspace_v2", &l.cublasSetWorkspace}}, new([]string))); err != nil {
		return nil, &LoadError{Library: "libcublas", Hint: "from a CUDA toolkit or the nvidia-cublas wheel; set " + EnvCUDALibDir, Err: err}
	}
	if r := C.shoal_cu_i(l.cuInit, 0); r != 0 {
		return nil, fmt.Errorf("%w: cuInit: %w", ErrUnavailable, l.cuErr(r))
	}
	return l, nil
}

var loadOnce = sync.OnceValues(func() (*libs, error) { return load(defaultSearchEnv()) })

// CUDAError is a CUDA driver, cuBLAS or NVRTC error code.
type CUDAError struct {
	API  string // "cuda", "cublas", "nvrtc"
	Code int
	Name string
	Text string
}

func (e *CUDAError) Error() string {
	return fmt.Sprintf("%s error %d (%s): %s", e.API, e.Code, e.Name, e.Text)
}

// Sticky reports whether the error leaves the context unusable (an
// illegal address or a failed launch): the process must exit.
func (e *CUDAError) Sticky() bool { return e.API == "cuda" && (e.Code == 700 || e.Code == 719) }

func (l *libs) cuErr(r C.CUresult) error {
	if r == 0 {
		return nil
	}
	e := &CUDAError{API: "cuda", Code: int(r), Name: "?", Text: "?"}
	var s *C.char
	if C.shoal_cu_errstr(l.cuGetErrorName, r, &s) == 0 && s != nil {
		e.Name = C.GoString(s)
	}
	if C.shoal_cu_errstr(l.cuGetErrorString, r, &s) == 0 && s != nil {
		e.Text = C.GoString(s)
	}
	return e
}

func blasErr(op string, r C.int) error {
	if r == 0 {
		return nil
	}
	names := map[int]string{1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
		8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
		14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED"}
	return &CUDAError{API: "cublas", Code: int(r), Name: names[int(r)], Text: op}
}

func (l *libs) nvrtcErr(r C.int) error {
	if r == 0 {
		return nil
	}
	return &CUDAError{API: "nvrtc", Code: int(r), Name: C.GoString(C.shoal_nv_err(l.nvrtcGetErrorString, r)), Text: "compiling the kernels"}
}

// cString returns s NUL-terminated in Go memory, for C calls that copy it.
func cString(s string) *C.char {
	b := append([]byte(s), 0)
	return (*C.char)(unsafe.Pointer(&b[0]))
}

// driverVersion returns the driver's CUDA version, e.g. 13000.
func (l *libs) driverVersion() int {
	var v C.int
	if C.shoal_cu_pi(l.cuDriverGetVersion, &v) != 0 {
		return 0
	}
	return int(v)
}

// nvrtcVersionString returns NVRTC's version, e.g. "13.0".
func (l *libs) nvrtcVersionString() string {
	var a, b C.int
	if C.shoal_nv_version(l.nvrtcVersion, &a, &b) != 0 {
		return "?"
	}
	return fmt.Sprintf("%d.%d", a, b)
}

// compile compiles src with NVRTC to a CUBIN for the options; on a
// compile error it returns NVRTC's log.
func (l *libs) compile(src string, opts []string) ([]byte, error) {
	var prog unsafe.Pointer
	if err := l.nvrtcErr(C.shoal_nv_create(l.nvrtcCreateProgram, &prog, cString(src), cString("kernels.cu"))); err != nil {
		return nil, err
	}
	defer C.shoal_nv_destroy(l.nvrtcDestroyProgram, &prog)
	// The options in one byte block, pinned, so that the array of their
	// addresses (Go memory holding pointers to pinned memory) may be
	// passed to C; NVRTC copies them.
	copts := make([]*C.char, len(opts))
	block := []byte(strings.Join(opts, "\x00") + "\x00")
	off := 0
	for i, o := range opts {
		copts[i] = (*C.char)(unsafe.Pointer(&block[off]))
		off += len(o) + 1
	}
	var pin runtime.Pinner
	pin.Pin(&block[0])
	defer pin.Unpin()
	var optp **C.char
	if len(copts) > 0 {
		optp = &copts[0]
	}
	r := C.shoal_nv_compile(l.nvrtcCompileProgram, prog, C.int(len(opts)), optp)
	if r != 0 {
		var n C.size_t
		log := ""
		if C.shoal_nv_size(l.nvrtcGetProgramLogSize, prog, &n) == 0 && n > 1 {
			b := make([]byte, n)
			if C.shoal_nv_get(l.nvrtcGetProgramLog, prog, (*C.char)(unsafe.Pointer(&b[0]))) == 0 {
				log = strings.TrimRight(string(b), "\x00\n")
			}
		}
		return nil, fmt.Errorf("%w:\n%s", l.nvrtcErr(r), log)
	}
	var n C.size_t
	if err := l.nvrtcErr(C.shoal_nv_size(l.nvrtcGetCUBINSize, prog, &n)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("nvrtc produced an empty CUBIN")
	}
	cubin := make([]byte, n)
	if err := l.nvrtcErr(C.shoal_nv_get(l.nvrtcGetCUBIN, prog, (*C.char)(unsafe.Pointer(&cubin[0])))); err != nil {
		return nil, err
	}
	return cubin, nil
}

// The Go face of the driver calls, for the executor (device_cgo.go). Every
// call is made on the executor's thread, where the context is current.

func (l *libs) deviceCount() (int, error) {
	var n C.int
	if err := l.cuErr(C.shoal_cu_pi(l.cuDeviceGetCount, &n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// deviceInfo returns a device's handle, name, compute capability and memory.
func (l *libs) deviceInfo(ordinal int) (dev int, name string, major, minor int, mem uint64, err error) {
	var d C.int
	if err = l.cuErr(C.shoal_cu_pi_i(l.cuDeviceGet, &d, C.int(ordinal))); err != nil {
		return
	}
	var buf [256]C.char
	if err = l.cuErr(C.shoal_cu_name(l.cuDeviceGetName, &buf[0], C.int(len(buf)), d)); err != nil {
		return
	}
	var ma, mi C.int
	// CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR.
	if err = l.cuErr(C.shoal_cu_attr(l.cuDeviceGetAttribute, &ma, 75, d)); err != nil {
		return
	}
	if err = l.cuErr(C.shoal_cu_attr(l.cuDeviceGetAttribute, &mi, 76, d)); err != nil {
		return
	}
	var total C.size_t
	if err = l.cuErr(C.shoal_cu_totalmem(l.cuDeviceTotalMem, &total, d)); err != nil {
		return
	}
	return int(d), C.GoString(&buf[0]), int(ma), int(mi), uint64(total), nil
}

// retainContext makes dev's primary context current on this thread.
func (l *libs) retainContext(dev int) (unsafe.Pointer, error) {
	var ctx unsafe.Pointer
	if err := l.cuErr(C.shoal_cu_pp_i(l.cuDevicePrimaryCtxRetain, &ctx, C.int(dev))); err != nil {
		return nil, err
	}
	if err := l.cuErr(C.shoal_cu_p(l.cuCtxSetCurrent, ctx)); err != nil {
		C.shoal_cu_dev(l.cuDevicePrimaryCtxRelease, C.int(dev))
		return nil, err
	}
	return ctx, nil
}

func (l *libs) releaseContext(dev int) { C.shoal_cu_dev(l.cuDevicePrimaryCtxRelease, C.int(dev)) }

func (l *libs) streamCreate() (unsafe.Pointer, error) {
	var s unsafe.Pointer
	return s, l.cuErr(C.shoal_cu_pp_u(l.cuStreamCreate, &s, 1)) // CU_STREAM_NON_BLOCKING
}

func (l *libs) streamDestroy(s unsafe.Pointer) { C.shoal_cu_p(l.cuStreamDestroy, s) }

func (l *libs) streamSync(s unsafe.Pointer) error {
	return l.cuErr(C.shoal_cu_p(l.cuStreamSynchronize, s))
}

func (l *libs) memAlloc(n int) (uint64, error) {
	var p C.CUdeviceptr
	err := l.cuErr(C.shoal_cu_alloc(l.cuMemAlloc, &p, C.size_t(n)))
	return uint64(p), err
}

func (l *libs) memFree(p uint64) error {
	return l.cuErr(C.shoal_cu_free(l.cuMemFree, C.CUdeviceptr(p)))
}

// hostAlloc returns n bytes of pinned host memory.
func (l *libs) hostAlloc(n int) ([]byte, error) {
	var p unsafe.Pointer
	if err := l.cuErr(C.shoal_cu_hostalloc(l.cuMemHostAlloc, &p, C.size_t(n), 0)); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

func (l *libs) hostFree(b []byte) { C.shoal_cu_p(l.cuMemFreeHost, unsafe.Pointer(&b[0])) }

// htod and dtoh queue copies between device memory and pinned memory.
func (l *libs) htod(dst uint64, src []byte, s unsafe.Pointer) error {
	return l.cuErr(C.shoal_cu_htod(l.cuMemcpyHtoDAsync, C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)), s))
}

func (l *libs) dtoh(dst []byte, src uint64, s unsafe.Pointer) error {
	return l.cuErr(C.shoal_cu_dtoh(l.cuMemcpyDtoHAsync, unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst)), s))
}

func (l *libs) memsetD32(p uint64, v uint32, n int, s unsafe.Pointer) error {
	return l.cuErr(C.shoal_cu_memset(l.cuMemsetD32Async, C.CUdeviceptr(p), C.uint(v), C.size_t(n), s))
}

// loadModule loads a CUBIN and resolves the kernels.
func (l *libs) loadModule(cubin []byte, names []string) (unsafe.Pointer, map[string]unsafe.Pointer, error) {
	var mod unsafe.Pointer
	if err := l.cuErr(C.shoal_cu_modload(l.cuModuleLoadData, &mod, unsafe.Pointer(&cubin[0]))); err != nil {
		return nil, nil, err
	}
	fns := map[string]unsafe.Pointer{}
	for _, n := range names {
		var f unsafe.Pointer
		if err := l.cuErr(C.shoal_cu_getfn(l.cuModuleGetFunction, &f, mod, cString(n))); err != nil {
			C.shoal_cu_p(l.cuModuleUnload, mod)
			return nil, nil, fmt.Errorf("kernel %s: %w", n, err)
		}
		fns[n] = f
	}
	return mod, fns, nil
}

func (l *libs) unloadModule(mod unsafe.Pointer) { C.shoal_cu_p(l.cuModuleUnload, mod) }

// launch queues kernel f over grid blocks of block threads; args holds the
// packed arguments, each at offs[i].
func (l *libs) launch(f unsafe.Pointer, grid, block int, s unsafe.Pointer, args []byte, offs []int32) error {
	return l.cuErr(C.shoal_cu_launch(l.cuLaunchKernel, f, C.uint(grid), C.uint(block), 0, s,
		(*C.uint8_t)(unsafe.Pointer(&args[0])), (*C.int32_t)(unsafe.Pointer(&offs[0])), C.int(len(offs))))
}

func (l *libs) blasCreate(s unsafe.Pointer) (unsafe.Pointer, error) {
	var h unsafe.Pointer
	if err := blasErr("cublasCreate", C.shoal_blas_create(l.cublasCreate, &h)); err != nil {
		return nil, err
	}
	if err := blasErr("cublasSetStream", C.shoal_blas_stream(l.cublasSetStream, h, s)); err != nil {
		C.shoal_blas_destroy(l.cublasDestroy, h)
		return nil, err
	}
	return h, nil
}

func (l *libs) blasDestroy(h unsafe.Pointer) { C.shoal_blas_destroy(l.cublasDestroy, h) }

// blasOp is cuBLAS's operation: CUBLAS_OP_T for a transposed operand,
// else CUBLAS_OP_N.
func blasOp(t bool) C.int {
	if t {
		return 1
	}
	return 0
}

// sgemm is cublasSgemm on column-major operands (the caller transposes).
func (l *libs) sgemm(h unsafe.Pointer, ta, tb bool, m, n, k int, alpha float32, a uint64, lda int, b uint64, ldb int, beta float32, c uint64, ldc int) error {
	return blasErr("cublasSgemm", C.shoal_blas_sgemm(l.cublasSgemm, h, blasOp(ta), blasOp(tb), C.int(m), C.int(n), C.int(k),
		C.float(alpha), C.CUdeviceptr(a), C.int(lda), C.CUdeviceptr(b), C.int(ldb), C.float(beta), C.CUdeviceptr(c), C.int(ldc)))
}

// The cudaDataType_t values gemmHalf uses.
const (
	cudaR32F  = 0
	cudaR16F  = 2
	cudaR16BF = 14
)

// gemmHalf is cublasGemmEx with a and b in float16 (bf16 false) or
// bfloat16, c in float32, accumulating in float32, on column-major
// operands (the caller transposes).
func (l *libs) gemmHalf(h unsafe.Pointer, ta, tb bool, m, n, k int, alpha float32, a uint64, lda int, b uint64, ldb int, beta float32, c uint64, ldc int, bf16 bool) error {
	half := C.int(cudaR16F)
	if bf16 {
		half = cudaR16BF
	}
	return blasErr("cublasGemmEx", C.shoal_blas_gemmex(l.cublasGemmEx, h, blasOp(ta), blasOp(tb), C.int(m), C.int(n), C.int(k),
		C.float(alpha), C.CUdeviceptr(a), half, C.int(lda), C.CUdeviceptr(b), half, C.int(ldb), C.float(beta), C.CUdeviceptr(c), cudaR32F, C.int(ldc)))
}

// The CUDA graph calls, for the executor (graph_cgo.go).

// ErrNoGraphs is wrapped by the error of a capture the driver cannot
// make: it lacks the graph functions.
var ErrNoGraphs = errors.New("gpu: the CUDA driver has no graph functions")

// graphsErr says why this driver cannot capture graphs, or nil.
func (l *libs) graphsErr() error {
	if len(l.graphsMissing) > 0 {
		return fmt.Errorf("%w: %s lacks %s", ErrNoGraphs, l.cudaPath, strings.Join(l.graphsMissing, ", "))
	}
	return nil
}

// captureRelaxed is CU_STREAM_CAPTURE_MODE_RELAXED: the capturing thread
// may still allocate (pinned memory for the graph's copies), which the
// global and thread-local modes forbid.
const captureRelaxed = 2

func (l *libs) beginCapture(s unsafe.Pointer) error {
	return l.cuErr(C.shoal_cu_begincap(l.cuStreamBeginCapture, s, captureRelaxed))
}

// endCapture ends the stream's capture; the graph is nil when the capture
// failed (an invalidated capture still ends it).
func (l *libs) endCapture(s unsafe.Pointer) (unsafe.Pointer, error) {
	var g unsafe.Pointer
	err := l.cuErr(C.shoal_cu_endcap(l.cuStreamEndCapture, s, &g))
	return g, err
}

func (l *libs) instantiate(g unsafe.Pointer) (unsafe.Pointer, error) {
	var e unsafe.Pointer
	err := l.cuErr(C.shoal_cu_instantiate(l.cuGraphInstantiate, &e, g))
	return e, err
}

func (l *libs) graphLaunch(e, s unsafe.Pointer) error {
	return l.cuErr(C.shoal_cu_glaunch(l.cuGraphLaunch, e, s))
}

func (l *libs) graphExecDestroy(e unsafe.Pointer) { C.shoal_cu_p(l.cuGraphExecDestroy, e) }
func (l *libs) graphDestroy(g unsafe.Pointer)     { C.shoal_cu_p(l.cuGraphDestroy, g) }

// blasWorkspace gives cuBLAS n bytes at p as its workspace, where the
// library has cublasSetWorkspace (false where it has not): cuBLAS's own
// would be allocated inside a capture otherwise, and the same workspace
// in eager and captured steps keeps their GEMMs the same.
func (l *libs) blasWorkspace(h unsafe.Pointer, p uint64, n int) (bool, error) {
	if l.cublasSetWorkspace == nil {
		return false, nil
	}
	return true, blasErr("cublasSetWorkspace", C.shoal_blas_workspace(l.cublasSetWorkspace, h, C.CUdeviceptr(p), C.size_t(n)))
}
