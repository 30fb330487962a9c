package nn

import (
	"fmt"
	"unsafe"

	"github.com/shoalml/shoal/optim"
)

// Device runs a model's whole step in memory of its own, a GPU's: the
// parameters, gradients and activations stay there and only the batch,
// the weights after a pull and the gradient vector cross to and from the
// host. Backend, by contrast, runs one GEMM at a time on host slices.
// NewOnDevice builds a Model on a Device; package gpu implements one over
// CUDA, and HostDevice is the reference that runs everywhere (the
// conformance suite in nn/devicetest checks both against float64).
//
// Every operation is queued in order on the device and may run after the
// call returns: Sync waits for all of them and returns the first error
// (for CUDA, launch and memory errors surface there). Host slices given to
// Upload must stay unchanged, and those given to Download unread, until
// the next Sync. A Device is used by one goroutine at a time.
//
// Sizes are element counts; Mem ranges come from Alloc and their slices.
// Operations panic on a Mem of another device or one too short: those are
// programming errors, as a wrong length is for Model.
type Device interface {
	// Name identifies the device, e.g. "cuda:0 NVIDIA H100 80GB HBM3".
	Name() string
	// Alloc returns bytes bytes of device memory, contents unspecified.
	Alloc(bytes int) (Mem, error)
	// Free releases memory from Alloc (the whole allocation).
	Free(Mem)
	// Upload copies src to dst; Download copies src to dst.
	Upload(dst Mem, src []byte)
	Download(dst []byte, src Mem)
	// Zero sets n float32 (or int32) elements to zero.
	Zero(m Mem, n int)
	// Gemm is Backend.Gemm on device memory.
	Gemm(tA, tB bool, m, n, k int, alpha float32, a Mem, lda int, b Mem, ldb int, beta float32, c Mem, ldc int)
	// BiasAct adds b[c] to every element of y of channel c, where y holds
	// n samples of ch channels of hw values (NCHW; a dense layer's output
	// is hw = 1), and then applies a ReLU (max(v, 0), NaN kept) if relu.
	BiasAct(y, b Mem, n, ch, hw int, relu bool)
	// BiasGrad overwrites db[c] with the sum over the samples and the hw
	// positions of dy's channel c (dy laid out as y of BiasAct). With y
	// set (y.Nil() false: a ReLU's output, laid out as dy) it first does
	// ReLUBackward(dy, y) in place, in the same pass: the activation's
	// backward and the bias gradient fused.
	BiasGrad(db, dy, y Mem, n, ch, hw int)
	// ReLUBackward sets dy[i] = 0 where y[i] <= 0 (y a ReLU's output).
	ReLUBackward(dy, y Mem, n int)
	// SoftmaxXent computes, for rows of classes logits z and int32
	// labels, loss[r] = logsumexp(z_r) - z_r[label] and correct[r] (int32)
	// = 1 when the label is the first largest logit, else 0; with dz set
	// (dz.Nil() false) it also writes dz = (softmax(z) - onehot)·scale.
	SoftmaxXent(z, labels, dz, loss, correct Mem, rows, classes int, scale float32)
	// SGDMomentum is optim's momentum step (g = grad + wd·p; buf = μ·buf +
	// g; p -= lr·(nesterov ? g + μ·buf : buf)), bit for bit.
	SGDMomentum(p, buf, g Mem, n int, lr, mu, wd float32, nesterov bool)
	// Adam is optim's Adam (AdamW) step k on p with its moments m (exp_avg)
	// and v (exp_avg_sq) from the gradient g (optim.StepAdam), bit for bit.
	Adam(p, m, v, g Mem, n int, k optim.AdamStep)
	// Im2Col unrolls n samples x (n×c×h×w) for a kh×kw convolution with
	// zero padding pad and stride 1 into col ((c·kh·kw) × (n·oh·ow)): row
	// (ci·kh+i)·kw+j, column s·oh·ow + oy·ow+ox holds sample s's
	// x[ci][oy+i-pad][ox+j-pad], or 0 outside the image; so that one GEMM
	// convolves the whole batch. Col2Im overwrites dx (n×c×h×w) with
	// im2col's adjoint applied to col.
	Im2Col(x, col Mem, n, c, h, w, kh, kw, pad, oh, ow int)
	Col2Im(col, dx Mem, n, c, h, w, kh, kw, pad, oh, ow int)
	// SwapAxes writes src, an a×b×c array, into dst as b×a×c:
	// dst[j][i][k] = src[i][j][k] (a convolution's channel-major GEMM
	// output to NCHW, and its gradient back).
	SwapAxes(dst, src Mem, a, b, c int)
	// MaxPoolForward takes the max of each k×k window (stride k) of n
	// samples of c×h×w, writing y (n×c×(h/k)×(w/k)) and, in arg (int32),
	// the index within the sample of each window's first maximum.
	// MaxPoolBackward overwrites dx with dy routed to those indices.
	MaxPoolForward(x, y, arg Mem, n, c, h, w, k int)
	MaxPoolBackward(dy, arg, dx Mem, n, c, h, w, k int)
	// ToHalf writes the n float32 of src as float16 (bf16 false) or
	// bfloat16 bits, rounded to nearest even, into dst (n uint16);
	// FromHalf converts back. Both agree with package wire bit for bit.
	ToHalf(dst, src Mem, n int, bf16 bool)
	FromHalf(dst, src Mem, n int, bf16 bool)
	// GemmHalf is Gemm with a and b in half precision, float16 (bf16
	// false) or bfloat16 elements (ranges from Mem.Halves; the leading
	// dimensions count elements), and c in float32: the products
	// accumulate in float32, as cuBLAS's GemmEx does on the tensor cores.
	GemmHalf(tA, tB bool, m, n, k int, alpha float32, a Mem, lda int, b Mem, ldb int, beta float32, c Mem, ldc int, bf16 bool)
	// Unscale multiplies the n float32 of g by s and sets the int32 at
	// found to 1 if any product is NaN or infinite, leaving it as it is
	// otherwise (the caller zeroes it first): the unscale-and-check of
	// dynamic loss scaling.
	Unscale(g Mem, n int, s float32, found Mem)
	// Sync waits for the queued work and returns its first error. A
	// device whose context is lost keeps returning that error.
	Sync() error
	// Close releases the device's resources; memory from Alloc must be
	// freed first.
	Close() error
}

