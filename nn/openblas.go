package nn

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/shoalml/shoal/internal/dl"
)

// ErrUnavailable is wrapped by the errors NewOpenBLAS returns when OpenBLAS
// cannot be used: a build without cgo, or no usable library on the machine.
var ErrUnavailable = errors.New("nn: OpenBLAS unavailable")

// EnvOpenBLAS names the environment variable that points the search at an
// OpenBLAS library (a file, or a directory holding one), or turns OpenBLAS
// off with "off" (NewBestCPU then picks gonum).
const EnvOpenBLAS = "SHOAL_OPENBLAS"

// The sonames tried, in order, in EnvOpenBLAS's directory, through the
// dynamic loader's own search, and in each of openblasDirs.
//
// libopenblas.so.0 is the runtime soname everywhere (Debian and Ubuntu
// point it at the pthread, openmp or serial variant through
// update-alternatives); libopenblas.so is the development link (and what a
// source build installs); libopenblasp.so.0 and libopenblaso.so.0 are
// Fedora's and RHEL's pthread and OpenMP variants. libblas.so.3 comes last
// and is accepted only when it turns out to be OpenBLAS (it exports
// openblas_get_config): on Debian it may be the reference BLAS, which
// exports cblas_sgemm too but runs several times slower than gonum.
var openblasSonames = []string{"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0", "libopenblaso.so.0", "libblas.so.3"}

// openblasDirs are the directories searched after the loader's own search:
// the distributions' variant directories (which the loader does not search
// when the alternatives link is missing), the usual library directories,
// and the default prefix of OpenBLAS's `make install`.
func openblasDirs() []string {
	triple := map[string]string{
		"amd64":   "x86_64-linux-gnu",
		"arm64":   "aarch64-linux-gnu",
		"ppc64le": "powerpc64le-linux-gnu",
		"riscv64": "riscv64-linux-gnu",
		"s390x":   "s390x-linux-gnu",
	}[runtime.GOARCH]
	var dirs []string
	if triple != "" {
		base := "/usr/lib/" + triple
		dirs = append(dirs, base+"/openblas-pthread", base+"/openblas-openmp", base+"/openblas-serial", base)
	}
	return append(dirs, "/usr/lib64", "/usr/lib64/openblas", "/usr/local/lib", "/opt/OpenBLAS/lib", "/usr/lib")
}

// defaultBLASSearch is the search NewOpenBLAS runs.
func defaultBLASSearch() dl.Search {
	return dl.Search{Env: os.Getenv(EnvOpenBLAS), Names: openblasSonames, Dirs: openblasDirs()}
}

// openblasOnly says whether a candidate is accepted only if it is OpenBLAS
// (see openblasSonames on libblas.so.3).
func openblasOnly(c dl.Candidate) bool { return c.Name == "libblas.so.3" }

// BLASAttempt is one library the search tried and why it was not used.
type BLASAttempt = dl.Attempt

// OpenBLASError is the error of a search that found no usable OpenBLAS.
// It wraps ErrUnavailable.
type OpenBLASError struct {
	// Reason is set when no search ran (a build without cgo, or
	// SHOAL_OPENBLAS=off).
	Reason string
	// Tried lists every library tried, in order.
	Tried []BLASAttempt
	// Empty lists the directories searched that held none of the names.
	Empty []string
}

func (e *OpenBLASError) Error() string {
	if e.Reason != "" {
		return "nn: OpenBLAS unavailable: " + e.Reason
	}
	return "nn: OpenBLAS unavailable: no usable library (install libopenblas0-pthread, or set " + EnvOpenBLAS + " to its path); tried:" +
		(&dl.NotFoundError{Tried: e.Tried, Empty: e.Empty, Names: openblasSonames}).List()
}

func (e *OpenBLASError) Unwrap() error { return ErrUnavailable }

// searchBLAS tries the plan of s in order with open and returns the first
// library it accepts. open dlopens its argument and resolves the symbols,
// failing on a library that is not OpenBLAS when openblasOnly.
func searchBLAS(s dl.Search, exists func(string) bool, open func(dl.Candidate) (*blasLib, error)) (*blasLib, error) {
	lib, tried, err := dl.Find(s, exists, open)
	if err != nil {
		var nf *dl.NotFoundError
		if errors.As(err, &nf) {
			return nil, &OpenBLASError{Tried: nf.Tried, Empty: nf.Empty}
		}
		return nil, err
	}
	lib.skipped = tried
	return lib, nil
}

// openblasOnce loads the library the first time a backend asks for it. It
// is package state because a loaded library is process state: dlopen hands
// every caller the same copy, and its thread count is global to it.
var openblasOnce = sync.OnceValues(func() (*blasLib, error) {
	s := defaultBLASSearch()
	if strings.EqualFold(s.Env, "off") {
		return nil, &OpenBLASError{Reason: EnvOpenBLAS + "=off"}
	}
	return loadOpenBLAS(s)
})

