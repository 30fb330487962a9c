package nn

import (
	"errors"
	"fmt"
	"log/slog"
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
	dm := &DeviceModel{host: host, dev: dev, scaler: newLossScaler()}
	dm.SetGraphs(true, nil)
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
	dcol          []Mem // per layer: the batch's column gradient (conv, not the first layer)
	chw           Mem   // a conv's output or its gradient, channel-major (oc × n·hw)
	args          []Mem // per layer: max pool indices
	hostLoss      []float32
	hostCorrect   []int32
	err           error

	// The resident step's momentum buffer (see Load), whether the
	// device holds the weights the resident step trains, and the size of
	// the batch KeepBatch left there (0: none).
	mom      Mem
	resident bool
	kept     int

	// The resident ring run (resident.go), nil outside one.
	res *residentRun

	// Mixed precision (SetPrecision): per layer, the half copies of its
	// weight tensor and of its GEMM input (a dense layer's x, a conv's
	// im2col columns), a half copy of the output gradient of the layer
	// in backward, the loss scaler (FP16) and the device's overflow flag.
	prec      Precision
	hw, hin   []Mem
	hdy       Mem
	scaler    lossScaler
	found     Mem
	hostFound []int32

	// Steps as graphs (devicegraph.go): the captured ones (nil: seen
	// once), why graphs are off ("" while on), how many replays, the
	// log that hears why once, and the step's transfers, kept.
	graphs             map[graphKey]Graph
	graphsOff          string
	replays            int
	graphLog           *slog.Logger
	upT, downT         []transfer
	upHosts, downHosts [][]byte
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

// SetPrecision sets what the GEMMs compute in (FP32 by default); see
// Precision. Under FP16 the loss is scaled as PyTorch's GradScaler scales
// it, from 2^16: a step whose gradients overflow float16 (a NaN or an
// infinity once unscaled) is computed again at half the scale, so that
// the gradients ForwardBackward returns are always the unscaled ones of
// one pass, and the scale doubles after 2,000 steps without overflow.
// The buffers are sized again at the next step.
func (m *DeviceModel) SetPrecision(p Precision) error {
	if p != FP32 && !p.Half() {
		return fmt.Errorf("nn: SetPrecision(%v): want fp32, bf16 or fp16", p)
	}
	m.prec, m.scaler, m.batch = p, newLossScaler(), 0
	return nil
}

// Precision returns what the GEMMs compute in.
func (m *DeviceModel) Precision() Precision { return m.prec }

// LossScale returns the FP16 loss scale the next step starts from, and
// how many steps overflowed and were computed again so far.
func (m *DeviceModel) LossScale() (scale float32, overflows int) {
	return m.scaler.scale, m.scaler.overflows
}

// Close frees the model's device memory and graphs.
func (m *DeviceModel) Close() {
	m.EndResident()
	m.releaseGraphs()
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
	// Free the smaller set and allocate anew (keeping params and grads);
	// the graphs hold the old buffers.
	m.releaseGraphs()
	for _, b := range m.owned[2:] {
		m.dev.Free(b)
	}
	m.owned = m.owned[:2]
	m.batch, m.kept = 0, 0
	ls := m.host.layers
	m.acts = make([]Mem, len(ls)+1)
	m.dacts = make([]Mem, len(ls)+1)
	m.cols = make([]Mem, len(ls))
	m.dcol = make([]Mem, len(ls))
	chw := 0
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
	// k halves, in an allocation of their own: 256-byte aligned, as the
	// tensor cores want their operands.
	getHalves := func(k int) Mem {
		return get((k+1)/2).Halves(0, k)
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
			if i > m.host.first {
				m.dcol[i] = get(n * k * hw)
			}
			chw = max(chw, n*osz)
		case *maxPool2D:
			m.args[i] = get(n * osz)
		}
	}
	m.dacts[len(ls)] = get(n * m.host.classes)
	m.chw = Mem{}
	if chw > 0 {
		m.chw = get(chw)
	}
	m.hw, m.hin, m.hdy = nil, nil, Mem{}
	if m.prec.Half() {
		m.hw, m.hin = make([]Mem, len(ls)), make([]Mem, len(ls))
		dy := 0
		for i, l := range ls {
			switch l := l.(type) {
			case *dense:
				m.hw[i], m.hin[i] = getHalves(l.w.Size()), getHalves(n*l.nin)
				dy = max(dy, n*l.nout)
			case *conv2d:
				m.hw[i], m.hin[i] = getHalves(l.w.Size()), getHalves(n*l.ishp.c*l.kh*l.kw*l.oshp.h*l.oshp.w)
				dy = max(dy, n*l.oshp.size())
			}
		}
		m.hdy = getHalves(dy)
		m.found = get(1)
	}
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
	m.hostFound = make([]int32, 1)
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
	if !m.prepare(labels) {
		return math.NaN(), 0
	}
	m.resident = false
	key, up := m.key(opForwardBackward, n), params
	if m.res != nil { // the weights are on the device already
		m.residentParams("ForwardBackward", params, false)
		key.op, up = opResidentPass, nil
	}
	ups := m.uploads(x, labels, up)
	downs := m.downloads(n, F32Bytes(grads), true)
	m.step(key, ups, downs, func() { m.pass(n, true) })
	for {
		sum, correct, ok := m.finish(n)
		if !ok {
			return math.NaN(), 0
		}
		if !m.again(sum) {
			return m.mean(sum, n), correct
		}
		// Again at the smaller scale, op by op (an overflow is rare).
		m.eager(nil, downs, func() { m.pass(n, false) })
	}
}

