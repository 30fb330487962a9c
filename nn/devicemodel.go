package nn

import (
	"errors"
	"fmt"
	"math"
)

// ErrDevice is wrapped by the error a device model reports (Err) once its
// device failed.
var ErrDevice = errors.New("nn: device failed")

// Failer is implemented by models that can fail outside the caller's
// control, such as a model on a GPU: after a call that returned a NaN
// loss, Err says why. A worker checks it after each step and ends with
// that error.
type Failer interface {
	// Err returns the first device error, or nil. Once set it stays: a
	// lost device context does not come back.
	Err() error
}

// NewOnDevice returns the model spec describes, running on dev: its
// parameters, gradients and activations live in the device's memory, and
// one ForwardBackward uploads the weights and the batch, runs forward and
// backward there, and downloads the gradient vector and the per-sample
// losses. Layout, Init and the caller checks are New's, so the vectors are
// interchangeable with a CPU model's. Call Close to free the device
// memory; the model does not close dev.
//
// A device error (Sync) makes the calls return a NaN loss and zero
// correct from then on, and Err returns it.
func NewOnDevice(spec Spec, dev Device) (*DeviceModel, error) {
	if dev == nil {
		return nil, errors.New("nn: NewOnDevice: nil Device")
	}
	m, err := New(spec, NewCPU())
	if err != nil {
		return nil, err
	}
	host := m.(*net)
	dm := &DeviceModel{host: host, dev: dev}
	size := host.layout.Size()
	if dm.params, err = dev.Alloc(4 * size); err != nil {
		return nil, fmt.Errorf("nn: %s on %s: parameters: %w", host.arch, dev.Name(), err)
	}
	dm.owned = append(dm.owned, dm.params)
	if dm.grads, err = dm.alloc(size); err != nil {
		dm.Close()
		return nil, err
	}
	return dm, nil
}

// DeviceModel is a Model whose step runs on a Device; see NewOnDevice.
type DeviceModel struct {
	host          *net
	dev           Device
	params, grads Mem
	owned         []Mem // every allocation, freed by Close

	// Per batch-size buffers, grown for a larger batch.
	batch         int
	x, labels     Mem
	loss, correct Mem
	acts, dacts   []Mem // acts[i] is layer i's input; dacts[i] its gradient
	cols          []Mem // per layer: im2col of the whole batch (conv)
	dcol          []Mem // per layer: one sample's column gradient (conv)
	args          []Mem // per layer: max pool indices
	hostLoss      []float32
	hostCorrect   []int32
	err           error

	// The resident step's momentum buffer (see Load), and whether the
	// device holds the weights the resident step trains.
	mom      Mem
	resident bool
}

var (
	_ Model  = (*DeviceModel)(nil)
	_ Failer = (*DeviceModel)(nil)
)

func (m *DeviceModel) Name() string   { return m.host.arch }
func (m *DeviceModel) Layout() Layout { return m.host.layout }
func (m *DeviceModel) InputSize() int { return m.host.in.size() }
func (m *DeviceModel) Classes() int   { return m.host.classes }

// Device returns the device the model runs on.
func (m *DeviceModel) Device() Device { return m.dev }

// Init fills params on the host, as New's model does.
func (m *DeviceModel) Init(params []float32, seed uint64) { m.host.Init(params, seed) }

// Err returns the first device error; see Failer.
func (m *DeviceModel) Err() error { return m.err }

// Close frees the model's device memory.
func (m *DeviceModel) Close() {
	for _, b := range m.owned {
		m.dev.Free(b)
	}
	m.owned = nil
	if !m.mom.Nil() {
		m.dev.Free(m.mom)
		m.mom = Mem{}
	}
}

// alloc returns n float32 elements of device memory owned by the model.
func (m *DeviceModel) alloc(n int) (Mem, error) {
	b, err := m.dev.Alloc(4 * max(n, 1))
	if err != nil {
		return Mem{}, fmt.Errorf("nn: %s on %s: %d floats: %w", m.host.arch, m.dev.Name(), n, err)
	}
	m.owned = append(m.owned, b)
	return b.Slice(0, n), nil
}