// Capturer is implemented by a Device that can record the operations
// queued between BeginCapture and EndCapture once, as a graph (a CUDA
// graph), and queue the whole graph again with Replay: one launch for a
// step's many kernels, where each launch costs the host microseconds
// (the launch-bound steps of small batches). The model captures a step
// once and replays it while the step's shape and buffers stay the same.
// Calls are made by the goroutine that uses the Device.
type Capturer interface {
	// BeginCapture starts recording: the operations queued until
	// EndCapture are recorded into a graph and not run. It returns an
	// error and records nothing where the device cannot capture (a
	// driver without graphs) or has an error pending.
	BeginCapture() error
	// EndCapture ends the recording and returns the graph. The graph ran
	// none of its operations: its Uploads read, and its Downloads write,
	// host memory of the graph's own, which Replay fills from and copies
	// to the caller's slices. On error (an operation that cannot be
	// captured, say) no graph is returned and the device is as it was
	// before BeginCapture, none of the operations run.
	EndCapture() (Graph, error)
	// Replay queues g's operations: ups[i] is what the graph's i-th
	// Upload copies to the device, and downs[i] receives at the next Sync
	// what its i-th Download copies back, in the order they were queued
	// at capture, each of the length it had then (a panic otherwise). The
	// rules of Upload and Download hold for the slices.
	Replay(g Graph, ups, downs [][]byte)
	// Release frees g; it is not replayed again.
	Release(g Graph)
}

// Graph is a graph a Capturer recorded; only that device uses it.
type Graph any

// Mem is a range of a device's memory: the device's own handle for an
// allocation and a byte range in it. The zero Mem is nil.
type Mem struct {
	h      any
	off, n int
}

// NewMem returns a Mem for the whole of an allocation of bytes bytes that
// the device knows by h; it is for Device implementations.
func NewMem(h any, bytes int) Mem { return Mem{h: h, n: bytes} }

// Handle returns the device's handle and the range's byte offset in it.
func (m Mem) Handle() (h any, off int) { return m.h, m.off }

// Bytes is the range's size.
func (m Mem) Bytes() int { return m.n }

// Nil reports whether m is the zero Mem.
func (m Mem) Nil() bool { return m.h == nil }

// Slice returns the n 4-byte elements (float32 or int32) from element off.
func (m Mem) Slice(off, n int) Mem {
	if off < 0 || n < 0 || 4*(off+n) > m.n {
		panic(fmt.Sprintf("nn: Mem.Slice(%d, %d) of %d elements", off, n, m.n/4))
	}
	return Mem{h: m.h, off: m.off + 4*off, n: 4 * n}
}

// Halves returns the n 2-byte elements (float16 or bfloat16) from
// element off.
func (m Mem) Halves(off, n int) Mem {
	if off < 0 || n < 0 || 2*(off+n) > m.n {
		panic(fmt.Sprintf("nn: Mem.Halves(%d, %d) of %d halves", off, n, m.n/2))
	}
	return Mem{h: m.h, off: m.off + 2*off, n: 2 * n}
}

// Check panics unless m holds at least n 4-byte elements; for Device
// implementations.
func (m Mem) Check(op string, n int) { m.checkBytes(op, n, 4) }

// CheckHalves panics unless m holds at least n 2-byte elements.
func (m Mem) CheckHalves(op string, n int) { m.checkBytes(op, n, 2) }

func (m Mem) checkBytes(op string, n, size int) {
	if m.h == nil || m.n < size*n {
		panic(fmt.Sprintf("nn: %s: memory of %d bytes, want at least %d elements (%d bytes)", op, m.n, n, size*n))
	}
}

// F32Bytes, I32Bytes and U16Bytes view a slice as its bytes (in the
// machine's order, which is what a device copy moves) for Upload and
// Download.
func F32Bytes(s []float32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}

// I32Bytes: see F32Bytes.
func I32Bytes(s []int32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}

// U16Bytes: see F32Bytes.
func U16Bytes(s []uint16) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 2*len(s))
}