// key is the graph key of a step of n samples in the model's precision.
func (m *DeviceModel) key(op graphOp, n int) graphKey {
	k := graphKey{op: op, n: n, precision: m.prec}
	if m.prec == FP16 {
		k.scale = m.scaler.scale
	}
	return k
}

// uploads lists a step's uploads: the batch, and params unless nil.
// The batch replaces a kept one.
func (m *DeviceModel) uploads(x []float32, labels []int32, params []float32) []transfer {
	m.kept = 0
	m.upT = append(m.upT[:0], transfer{F32Bytes(x), m.x}, transfer{I32Bytes(labels), m.labels})
	if params != nil {
		m.upT = append(m.upT, transfer{F32Bytes(params), m.params})
	}
	return m.upT
}

// downloads lists a step's downloads: the gradients unless grads is nil,
// the per-sample losses and correct counts of n samples, and under FP16
// the overflow flag when found.
func (m *DeviceModel) downloads(n int, grads []byte, found bool) []transfer {
	m.downT = m.downT[:0]
	if grads != nil {
		m.downT = append(m.downT, transfer{grads, m.grads})
	}
	m.downT = append(m.downT, transfer{F32Bytes(m.hostLoss[:n]), m.loss.Slice(0, n)}, transfer{I32Bytes(m.hostCorrect[:n]), m.correct.Slice(0, n)})
	if found && m.prec == FP16 {
		m.downT = append(m.downT, transfer{I32Bytes(m.hostFound), m.found})
	}
	return m.downT
}

// pass queues forward (unless the activations are there already: a pass
// taken again at a smaller loss scale), the loss and backward of n
// samples; under FP16 the loss is scaled and the gradients unscaled and
// checked into the overflow flag (see again), which the caller
// downloads. Backward leaves the activations as they are.
func (m *DeviceModel) pass(n int, forward bool) {
	if forward {
		m.forward(n)
	}
	top := len(m.host.layers)
	scale := 1.0
	if m.prec == FP16 {
		scale = float64(m.scaler.scale)
	}
	m.dev.SoftmaxXent(m.acts[top], m.labels, m.dacts[top], m.loss, m.correct, n, m.host.classes, float32(scale/float64(n)))
	m.backward(n)
	if m.prec == FP16 {
		m.dev.Zero(m.found, 1)
		m.dev.Unscale(m.grads, m.grads.Bytes()/4, float32(1/scale), m.found)
	}
}

// again says, after an FP16 pass whose results are in (finish), whether
// its gradients overflowed and the pass must be taken again at the
// smaller scale the scaler now holds. A pass whose loss is not finite is
// not taken again (scaling does not reach the forward pass: that is
// divergence, and the caller sees the loss), nor one that overflowed at a
// scale of 1 (Err then wraps ErrOverflow).
func (m *DeviceModel) again(sum float64) bool {
	if m.prec != FP16 {
		return false
	}
	if m.hostFound[0] == 0 {
		m.scaler.ok()
		return false
	}
	if math.IsNaN(sum) || math.IsInf(sum, 0) {
		return false
	}
	if m.scaler.overflow() {
		return true
	}
	m.err = fmt.Errorf("%w: %s on %s (train in bf16 or fp32)", ErrOverflow, m.host.arch, m.dev.Name())
	return false
}

// mean is the batch's mean loss, NaN once the model failed.
func (m *DeviceModel) mean(sum float64, n int) float64 {
	if m.err != nil {
		return math.NaN()
	}
	return sum / float64(n)
}

// Evaluate runs the batch forward on the device; see Model.
func (m *DeviceModel) Evaluate(params, x []float32, labels []int32) (float64, int) {
	n := m.host.checkBatch("Evaluate", params, x, labels)
	if n == 0 {
		return 0, 0
	}
	if !m.prepare(labels) {
		return math.NaN(), 0
	}
	m.resident = false
	key, up := m.key(opEvaluate, n), params
	if m.res != nil { // the weights are on the device already
		m.residentParams("Evaluate", params, true)
		key.op, up = opResidentEvaluate, nil
	}
	m.step(key, m.uploads(x, labels, up), m.downloads(n, nil, false), func() {
		m.forward(n)
		m.dev.SoftmaxXent(m.acts[len(m.host.layers)], m.labels, Mem{}, m.loss, m.correct, n, m.host.classes, 1)
	})
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
	m.EndResident()
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
	if !m.prepare(labels) {
		return math.NaN(), 0
	}
	return m.trainStep(n, m.uploads(x, labels, nil), lr, mu)
}

// KeepBatch uploads a batch once, for TrainKept: the steps of a
// benchmark that, like its PyTorch peer, keeps one batch on the device
// (a training worker uploads each batch: TrainStep). Any other step
// (TrainStep, ForwardBackward, Evaluate) replaces the kept batch.
func (m *DeviceModel) KeepBatch(x []float32, labels []int32) error {
	n := len(labels)
	if n == 0 || len(x) != n*m.host.in.size() {
		return fmt.Errorf("nn: KeepBatch: %d inputs for %d labels of %d: want a non-empty batch", len(x), n, m.host.in.size())
	}
	if !m.prepare(labels) {
		return m.err
	}
	for _, t := range m.uploads(x, labels, nil) {
		m.dev.Upload(t.dev, t.host)
	}
	if err := m.dev.Sync(); err != nil {
		m.err = fmt.Errorf("%w: %s: %w", ErrDevice, m.dev.Name(), err)
		return m.err
	}
	m.kept = n
	return nil
}

// TrainKept is TrainStep on the batch KeepBatch left on the device.
func (m *DeviceModel) TrainKept(lr, mu float32) (float64, int) {
	if !m.resident || m.kept == 0 {
		panic("nn: TrainKept without Load and KeepBatch")
	}
	if m.err != nil {
		return math.NaN(), 0
	}
	return m.trainStep(m.kept, nil, lr, mu)
}

