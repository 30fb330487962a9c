// Package nn holds Shoal's models: the flat parameter vector and its
// Layout, the layers (Dense, ReLU, Flatten, Conv2D, MaxPool2D, softmax
// cross-entropy), the two classifiers New builds ("mlp" and "cnn"), and
// the Backend that runs their dense algebra, with two CPU implementations:
// OpenBLAS, loaded at run time, and gonum's pure-Go float32 BLAS.
//
// # The flat vector
//
// A model owns no parameters. Its trainable tensors live in one []float32
// that the caller allocates (Layout().Size() elements) and passes to every
// call; gradients are a second vector with the same Layout. Tensor names
// and shapes follow PyTorch (fc1.weight is [out in], conv1.weight is
// [outC inC kH kW], samples are NCHW and flatten in C,H,W order), so a
// vector saved as safetensors loads into the equivalent torch module.
//
// # Concurrency and buffers
//
// A Model is used by one goroutine at a time: it keeps activation and
// gradient buffers between the forward and backward pass, sized on the
// first call for a batch size and grown only when a larger batch comes, so
// a warm ForwardBackward or Evaluate allocates nothing. Models are cheap,
// so give each goroutine its own; several may read the same params vector
// at once, as no call modifies params, x or labels. grads is written only
// by ForwardBackward, which overwrites every element. The model keeps no
// reference to params, grads, x or labels after a call returns.
//
// A Backend is likewise driven by one goroutine at a time and keeps no
// slice after a call. The CPU backend runs each GEMM serially on the
// calling goroutine (gonum's own Sgemm would fan large products out over
// goroutines, allocating as it does): Shoal's parallelism is one worker
// per core.
//
// # Backends
//
// NewBestCPU picks the backend a worker should use: OpenBLAS when it
// loads, else gonum, with a line saying why. OpenBLAS (NewOpenBLAS) runs
// the GEMMs in the machine's libopenblas through cblas_sgemm, five to six
// times faster than gonum on one core. The binary does not link it: cgo
// code that includes only <dlfcn.h> dlopens it (SHOAL_OPENBLAS, then the
// loader's search, then the distributions' directories; see NewOpenBLAS),
// so the same binary runs where it is missing, and a build without cgo
// (the static binary) gets ErrUnavailable and uses gonum. OpenBLAS's
// thread count is global to the process: give a worker that shares the
// machine with others one thread, and a worker alone all the cores.
//
// Either way a warm training step (ForwardBackward and an optimizer step)
// allocates nothing, and the loops around the GEMMs (bias and ReLU,
// ReLU's gradient, max pooling, im2col) avoid data-dependent branches,
// which on real activations were mispredicted half the time.
//
// # Devices and mixed precision
//
// NewOnDevice runs a model on a Device (a GPU; HostDevice is the
// reference): parameters, gradients and activations stay in its memory.
// SetPrecision(BF16 or FP16) makes its GEMMs multiply half-precision
// copies of their operands into float32, with float32 master weights and
// gradients, and for FP16 dynamic loss scaling (GradScaler's schedule; a
// step that overflows is taken again at half the scale). See Precision.
//
// A resident run (LoadResident to EndResident) keeps the weights and an
// optimizer's state slots on the device between steps, for a ring whose
// ranks step their own replicas: ForwardBackward then uploads only the
// batch, StepResident uploads the reduced gradient and applies the
// optimizer there (Device's SGDMomentum and Adam kernels, bit for bit
// optim's), and StoreResident copies the weights back when the host
// needs them.
//
// # Caller errors
//
// ForwardBackward, Evaluate and Init are hot paths without an error
// result. Passing vectors of the wrong length or a label outside
// [0, Classes()) is a programming error, like an index out of range: they
// panic with a message saying what was wrong and what was expected. The
// data package validates labels when it loads a dataset.
//
// # Models
//
// "mlp" is Flatten → (Dense → ReLU)… → Dense, default 784-256-128-10.
//
// "cnn" is conv1 (16 channels, 3×3, pad 1) → ReLU → 2×2 max pool →
// conv2 (32 channels, 3×3, pad 1) → ReLU → 2×2 max pool → flatten →
// fc1 (32·7·7 → 128) → ReLU → fc2 (128 → classes). The classic 32/64
// channel version costs about four times the arithmetic (the times are in
// docs/BENCHMARKS.md, "Figures that lived in code comments"), and 16/32
// still reaches above 90% on Fashion-MNIST.
//
// Layers followed by a ReLU run it fused into their bias pass and get He
// (Kaiming) uniform weights, U(±sqrt(6/fan_in)); the output layer gets
// PyTorch's default, U(±1/sqrt(fan_in)), which is Kaiming uniform with
// a = √5. Biases start at zero. Init draws the tensors in Layout order from
// one PCG stream seeded from its seed, so the same seed gives the same
// vector on every platform.
//
// # Example
//
// Example (example_test.go) builds an MLP, initialises its vector and
// trains it with plain gradient steps until it fits a small problem.
package nn
