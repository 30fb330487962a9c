// Package gpu is Shoal's GPU support: NVML discovery, the choice of a
// worker's device, and a CUDA implementation of nn.Device. The binary
// links no CUDA or NVIDIA library; everything is found at run time, so the
// same build runs on a laptop, in a static container and on a GPU node.
//
// # Discovery
//
// Devices asks NVML (libnvidia-ml, through github.com/NVIDIA/go-nvml,
// which binds its symbols lazily) for the driver and every GPU's name,
// memory, utilisation and compute capability; without a driver it returns
// an error wrapping ErrNoDriver that says why. Inventory.Visible applies
// CUDA_VISIBLE_DEVICES as CUDA does. `shoal info` prints both.
//
// # Choosing a device
//
// Choice is the --device flag of shoal worker, train and bench compute:
// auto, cpu, cuda or cuda:N. Resolve places the worker of a local rank:
// cuda (and auto, when CUDA finds a GPU) takes GPU localRank mod Count();
// auto without a usable GPU takes the CPU and says why; cuda without one is
// an error.
//
// # Loading CUDA
//
// cgo includes only <dlfcn.h>, <stdint.h> and <stddef.h>: the CUDA types
// and function-pointer typedefs are written out, and each entry point is
// called through a one-line C trampoline. libcuda.so.1, libnvrtc
// (.so.13, else .so.12) and libcublas (after libcublasLt, which it needs,
// searched the same way) are searched in this order, every attempt recorded: SHOAL_LIBCUDA
// (the driver file) and SHOAL_CUDA_LIB_DIR (a folder for all three), the
// dynamic loader's own search, $CUDA_HOME and $CUDA_PATH, /usr/local/cuda*
// (newest first), the driver's folders, and the nvidia/*/lib folders of
// Python wheels (a PyTorch virtual environment). A stubs/libcuda.so is
// refused. A missing library or symbol is a *LoadError (wrapping
// ErrUnavailable) listing every path tried, never a crash at start; a
// build without cgo returns ErrUnavailable.
//
// # The device
//
// NewDevice opens one GPU. All its CUDA work runs on one executor
// goroutine locked to its OS thread, where the device's primary context
// is current and which owns the stream, the cuBLAS handle and the module;
// Device's methods queue closures there. GEMMs go to cuBLAS (row-major
// data through transposed column-major calls): cublasSgemm in float32,
// and for mixed precision (nn.BF16, nn.FP16: the --precision flag)
// cublasGemmEx on bfloat16 or float16 operands with float32 results and
// accumulation (CUBLAS_COMPUTE_32F), which cuBLAS runs on the tensor
// cores; the other operations are
// the CUDA C kernels of kernels.cu, embedded in the binary and compiled by
// NVRTC at start for the GPU's sm_XY to a CUBIN, which is cached on disk
// (CacheDir, keyed by a hash of the source, options and the NVRTC and
// driver versions). Host copies go through pinned staging buffers with
// asynchronous copies; downloads land in the caller's slices at Sync.
// Launch errors surface at Sync, the once-per-step synchronize; errors 700
// and 719 lose the context and are sticky, so the model's Err (nn.Failer)
// ends the worker with them.
//
// # CUDA graphs
//
// Device is an nn.Capturer: BeginCapture and EndCapture record what the
// stream is given (cuStreamBeginCapture_v2 in relaxed mode, so that the
// graph's own pinned buffers can be allocated while it records), and
// Replay launches the whole graph at once (cuGraphLaunch), filling the
// graph's upload buffers from the caller's slices first and copying its
// download buffers out at Sync. A device model captures a step once and
// replays it (nn/devicegraph.go): one launch for a step's kernels, GEMMs
// and copies. The graph functions are optional symbols: a driver without
// them is ErrNoGraphs, and the model then launches op by op, as it does
// after any failed capture. cuBLAS is given a 32 MiB workspace of the
// device's (cublasSetWorkspace, where it exists), for captured and eager
// GEMMs alike.
//
// nn.NewOnDevice puts a model on a Device; nn/devicetest is the
// conformance suite every Device passes (nn.HostDevice on the CPU, Device
// where a GPU is found: SHOAL_REQUIRE_GPU=1 turns the skip into a
// failure). Without a GPU the tests still compile the kernels to PTX with
// clang-15 (SHOAL_REQUIRE_CLANG=1), which catches errors in the C, and run
// the suite on Device itself against a CUDA emulator built from
// internal/cudaemu: the driver, NVRTC and cuBLAS calls answered on the CPU,
// kernels.cu compiled as C++ with each thread block's threads as fibers
// (only for kernels that reach a barrier; the others run their threads in
// turn), cuBLAS as plain loops in double.
// That checks everything on the Go side (loading, the executor, argument
// packing, staging, the cuBLAS transpositions, the kernel cache, a lost
// context, graph capture and replay) and the kernels' logic; what only a
// GPU shows (NVRTC itself, real concurrency, the driver's asynchrony, what
// the driver accepts in a capture) it cannot.
package gpu