// OpenBLAS is the CPU Backend whose GEMMs run in OpenBLAS's cblas_sgemm,
// loaded at run time with dlopen: the binary has no link-time dependency on
// it (a machine without the library, or a build without cgo, gets the
// ErrUnavailable error from NewOpenBLAS and uses the gonum CPU backend).
//
// OpenBLAS keeps its thread count for the whole process: every OpenBLAS
// backend of a process shares the count the last NewOpenBLAS (or
// SetThreads) set. Give each worker process its share of the cores; with
// several workers on a machine, one thread each.
//
// OpenBLAS is safe for concurrent use (the library is thread-safe), though
// models use their backend from one goroutine at a time.
type OpenBLAS struct {
	lib *blasLib
}

var _ Backend = (*OpenBLAS)(nil)

// NewOpenBLAS loads OpenBLAS (once per process) and, if threads > 0, sets
// its thread count to threads; threads 0 keeps the library's own setting
// (OPENBLAS_NUM_THREADS, or all cores). The search tries, in order:
// $SHOAL_OPENBLAS (a library file, or a directory holding one), the
// dynamic loader's search by soname (LD_LIBRARY_PATH, ld.so.cache), and
// the directories of openblasDirs, with the names of openblasSonames. It
// returns an error wrapping ErrUnavailable (an *OpenBLASError listing
// every path tried) if none loads, and ErrUnavailable in a build without
// cgo. It never crashes the process on a missing library or symbol.
func NewOpenBLAS(threads int) (*OpenBLAS, error) {
	if threads < 0 {
		return nil, fmt.Errorf("nn: NewOpenBLAS: threads %d, want >= 0 (0 keeps the library's setting)", threads)
	}
	lib, err := openblasOnce()
	if err != nil {
		return nil, err
	}
	o := &OpenBLAS{lib: lib}
	if threads > 0 {
		o.SetThreads(threads)
	}
	return o, nil
}

// Name returns "cpu/openblas".
func (*OpenBLAS) Name() string { return "cpu/openblas" }

// Path returns the file the library was loaded from, symbolic links
// resolved.
func (o *OpenBLAS) Path() string { return o.lib.path }

// Config returns OpenBLAS's build description (openblas_get_config), e.g.
// "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64".
func (o *OpenBLAS) Config() string { return o.lib.config }

// Skipped returns the libraries the search tried, and why it did not use
// them, before the one it loaded: a SHOAL_OPENBLAS that did not load shows
// here.
func (o *OpenBLAS) Skipped() []BLASAttempt { return slices.Clone(o.lib.skipped) }

// Threads returns the library's current thread count, or 0 where it does
// not say (a libblas.so.3 without openblas_get_num_threads).
func (o *OpenBLAS) Threads() int { return o.lib.threads() }

// SetThreads sets the library's thread count for the whole process (see
// OpenBLAS); it does nothing where the library has no
// openblas_set_num_threads. n must be at least 1.
func (o *OpenBLAS) SetThreads(n int) { o.lib.setThreads(max(n, 1)) }

// Gemm computes C = alpha·op(A)·op(B) + beta·C through cblas_sgemm; see
// Backend. It panics, as the CPU backend does, on a negative dimension, a
// leading dimension too small for its matrix, or a slice too short, and on
// a dimension beyond OpenBLAS's 32-bit int.
func (o *OpenBLAS) Gemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if gemmTrivial(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) {
		return
	}
	for _, v := range [...]int{m, n, k, lda, ldb, ldc} {
		if v > maxBLASInt {
			panic(fmt.Sprintf("nn: Gemm: dimension %d exceeds OpenBLAS's int (%d)", v, maxBLASInt))
		}
	}
	if beta == 0 {
		// OpenBLAS's kernels accumulate into C, so for beta 0 it first
		// zeroes C with its own loop; Go's clear is faster (measured on
		// the weight gradients: docs/BENCHMARKS.md, "Figures that lived in code comments").
		scale(0, c, m, n, ldc)
		beta = 1
	}
	o.lib.sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// maxBLASInt is the largest dimension a 32-bit-int OpenBLAS accepts.
const maxBLASInt = 1<<31 - 1

// NewBestCPU returns the fastest CPU backend this process can use, with a
// line saying why: OpenBLAS (see NewOpenBLAS; threads as there) when it
// loads, else the gonum CPU backend, with the reason OpenBLAS is not used.
// The gonum backend is serial: it ignores threads.
func NewBestCPU(threads int) (Backend, string) {
	o, err := NewOpenBLAS(threads)
	if err != nil {
		return NewCPU(), "gonum: " + err.Error()
	}
	return o, describeOpenBLAS(o)
}

// describeOpenBLAS is NewBestCPU's reason for choosing o: the library, its
// build, its thread count, and the candidates the search skipped first.
func describeOpenBLAS(o *OpenBLAS) string {
	var b strings.Builder
	fmt.Fprintf(&b, "openblas: %s (%s), %d threads", o.Path(), o.Config(), o.Threads())
	for _, a := range o.Skipped() {
		fmt.Fprintf(&b, "\n  skipped %s: %s", a.Path, a.Err)
	}
	return b.String()
}

// Describe returns the line NewBestCPU gives as its reason for o: the
// library, its build and thread count, and any library skipped before it.
func (o *OpenBLAS) Describe() string { return describeOpenBLAS(o) }