// ensure sizes the per-batch buffers for n samples.
func (m *DeviceModel) ensure(n int) error {
	if n <= m.batch {
		return nil
	}
	// Free the smaller set and allocate anew (keeping params and grads).
	for _, b := range m.owned[2:] {
		m.dev.Free(b)
	}
	m.owned = m.owned[:2]
	m.batch = 0
	ls := m.host.layers
	m.acts = make([]Mem, len(ls)+1)
	m.dacts = make([]Mem, len(ls)+1)
	m.cols = make([]Mem, len(ls))
	m.dcol = make([]Mem, len(ls))
	m.args = make([]Mem, len(ls))
	var err error
	get := func(k int) Mem {
		if err != nil {
			return Mem{}
		}
		var b Mem
		b, err = m.alloc(k)
		return b
	}
	m.x = get(n * m.host.in.size())
	m.labels, m.loss, m.correct = get(n), get(n), get(n)
	m.acts[0] = m.x
	for i, l := range ls {
		osz := l.out().size()
		if _, ok := l.(*flatten); ok {
			m.acts[i+1] = m.acts[i]
		} else {
			m.acts[i+1] = get(n * osz)
		}
		if _, ok := l.(*flatten); i > 0 && !ok {
			m.dacts[i] = get(n * l.in().size())
		}
		switch l := l.(type) {
		case *conv2d:
			k, hw := l.ishp.c*l.kh*l.kw, l.oshp.h*l.oshp.w
			m.cols[i] = get(n * k * hw)
			m.dcol[i] = get(k * hw)
		case *maxPool2D:
			m.args[i] = get(n * osz)
		}
	}
	m.dacts[len(ls)] = get(n * m.host.classes)
	// A flatten passes its gradient through unchanged.
	for i := len(ls) - 1; i > 0; i-- {
		if _, ok := ls[i].(*flatten); ok {
			m.dacts[i] = m.dacts[i+1]
		}
	}
	if err != nil {
		return err
	}
	m.hostLoss = make([]float32, n)
	m.hostCorrect = make([]int32, n)
	m.batch = n
	return nil
}

// ForwardBackward runs the step on the device; see Model.
func (m *DeviceModel) ForwardBackward(params, grads, x []float32, labels []int32) (float64, int) {
	n := m.host.checkBatch("ForwardBackward", params, x, labels)
	m.host.checkVec("ForwardBackward", "grads", grads)
	if n == 0 {
		clear(grads)
		return 0, 0
	}
	if !m.start(params, x, labels) {
		return math.NaN(), 0
	}
	m.forward(n)
	z := m.acts[len(m.host.layers)]
	m.dev.SoftmaxXent(z, m.labels, m.dacts[len(m.host.layers)], m.loss, m.correct, n, m.host.classes, float32(1/float64(n)))
	m.backward(n)
	m.dev.Download(F32Bytes(grads), m.grads)
	sum, correct, ok := m.finish(n)
	if !ok {
		return math.NaN(), 0
	}
	return sum / float64(n), correct
}

// Evaluate runs the batch forward on the device; see Model.
func (m *DeviceModel) Evaluate(params, x []float32, labels []int32) (float64, int) {
	n := m.host.checkBatch("Evaluate", params, x, labels)
	if n == 0 {
		return 0, 0
	}
	if !m.start(params, x, labels) {
		return math.NaN(), 0
	}
	m.forward(n)
	m.dev.SoftmaxXent(m.acts[len(m.host.layers)], m.labels, Mem{}, m.loss, m.correct, n, m.host.classes, 1)
	sum, correct, ok := m.finish(n)
	if !ok {
		return math.NaN(), 0
	}
	return sum, correct
}

