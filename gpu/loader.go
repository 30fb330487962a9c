package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/shoalml/shoal/internal/dl"
)

// Environment variables that point the search at the CUDA libraries.
const (
	// EnvLibCUDA names the driver library (a file, or a directory
	// holding libcuda.so.1).
	EnvLibCUDA = "SHOAL_LIBCUDA"
	// EnvCUDALibDir names a directory searched first for libnvrtc and
	// libcublas (and libcuda).
	EnvCUDALibDir = "SHOAL_CUDA_LIB_DIR"
)

// The libraries and their names, newest first. CUDA 13 is what the GPU
// machines run; 12's NVRTC compiles the kernels as well.
var (
	cudaNames   = []string{"libcuda.so.1"}
	nvrtcNames  = []string{"libnvrtc.so.13", "libnvrtc.so.12"}
	cublasNames = []string{"libcublas.so.13", "libcublas.so.12"}
	// cublasLt is loaded from cuBLAS's folder before it: libcublas needs
	// it, and a loader search could find another version.
	cublasLtNames = []string{"libcublasLt.so.13", "libcublasLt.so.12"}
)

// searchEnv is what the search reads from the environment and the file
// system; a value so that tests can search temporary trees.
type searchEnv struct {
	libCUDA, libDir, cudaHome, cudaPath string
	// globs finds directories by pattern (filepath.Glob, in tests a tree's).
	glob func(pattern string) []string
	// hermetic leaves out the dynamic loader's own search and the driver's
	// folders, so that a test's fakes are all there is, on a machine with
	// CUDA installed too.
	hermetic bool
}

func defaultSearchEnv() searchEnv {
	return searchEnv{
		libCUDA: os.Getenv(EnvLibCUDA), libDir: os.Getenv(EnvCUDALibDir),
		cudaHome: os.Getenv("CUDA_HOME"), cudaPath: os.Getenv("CUDA_PATH"),
		glob: func(p string) []string { m, _ := filepath.Glob(p); return m },
	}
}

// isStub says whether p is the CUDA toolkit's link-time stub of a driver
// library, which must never be loaded (its functions fail).
func isStub(p string) string {
	if slices.Contains(strings.Split(filepath.ToSlash(p), "/"), "stubs") {
		return "a link-time stub (a stubs folder), never loaded"
	}
	return ""
}

// toolkitDirs are the folders that hold a CUDA toolkit's or a Python
// wheel's libraries, in search order after $SHOAL_CUDA_LIB_DIR and the
// loader's own search: $CUDA_HOME and
// $CUDA_PATH's lib64, /usr/local/cuda*/lib64 (newest last as Glob sorts,
// so reversed), and the nvidia wheels of Python environments (a PyTorch
// venv such as /opt/torch/.venv).
func (e searchEnv) toolkitDirs() []string {
	var dirs []string
	for _, h := range []string{e.cudaHome, e.cudaPath} {
		if h != "" {
			dirs = append(dirs, filepath.Join(h, "lib64"), filepath.Join(h, "lib"))
		}
	}
	local := e.glob("/usr/local/cuda*/lib64")
	slices.Reverse(local)
	dirs = append(dirs, local...)
	for _, site := range []string{"/opt/*/.venv/lib/python3*/site-packages", "/usr/local/lib/python3*/dist-packages", "/usr/lib/python3/dist-packages"} {
		for _, s := range e.glob(site) {
			// cu13 wheels put every library in nvidia/cu13/lib; older ones
			// one folder per library (nvidia/cuda_nvrtc/lib, nvidia/cublas/lib).
			dirs = append(dirs, e.glob(filepath.Join(s, "nvidia/cu1*/lib"))...)
			dirs = append(dirs, e.glob(filepath.Join(s, "nvidia/*/lib"))...)
		}
	}
	return dedup(dirs)
}

// driverDirs are where driver libraries live besides the loader's search.
func driverDirs() []string {
	triple := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	dirs := []string{"/usr/local/nvidia/lib64", "/usr/lib64", "/usr/lib/wsl/lib"}
	if triple != "" {
		dirs = append(dirs, "/usr/lib/"+triple)
	}
	return dirs
}

func dedup(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// searches returns the search of each library.
func (e searchEnv) searches() (cuda, nvrtc, cublasLt, cublas dl.Search) {
	toolkit := e.toolkitDirs()
	driver := driverDirs()
	if e.hermetic {
		driver = nil
	}
	cuda = dl.Search{Env: e.libCUDA, Names: cudaNames, Dirs: append(slices.Clone(toolkit), driver...), NoLoader: e.hermetic, Refuse: isStub}
	if cuda.Env == "" {
		cuda.Env = e.libDir
	}
	nvrtc = dl.Search{Env: e.libDir, Names: nvrtcNames, Dirs: toolkit, NoLoader: e.hermetic, Refuse: isStub}
	cublas = dl.Search{Env: e.libDir, Names: cublasNames, Dirs: toolkit, NoLoader: e.hermetic, Refuse: isStub}
	cublasLt = dl.Search{Env: e.libDir, Names: cublasLtNames, Dirs: toolkit, NoLoader: e.hermetic, Refuse: isStub}
	return cuda, nvrtc, cublasLt, cublas
}

// LoadError is the error of a library search that found nothing usable:
// it names the library and lists every path tried. It wraps
// ErrUnavailable.
type LoadError struct {
	Library string // "libcuda", "libnvrtc", "libcublas"
	Hint    string
	Err     error // a *dl.NotFoundError, or why no search ran
}

func (e *LoadError) Error() string {
	return fmt.Sprintf("gpu: %s not loaded (%s): %v", e.Library, e.Hint, e.Err)
}

func (e *LoadError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }
