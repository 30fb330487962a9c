package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// shape is the shape of one sample, channels × height × width; a flat
// vector of n values is {n, 1, 1}.
type shape struct{ c, h, w int }

func (s shape) size() int { return s.c * s.h * s.w }

func (s shape) String() string { return fmt.Sprintf("%d×%d×%d", s.c, s.h, s.w) }

// layer is one stage of a network, run over a batch of n samples stored
// sample after sample (NCHW). A layer owns its output and input-gradient
// buffers, grows them on the first call for a batch size (and again only if
// a later batch is larger) and reuses them after, so a warm step allocates
// nothing. A layer with parameters reads them from, and writes their
// gradients to, its tensors of the flat vectors p and g.
type layer interface {
	in() shape
	out() shape
	// forward computes the output for the n samples of x and returns it;
	// the result stays valid until the next forward. It does not modify
	// p or x.
	forward(p, x []float32, n int) []float32
	// backward takes the input x and output y of the last forward and
	// the loss gradient dy w.r.t. y. It overwrites the layer's tensors of
	// g with the parameter gradients and, if needDx, returns the gradient
	// w.r.t. x (valid until the next backward), else nil. It may modify
	// dy, but not p, x or y.
	backward(p, g, x, y, dy []float32, n int, needDx bool) []float32
}

// paramLayer is a layer with trainable tensors.
type paramLayer interface {
	layer
	// init draws the layer's weights from rng and zeroes its biases.
	init(p []float32, rng *rand.Rand)
	// offset is where the layer's first tensor starts in the flat vector;
	// its tensors are contiguous from there.
	offset() int
}

// actLayer is a layer that can apply a ReLU to its own output, saving the
// separate ReLU stage and a pass over the activations.
type actLayer interface {
	layer
	// followedByReLU says a ReLU follows, which sets the init gain.
	followedByReLU()
	// fuseReLU makes the layer apply that ReLU itself.
	fuseReLU()
}

// grow returns buf resliced to n elements, reallocated only if its capacity
// is smaller. The contents are unspecified.
func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

// kaimingUniform fills w with U(-bound, bound). With relu (the layer's
// output goes through a ReLU) bound = sqrt(6/fanIn), He et al.'s uniform
// init (gain √2); without, bound = 1/sqrt(fanIn), which is PyTorch's default
// for Linear and Conv2d (kaiming_uniform with a = √5), a good scale for the
// logits of the last layer.
func kaimingUniform(w []float32, fanIn int, relu bool, rng *rand.Rand) {
	bound := 1 / math.Sqrt(float64(fanIn))
	if relu {
		bound = math.Sqrt(6 / float64(fanIn))
	}
	for i := range w {
		w[i] = float32((2*rng.Float64() - 1) * bound)
	}
}

// flatten turns C×H×W samples into vectors of C·H·W values, in that order
// (as torch.flatten does), which in NCHW memory is no change at all: it
// passes its buffers through.
type flatten struct{ shp shape }

func newFlatten(in shape) *flatten { return &flatten{shp: in} }

func (f *flatten) in() shape  { return f.shp }
func (f *flatten) out() shape { return shape{f.shp.size(), 1, 1} }

func (f *flatten) forward(_, x []float32, n int) []float32 { return x[:n*f.shp.size()] }

func (f *flatten) backward(_, _, _, _, dy []float32, n int, needDx bool) []float32 {
	if !needDx {
		return nil
	}
	return dy[:n*f.shp.size()]
}

// reLU is max(0, x), elementwise. Models fuse it into the layer before it
// where they can (see actLayer).
type reLU struct {
	shp   shape
	y, dx []float32
}

func newReLU(s shape) *reLU { return &reLU{shp: s} }

func (r *reLU) in() shape  { return r.shp }
func (r *reLU) out() shape { return r.shp }

func (r *reLU) forward(_, x []float32, n int) []float32 {
	r.y = grow(r.y, n*r.shp.size())
	for i, v := range x[:len(r.y)] {
		r.y[i] = max(v, 0)
	}
	return r.y
}

func (r *reLU) backward(_, _, _, y, dy []float32, n int, needDx bool) []float32 {
	if !needDx {
		return nil
	}
	r.dx = grow(r.dx, n*r.shp.size())
	reluGrad(r.dx, dy, y)
	return r.dx
}

// reluGrad sets dx = dy where y > 0, else 0. dx may be dy.
//
// The selection is made on the bits, where the compiler emits a
// conditional move: a branch on y > 0 is mispredicted about half the time
// on real activations, which made this loop nine times slower.
func reluGrad(dx, dy, y []float32) {
	dy = dy[:len(dx)]
	y = y[:len(dx)]
	for i := range dx {
		d := math.Float32bits(dy[i])
		if !(y[i] > 0) {
			d = 0
		}
		dx[i] = math.Float32frombits(d)
	}
}