// Load puts params on the device for TrainStep, with a zero momentum
// buffer: from then on the weights live there and a step moves only the
// batch and the losses. (ForwardBackward and Evaluate upload their own
// params and end the resident run; Load again to start another.)
func (m *DeviceModel) Load(params []float32) error {
	m.host.checkVec("Load", "params", params)
	if m.err != nil {
		return m.err
	}
	if m.mom.Nil() {
		b, err := m.dev.Alloc(4 * len(params))
		if err != nil {
			return fmt.Errorf("nn: %s on %s: momentum: %w", m.host.arch, m.dev.Name(), err)
		}
		m.mom = b
	}
	m.dev.Upload(m.params, F32Bytes(params))
	m.dev.Zero(m.mom, len(params))
	if err := m.dev.Sync(); err != nil {
		m.err = fmt.Errorf("%w: %s: %w", ErrDevice, m.dev.Name(), err)
		return m.err
	}
	m.resident = true
	return nil
}

// TrainStep is one step of SGD with momentum (optim.StepMomentum's
// update, weight decay 0, lr and mu as given) on the weights Load put on
// the device: forward, backward and the update all run there. It returns
// the batch's mean loss and correct count, or a NaN loss once the device
// failed (Err says why).
func (m *DeviceModel) TrainStep(x []float32, labels []int32, lr, mu float32) (float64, int) {
	if !m.resident {
		panic("nn: TrainStep without Load")
	}
	n := len(labels)
	if len(x) != n*m.host.in.size() {
		panic(fmt.Sprintf("nn: TrainStep: %d inputs for %d labels of %d", len(x), n, m.host.in.size()))
	}
	if n == 0 {
		return 0, 0
	}
	if !m.upload(x, labels) {
		return math.NaN(), 0
	}
	m.forward(n)
	top := len(m.host.layers)
	m.dev.SoftmaxXent(m.acts[top], m.labels, m.dacts[top], m.loss, m.correct, n, m.host.classes, float32(1/float64(n)))
	m.backward(n)
	m.dev.SGDMomentum(m.params, m.mom, m.grads, m.params.Bytes()/4, lr, mu, 0, false)
	sum, correct, ok := m.finish(n)
	if !ok {
		return math.NaN(), 0
	}
	return sum / float64(n), correct
}

// Store downloads the weights TrainStep trained into params.
func (m *DeviceModel) Store(params []float32) error {
	m.host.checkVec("Store", "params", params)
	if m.err != nil {
		return m.err
	}
	m.dev.Download(F32Bytes(params), m.params)
	if err := m.dev.Sync(); err != nil {
		m.err = fmt.Errorf("%w: %s: %w", ErrDevice, m.dev.Name(), err)
	}
	return m.err
}

// start checks the labels, sizes the buffers and queues the uploads.
func (m *DeviceModel) start(params, x []float32, labels []int32) bool {
	if !m.upload(x, labels) {
		return false
	}
	m.resident = false
	m.dev.Upload(m.params, F32Bytes(params))
	return true
}

// upload checks the labels, sizes the buffers and queues the batch.
func (m *DeviceModel) upload(x []float32, labels []int32) bool {
	if m.err != nil {
		return false
	}
	for s, lab := range labels {
		if lab < 0 || int(lab) >= m.host.classes {
			panic(fmt.Sprintf("nn: label %d of sample %d is outside [0, %d)", lab, s, m.host.classes))
		}
	}
	if err := m.ensure(len(labels)); err != nil {
		m.err = fmt.Errorf("%w: %w", ErrDevice, err)
		return false
	}
	m.dev.Upload(m.x, F32Bytes(x))
	m.dev.Upload(m.labels, I32Bytes(labels))
	return true
}

// finish downloads the per-sample results, waits for the device and sums.
func (m *DeviceModel) finish(n int) (float64, int, bool) {
	m.dev.Download(F32Bytes(m.hostLoss[:n]), m.loss.Slice(0, n))
	m.dev.Download(I32Bytes(m.hostCorrect[:n]), m.correct.Slice(0, n))
	if err := m.dev.Sync(); err != nil {
		m.err = fmt.Errorf("%w: %s: %w", ErrDevice, m.dev.Name(), err)
		return 0, 0, false
	}
	var sum float64
	correct := 0
	for i := range n {
		sum += float64(m.hostLoss[i])
		correct += int(m.hostCorrect[i])
	}
	return sum, correct, true
}

