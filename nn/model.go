package nn

// Backend runs the dense linear algebra of a model. CPU wraps gonum's
// float32 BLAS and OpenBLAS the machine's libopenblas (NewBestCPU picks);
// a GPU backend comes with the gpu package.
//
// Implementations are not required to be safe for concurrent use; a model
// uses its backend from one goroutine at a time.
type Backend interface {
	// Name identifies the backend and its GEMM path, e.g. "cpu/gonum".
	Name() string
	// Gemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices,
	// where op(X) is X or Xᵀ as tA/tB say, op(A) is m×k, op(B) is k×n and C
	// is m×n, with leading dimensions lda, ldb, ldc. It does not retain the
	// slices after it returns.
	Gemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
}

// Spec selects and sizes a model.
type Spec struct {
	// Arch is "mlp" or "cnn".
	Arch string
	// Hidden are the MLP's hidden layer widths (default 256,128). Ignored by cnn.
	Hidden []int
	// Channels, Height, Width describe one input sample (default 1×28×28).
	Channels, Height, Width int
	// Classes is the number of output classes (default 10).
	Classes int
}

// Model is a classifier whose parameters live in one flat vector described
// by Layout. A Model owns its activation buffers, sized on first use for a
// batch and reused after: it is not safe for concurrent use, so give each
// goroutine its own (they are cheap; the parameters are not inside).
type Model interface {
	// Name is the architecture, "mlp" or "cnn".
	Name() string
	// Layout describes the parameter vector; callers must not modify it.
	Layout() Layout
	// InputSize is the number of float32 values of one sample (C·H·W).
	InputSize() int
	// Classes is the number of output classes.
	Classes() int
	// Init fills params (len Layout().Size()) deterministically from seed:
	// weights He/Kaiming-uniform, biases zero. Same seed, same vector.
	Init(params []float32, seed uint64)
	// ForwardBackward runs the batch x (len(labels)·InputSize() values) and
	// overwrites grads with the gradient of the mean softmax cross-entropy
	// loss over the batch. It returns that mean loss and the number of
	// correctly classified samples. params and grads have Layout().Size()
	// elements; x, labels, params are not modified. An empty batch returns
	// 0, 0 and zeroes grads.
	//
	// Wrong lengths and labels outside [0, Classes()) are caller errors:
	// it panics with a message naming the wrong value and the expected one.
	ForwardBackward(params, grads, x []float32, labels []int32) (loss float64, correct int)
	// Evaluate runs the batch forward only and returns the summed (not
	// mean) loss and the number of correct predictions. It panics on
	// caller errors as ForwardBackward does.
	Evaluate(params, x []float32, labels []int32) (lossSum float64, correct int)
}

// GradNotifier is implemented by models that can say, during backward,
// which gradients are final, so that a caller can start sending the later
// layers' gradients while the earlier layers are still in backward (the
// bucketed overlap of Horovod and PyTorch DDP).
type GradNotifier interface {
	// ForwardBackwardNotify is ForwardBackward that calls ready(off), on
	// the caller's goroutine, each time grads[off:] holds its final values.
	// Offsets strictly decrease from call to call and the last call is
	// ready(0); grads[:off] must not be read or written until the next
	// call. ready must not retain grads beyond ForwardBackwardNotify's
	// return unless the caller synchronises.
	ForwardBackwardNotify(params, grads, x []float32, labels []int32, ready func(off int)) (loss float64, correct int)
}

// Phased is a Model that says when its forward pass ends, for a
// timeline of the step.
type Phased interface {
	// ForwardBackwardPhased is ForwardBackwardNotify, with ready
	// optional, that also calls forwardDone, on the caller's goroutine,
	// once the loss is computed and before backward begins.
	ForwardBackwardPhased(params, grads, x []float32, labels []int32, forwardDone func(), ready func(off int)) (loss float64, correct int)
}