// trainStep is TrainStep's step of n samples after the uploads ups
// (none: the batch is on the device already).
func (m *DeviceModel) trainStep(n int, ups []transfer, lr, mu float32) (float64, int) {
	update := func() { m.dev.SGDMomentum(m.params, m.mom, m.grads, m.params.Bytes()/4, lr, mu, 0, false) }
	if m.prec != FP16 {
		key := m.key(opTrainStep, n)
		key.lr, key.mu, key.kept = lr, mu, ups == nil
		m.step(key, ups, m.downloads(n, nil, false), func() {
			m.pass(n, true)
			update()
		})
		sum, correct, ok := m.finish(n)
		if !ok {
			return math.NaN(), 0
		}
		return sum / float64(n), correct
	}
	// FP16: the overflow check waits for the pass before the update.
	downs := m.downloads(n, nil, true)
	key := m.key(opTrainPass, n)
	key.kept = ups == nil
	m.step(key, ups, downs, func() { m.pass(n, true) })
	for {
		sum, correct, ok := m.finish(n)
		if !ok {
			return math.NaN(), 0
		}
		if m.again(sum) {
			m.eager(nil, downs, func() { m.pass(n, false) })
			continue
		}
		if math.IsNaN(sum) || math.IsInf(sum, 0) || m.err != nil {
			return math.NaN(), 0
		}
		update()
		if err := m.dev.Sync(); err != nil {
			m.err = fmt.Errorf("%w: %s: %w", ErrDevice, m.dev.Name(), err)
			return math.NaN(), 0
		}
		return sum / float64(n), correct
	}
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

// prepare checks the labels and sizes the buffers for them.
func (m *DeviceModel) prepare(labels []int32) bool {
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
	return true
}

// finish waits for the device, whose downloads of the per-sample results
// are queued, and sums them.
func (m *DeviceModel) finish(n int) (float64, int, bool) {
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

// operand is a GEMM input: its float32 memory and, under mixed precision,
// its half copy.
type operand struct{ f, h Mem }

// gemm is Device.Gemm on the float32 operands, or GemmHalf on their half
// copies under mixed precision.
func (m *DeviceModel) gemm(tA, tB bool, rows, cols, k int, a operand, lda int, b operand, ldb int, beta float32, c Mem, ldc int) {
	if !m.prec.Half() {
		m.dev.Gemm(tA, tB, rows, cols, k, 1, a.f, lda, b.f, ldb, beta, c, ldc)
		return
	}
	m.dev.GemmHalf(tA, tB, rows, cols, k, 1, a.h, lda, b.h, ldb, beta, c, ldc, m.prec == BF16)
}

// half fills o's half copy from its float32 memory (n elements) under
// mixed precision, and returns o.
func (m *DeviceModel) half(o operand, n int) operand {
	if m.prec.Half() {
		m.dev.ToHalf(o.h, o.f, n, m.prec == BF16)
	}
	return o
}

// weights returns layer i's weight tensor t as an operand.
func (m *DeviceModel) weights(i int, t Tensor) operand {
	o := operand{f: view(m.params, t)}
	if m.prec.Half() {
		o.h = m.hw[i]
	}
	return o
}

// input returns layer i's GEMM input (x of a dense layer, the im2col
// columns of a conv), n elements, as an operand.
func (m *DeviceModel) input(i int, f Mem, n int) operand {
	o := operand{f: f.Slice(0, n)}
	if m.prec.Half() {
		o.h = m.hin[i].Halves(0, n)
	}
	return o
}

func (m *DeviceModel) forward(n int) {
	d := m.dev
	for i, l := range m.host.layers {
		x, y := m.acts[i], m.acts[i+1]
		switch l := l.(type) {
		case *dense:
			w := m.half(m.weights(i, l.w), l.w.Size())
			in := m.half(m.input(i, x, n*l.nin), n*l.nin)
			m.gemm(false, true, n, l.nout, l.nin, in, l.nin, w, l.nin, 0, y, l.nout)
			d.BiasAct(y, view(m.params, l.b), n, l.nout, 1, l.relu)
		case *conv2d:
			// The batch's columns side by side, one GEMM for the whole
			// batch (oc × n·hw), then NCHW.
			k, hw := l.ishp.c*l.kh*l.kw, l.oshp.h*l.oshp.w
			d.Im2Col(x, m.cols[i], n, l.ishp.c, l.ishp.h, l.ishp.w, l.kh, l.kw, l.pad, l.oshp.h, l.oshp.w)
			w := m.half(m.weights(i, l.w), l.w.Size())
			cols := m.half(m.input(i, m.cols[i], n*k*hw), n*k*hw)
			m.gemm(false, false, l.oshp.c, n*hw, k, w, k, cols, n*hw, 0, m.chw, n*hw)
			d.SwapAxes(y, m.chw, l.oshp.c, n, hw)
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
			// The ReLU's backward, in place, with the bias gradient.
			d.BiasGrad(view(m.grads, l.b), dy, reluOut(l.relu, y), n, l.nout, 1)
			g := m.half(m.outGrad(dy, n*l.nout), n*l.nout)
			// The half copies of x and the weights are forward's.
			m.gemm(true, false, l.nout, l.nin, n, g, l.nout, m.input(i, x, n*l.nin), l.nin, 0, view(m.grads, l.w), l.nin)
			if needDx {
				m.gemm(false, false, n, l.nin, l.nout, g, l.nout, m.weights(i, l.w), l.nin, 0, dx, l.nin)
			}
		case *conv2d:
			// dy channel-major (oc × n·hw), as forward's GEMM wrote it:
			// one GEMM each for the weights' and the columns' gradients.
			k, hw := l.ishp.c*l.kh*l.kw, l.oshp.h*l.oshp.w
			osz := l.oshp.size()
			d.BiasGrad(view(m.grads, l.b), dy, reluOut(l.relu, y), n, l.oshp.c, hw)
			d.SwapAxes(m.chw, dy, n, l.oshp.c, hw)
			g := m.half(m.outGrad(m.chw, n*osz), n*osz)
			cols, w := m.input(i, m.cols[i], n*k*hw), m.weights(i, l.w)
			m.gemm(false, true, l.oshp.c, k, n*hw, g, n*hw, cols, n*hw, 0, view(m.grads, l.w), k)
			if needDx {
				m.gemm(true, false, k, n*hw, l.oshp.c, w, k, g, n*hw, 0, m.dcol[i], n*hw)
				d.Col2Im(m.dcol[i], dx, n, l.ishp.c, l.ishp.h, l.ishp.w, l.kh, l.kw, l.pad, l.oshp.h, l.oshp.w)
			}
		case *maxPool2D:
			if needDx {
				d.MaxPoolBackward(dy, m.args[i], dx, n, l.ishp.c, l.ishp.h, l.ishp.w, l.k)
			}
		case *flatten: // the same memory both ways; see ensure
		}
	}
}

// reluOut is a layer's output y when a ReLU made it (BiasGrad's y), else
// nil.
func reluOut(relu bool, y Mem) Mem {
	if relu {
		return y
	}
	return Mem{}
}

// outGrad returns a layer's output gradient dy (n elements) as an
// operand, its half copy in the shared scratch.
func (m *DeviceModel) outGrad(dy Mem, n int) operand {
	o := operand{f: dy.Slice(0, n)}
	if m.prec.Half() {
		o.h = m.hdy.Halves(0, n)
	}
	return o
}