// view returns tensor t of the device vector v.
func view(v Mem, t Tensor) Mem { return v.Slice(t.Offset, t.Size()) }

func (m *DeviceModel) forward(n int) {
	d := m.dev
	for i, l := range m.host.layers {
		x, y := m.acts[i], m.acts[i+1]
		switch l := l.(type) {
		case *dense:
			d.Gemm(false, true, n, l.nout, l.nin, 1, x, l.nin, view(m.params, l.w), l.nin, 0, y, l.nout)
			d.BiasAct(y, view(m.params, l.b), n, l.nout, 1, l.relu)
		case *conv2d:
			k, hw := l.ishp.c*l.kh*l.kw, l.oshp.h*l.oshp.w
			isz, osz := l.ishp.size(), l.oshp.size()
			for s := range n {
				col := m.cols[i].Slice(s*k*hw, k*hw)
				d.Im2Col(x.Slice(s*isz, isz), col, l.ishp.c, l.ishp.h, l.ishp.w, l.kh, l.kw, l.pad, l.oshp.h, l.oshp.w)
				d.Gemm(false, false, l.oshp.c, hw, k, 1, view(m.params, l.w), k, col, hw, 0, y.Slice(s*osz, osz), hw)
			}
			d.BiasAct(y, view(m.params, l.b), n, l.oshp.c, hw, l.relu)
		case *maxPool2D:
			d.MaxPoolForward(x, y, m.args[i], n, l.ishp.c, l.ishp.h, l.ishp.w, l.k)
		case *flatten:
		case *reLU:
			panic("nn: a device model fuses every ReLU into its layer")
		default:
			panic(fmt.Sprintf("nn: no device version of layer %T", l))
		}
	}
}

func (m *DeviceModel) backward(n int) {
	d := m.dev
	ls := m.host.layers
	for i := len(ls) - 1; i >= m.host.first; i-- {
		x, y, dy := m.acts[i], m.acts[i+1], m.dacts[i+1]
		needDx := i > m.host.first
		dx := m.dacts[i]
		switch l := ls[i].(type) {
		case *dense:
			if l.relu {
				d.ReLUBackward(dy, y, n*l.nout)
			}
			d.Gemm(true, false, l.nout, l.nin, n, 1, dy, l.nout, x, l.nin, 0, view(m.grads, l.w), l.nin)
			d.BiasGrad(view(m.grads, l.b), dy, n, l.nout, 1)
			if needDx {
				d.Gemm(false, false, n, l.nin, l.nout, 1, dy, l.nout, view(m.params, l.w), l.nin, 0, dx, l.nin)
			}
		case *conv2d:
			k, hw := l.ishp.c*l.kh*l.kw, l.oshp.h*l.oshp.w
			isz, osz := l.ishp.size(), l.oshp.size()
			if l.relu {
				d.ReLUBackward(dy, y, n*osz)
			}
			d.BiasGrad(view(m.grads, l.b), dy, n, l.oshp.c, hw)
			for s := range n {
				dys := dy.Slice(s*osz, osz)
				beta := float32(1)
				if s == 0 {
					beta = 0
				}
				d.Gemm(false, true, l.oshp.c, k, hw, 1, dys, hw, m.cols[i].Slice(s*k*hw, k*hw), hw, beta, view(m.grads, l.w), k)
				if needDx {
					d.Gemm(true, false, k, hw, l.oshp.c, 1, view(m.params, l.w), k, dys, hw, 0, m.dcol[i], hw)
					d.Col2Im(m.dcol[i], dx.Slice(s*isz, isz), l.ishp.c, l.ishp.h, l.ishp.w, l.kh, l.kw, l.pad, l.oshp.h, l.oshp.w)
				}
			}
		case *maxPool2D:
			if needDx {
				d.MaxPoolBackward(dy, m.args[i], dx, n, l.ishp.c, l.ishp.h, l.ishp.w, l.k)
			}
		case *flatten: // the same memory both ways; see ensure
		}
	}
}
