package nn

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// ErrInvalidSpec is wrapped by the errors New returns for a Spec it cannot
// build.
var ErrInvalidSpec = errors.New("nn: invalid spec")

// Defaults that New applies to the zero fields of a Spec; see DefaultSpec.
const (
	defaultChannels = 1
	defaultHeight   = 28
	defaultWidth    = 28
	defaultClasses  = 10
)

// defaultHidden are the MLP's hidden widths when Spec.Hidden is empty.
func defaultHidden() []int { return []int{256, 128} }

// cnnSize sizes the cnn: conv1 (c1 channels), conv2 (c2 channels), fc1 (fc
// units). New uses defaultCNN; tests build smaller ones.
type cnnSize struct{ c1, c2, fc int }

// The cnn New builds; see doc.go for why these widths.
const (
	cnnConv1 = 16
	cnnConv2 = 32
	cnnFC    = 128
)

// Limits that keep every index of a model inside an int32 and a float32
// vector addressable on every platform.
const (
	maxInput  = 1 << 28 // values per sample
	maxWidth  = 1 << 24 // units of a hidden layer, classes
	maxParams = math.MaxInt32
)

// DefaultSpec returns the spec New builds for arch with every default
// filled in: 1×28×28 inputs, 10 classes and, for "mlp", hidden widths
// 256,128 (784-256-128-10).
func DefaultSpec(arch string) Spec {
	s, _ := Spec{Arch: arch}.withDefaults()
	return s
}

// withDefaults fills the zero fields of s and checks the rest.
func (s Spec) withDefaults() (Spec, error) {
	if s.Arch != "mlp" && s.Arch != "cnn" {
		return s, fmt.Errorf("%w: unknown arch %q (want mlp or cnn)", ErrInvalidSpec, s.Arch)
	}
	s.Hidden = slices.Clone(s.Hidden)
	if s.Arch == "mlp" && len(s.Hidden) == 0 {
		s.Hidden = defaultHidden()
	}
	if s.Arch == "cnn" {
		s.Hidden = nil
	}
	for _, f := range []struct {
		v   *int
		def int
	}{{&s.Channels, defaultChannels}, {&s.Height, defaultHeight}, {&s.Width, defaultWidth}, {&s.Classes, defaultClasses}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if s.Channels < 0 || s.Height < 0 || s.Width < 0 {
		return s, fmt.Errorf("%w: input %d×%d×%d (channels×height×width) has a negative dimension, want positive (or 0 for the default)",
			ErrInvalidSpec, s.Channels, s.Height, s.Width)
	}
	if s.Channels > maxInput || s.Height > maxInput/s.Channels || s.Width > maxInput/(s.Channels*s.Height) {
		return s, fmt.Errorf("%w: input %d×%d×%d is too large, want at most %d values per sample",
			ErrInvalidSpec, s.Channels, s.Height, s.Width, maxInput)
	}
	if s.Classes < 2 || s.Classes > maxWidth {
		return s, fmt.Errorf("%w: %d classes, want 2 to %d (or 0 for %d)", ErrInvalidSpec, s.Classes, maxWidth, defaultClasses)
	}
	for i, h := range s.Hidden {
		if h <= 0 || h > maxWidth {
			return s, fmt.Errorf("%w: hidden layer %d has width %d, want 1 to %d", ErrInvalidSpec, i+1, h, maxWidth)
		}
	}
	if s.Arch == "cnn" && (s.Height < 4 || s.Width < 4) {
		return s, fmt.Errorf("%w: cnn input %d×%d is smaller than 4×4, the least its two 2×2 poolings accept",
			ErrInvalidSpec, s.Height, s.Width)
	}
	return s, nil
}

// New builds the model spec describes, after filling its zero fields with
// the defaults (see DefaultSpec), running its dense algebra on b. It
// returns an error wrapping ErrInvalidSpec if spec is not a model New can
// build.
func New(spec Spec, b Backend) (Model, error) {
	if b == nil {
		return nil, errors.New("nn: New: nil Backend (want e.g. nn.NewCPU())")
	}
	s, err := spec.withDefaults()
	if err != nil {
		return nil, err
	}
	var m *net
	switch s.Arch {
	case "mlp":
		m = newMLP(b, s, true)
	case "cnn":
		m = newCNN(b, s, cnnSize{cnnConv1, cnnConv2, cnnFC}, true)
	}
	if size := m.layout.Size(); size > maxParams {
		return nil, fmt.Errorf("%w: %s has %d parameters, more than the %d a flat vector may hold",
			ErrInvalidSpec, s.Arch, size, maxParams)
	}
	return m, nil
}

// newMLP builds Flatten → (Dense → ReLU)… → Dense from a spec with
// defaults applied. Tensors are fc1.weight, fc1.bias, fc2.weight, ….
func newMLP(b Backend, s Spec, fuse bool) *net {
	var lay Layout
	in := shape{s.Channels, s.Height, s.Width}
	ls := []layer{newFlatten(in)}
	width := in.size()
	for i, h := range s.Hidden {
		ls = append(ls, newDense(b, &lay, fmt.Sprintf("fc%d", i+1), width, h), newReLU(shape{h, 1, 1}))
		width = h
	}
	ls = append(ls, newDense(b, &lay, fmt.Sprintf("fc%d", len(s.Hidden)+1), width, s.Classes))
	return newNet("mlp", lay, in, s.Classes, ls, fuse)
}

// newCNN builds conv1 (3×3, pad 1) → ReLU → maxpool 2 → conv2 (3×3, pad 1)
// → ReLU → maxpool 2 → flatten → fc1 → ReLU → fc2 from a spec with defaults
// applied (input at least 4×4).
func newCNN(b Backend, s Spec, z cnnSize, fuse bool) *net {
	var lay Layout
	in := shape{s.Channels, s.Height, s.Width}
	var ls []layer
	add := func(l layer) shape { ls = append(ls, l); return l.out() }
	sh := add(newConv2D(b, &lay, "conv1", in, z.c1, 3, 3, 1))
	sh = add(newReLU(sh))
	sh = add(newMaxPool2D(sh, 2))
	sh = add(newConv2D(b, &lay, "conv2", sh, z.c2, 3, 3, 1))
	sh = add(newReLU(sh))
	sh = add(newMaxPool2D(sh, 2))
	sh = add(newFlatten(sh))
	sh = add(newDense(b, &lay, "fc1", sh.size(), z.fc))
	sh = add(newReLU(sh))
	add(newDense(b, &lay, "fc2", sh.size(), s.Classes))
	return newNet("cnn", lay, in, s.Classes, ls, fuse)
}

// net is a sequential network under a softmax cross-entropy loss; it
// implements Model.
type net struct {
	arch    string
	layout  Layout
	in      shape
	classes int
	layers  []layer
	params  []paramLayer // the layers with tensors, in layout order
	first   int          // index of the first layer with tensors
	loss    *softmaxCE
	acts    [][]float32 // acts[i] is the input of layers[i]; during a call only
}

var (
	_ Model        = (*net)(nil)
	_ GradNotifier = (*net)(nil)
)

// newNet wires ls up. Layers with parameters that a ReLU follows get He
// init; with fuse, they also absorb that ReLU.
func newNet(arch string, lay Layout, in shape, classes int, ls []layer, fuse bool) *net {
	m := &net{arch: arch, layout: lay, in: in, classes: classes, loss: newSoftmaxCE(classes)}
	for i, l := range ls {
		if _, ok := l.(*reLU); ok && i > 0 {
			if a, ok := ls[i-1].(actLayer); ok {
				a.followedByReLU()
				if fuse {
					a.fuseReLU()
					continue
				}
			}
		}
		m.layers = append(m.layers, l)
	}
	m.first = -1
	for i, l := range m.layers {
		if p, ok := l.(paramLayer); ok {
			if m.first < 0 {
				m.first = i
			}
			m.params = append(m.params, p)
		}
	}
	m.acts = make([][]float32, len(m.layers)+1)
	return m
}

func (m *net) Name() string   { return m.arch }
func (m *net) Layout() Layout { return m.layout }
func (m *net) InputSize() int { return m.in.size() }
func (m *net) Classes() int   { return m.classes }

// pcgStream is the second half of the PCG state Init seeds; any constant
// would do, but changing it changes every model's initial weights.
const pcgStream = 0x5348_4f41_4c5f_6e6e // "SHOAL_nn"

func (m *net) Init(params []float32, seed uint64) {
	m.checkVec("Init", "params", params)
	rng := rand.New(rand.NewPCG(seed, pcgStream))
	for _, p := range m.params {
		p.init(params, rng)
	}
}

func (m *net) ForwardBackward(params, grads, x []float32, labels []int32) (float64, int) {
	return m.forwardBackward("ForwardBackward", params, grads, x, labels, nil, nil)
}

func (m *net) ForwardBackwardPhased(params, grads, x []float32, labels []int32, forwardDone func(), ready func(off int)) (float64, int) {
	return m.forwardBackward("ForwardBackwardPhased", params, grads, x, labels, forwardDone, ready)
}

func (m *net) ForwardBackwardNotify(params, grads, x []float32, labels []int32, ready func(off int)) (float64, int) {
	if ready == nil {
		panic("nn: " + m.arch + ".ForwardBackwardNotify: nil ready")
	}
	return m.forwardBackward("ForwardBackwardNotify", params, grads, x, labels, nil, ready)
}

func (m *net) forwardBackward(method string, params, grads, x []float32, labels []int32, forwardDone func(), ready func(off int)) (float64, int) {
	n := m.checkBatch(method, params, x, labels)
	m.checkVec(method, "grads", grads)
	if n == 0 {
		clear(grads)
		if forwardDone != nil {
			forwardDone()
		}
		if ready != nil {
			ready(0)
		}
		return 0, 0
	}
	z := m.forward(params, x, n)
	sum, correct, dy := m.loss.forward(z, labels, true)
	if forwardDone != nil {
		forwardDone()
	}
	for i := len(m.layers) - 1; i >= m.first; i-- {
		dy = m.layers[i].backward(params, grads, m.acts[i], m.acts[i+1], dy, n, i > m.first)
		if p, ok := m.layers[i].(paramLayer); ok && ready != nil {
			ready(p.offset())
		}
	}
	clear(m.acts)
	return sum / float64(n), correct
}

func (m *net) Evaluate(params, x []float32, labels []int32) (float64, int) {
	n := m.checkBatch("Evaluate", params, x, labels)
	if n == 0 {
		return 0, 0
	}
	sum, correct, _ := m.loss.forward(m.forward(params, x, n), labels, false)
	clear(m.acts)
	return sum, correct
}

// forward runs the layers, recording their inputs in acts, and returns the
// logits.
func (m *net) forward(params, x []float32, n int) []float32 {
	a := x
	for i, l := range m.layers {
		m.acts[i] = a
		a = l.forward(params, a, n)
	}
	m.acts[len(m.layers)] = a
	return a
}

// checkBatch panics unless params fits the layout and x holds
// len(labels) samples, and returns the batch size.
func (m *net) checkBatch(method string, params, x []float32, labels []int32) int {
	m.checkVec(method, "params", params)
	n := len(labels)
	if len(x) != n*m.in.size() {
		panic(fmt.Sprintf("nn: %s.%s: len(x) = %d, want %d (len(labels) = %d samples of %d values)",
			m.arch, method, len(x), n*m.in.size(), n, m.in.size()))
	}
	return n
}

func (m *net) checkVec(method, name string, v []float32) {
	if len(v) != m.layout.Size() {
		panic(fmt.Sprintf("nn: %s.%s: len(%s) = %d, want %d (Layout().Size())", m.arch, method, name, len(v), m.layout.Size()))
	}
}

// TensorWork returns, for each tensor of spec's model in Layout order,
// the multiply-adds per sample of the operation that uses it in the
// forward pass: a dense layer's weights in×out and its bias out, a
// convolution's weights outC·inC·kH·kW·outH·outW and its bias outC·outH·outW.
// Backward costs each layer about twice its forward, so these are also
// the layers' shares of backward, which a simulator of overlapped
// communication needs: a CNN's convolutions hold few of its parameters
// but most of its arithmetic.
func TensorWork(spec Spec) ([]float64, error) {
	m, err := New(spec, NewCPU())
	if err != nil {
		return nil, err
	}
	var work []float64
	for _, l := range m.(*net).layers {
		switch l := l.(type) {
		case *dense:
			work = append(work, float64(l.nin)*float64(l.nout), float64(l.nout))
		case *conv2d:
			hw := float64(l.oshp.h * l.oshp.w)
			work = append(work, float64(l.oshp.c*l.ishp.c*l.kh*l.kw)*hw, float64(l.oshp.c)*hw)
		}
	}
	if len(work) != len(m.Layout().Tensors) {
		return nil, fmt.Errorf("nn: TensorWork: %d costs for %d tensors of %s (a layer kind it does not know)", len(work), len(m.Layout().Tensors), spec.Arch)
	}
	return work, nil
}
