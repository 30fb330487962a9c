package nn

import (
	"fmt"
	"maps"
	"slices"

	"github.com/shoalml/shoal/optim"
)

// The resident run (worker.Ring with RingConfig.Resident): between
// LoadResident and EndResident the weights and the optimizer's state
// slots live on the device. A step uploads the batch, downloads the
// gradient for the allreduce, and uploads the reduced gradient, which
// the device's optimizer kernel applies there (StepResident): the weights
// are not uploaded after every update, and the host optimizer does not
// run. The host vector is brought up to date only when asked
// (StoreResident): for the desync hash, an evaluation, a checkpoint, the
// end of the run or an elastic re-form.

// residentRun is a resident run's state.
type residentRun struct {
	params  []float32      // the host vector loaded from, and stored into
	slots   map[string]Mem // the optimizer's state slots, by optim's names
	allocs  []Mem          // their allocations, and the scratch's
	scratch Mem            // plain SGD's momentum buffer, zeroed each step
	current bool           // params holds the device's weights
}

// LoadResident starts a resident run: it copies params and the
// optimizer's state slots (optim.Optimizer.LiveSlots: none for SGD, a
// momentum buffer, or Adam's two moments, each of params' length) to the
// device. Until EndResident, ForwardBackward and Evaluate compute with
// the device's weights and must be given params itself (the same slice;
// a panic otherwise), which ForwardBackward does not upload and Evaluate
// requires to be up to date (StoreResident since the last StepResident).
// A run under way is ended first.
func (m *DeviceModel) LoadResident(params []float32, slots map[string][]float32) error {
	m.host.checkVec("LoadResident", "params", params)
	m.EndResident()
	if m.err != nil {
		return m.err
	}
	r := &residentRun{params: params, slots: map[string]Mem{}}
	for _, name := range slices.Sorted(maps.Keys(slots)) {
		v := slots[name]
		if len(v) != len(params) {
			r.free(m.dev)
			return fmt.Errorf("nn: LoadResident: optimizer slot %s has %d floats, want %d (the parameters')", name, len(v), len(params))
		}
		b, err := m.dev.Alloc(4 * max(len(v), 1))
		if err != nil {
			r.free(m.dev)
			return fmt.Errorf("nn: %s on %s: optimizer slot %s: %w", m.host.arch, m.dev.Name(), name, err)
		}
		r.allocs = append(r.allocs, b)
		r.slots[name] = b.Slice(0, len(v))
		m.dev.Upload(r.slots[name], F32Bytes(v))
	}
	m.dev.Upload(m.params, F32Bytes(params))
	if err := m.dev.Sync(); err != nil {
		r.free(m.dev)
		m.err = fmt.Errorf("%w: %s: %w", ErrDevice, m.dev.Name(), err)
		return m.err
	}
	r.current = true
	m.resident = false // TrainStep's run, if any, is over
	m.res = r
	return nil
}

// StepResident uploads grads, the reduced gradient, and applies the
// optimizer step s (optim.Optimizer.Advance's) to the device's weights
// and slots with the device's kernel: SGDMomentum for sgd (momentum 0 on
// a zeroed buffer), momentum and nesterov, Adam for adam and adamw. It
// queues the work and returns; grads must stay unchanged until the next
// call that syncs (the next step's ForwardBackward), whose errors include
// this one's. It panics outside a resident run.
func (m *DeviceModel) StepResident(grads []float32, s optim.DeviceStep) error {
	r := m.res
	if r == nil {
		panic("nn: StepResident without LoadResident")
	}
	m.host.checkVec("StepResident", "grads", grads)
	if m.err != nil {
		return m.err
	}
	slot := func(name string) (Mem, error) {
		b, ok := r.slots[name]
		if !ok {
			return Mem{}, fmt.Errorf("nn: StepResident: optimizer %s needs slot %s, which LoadResident was not given", s.Algorithm, name)
		}
		return b, nil
	}
	n := len(grads)
	switch s.Algorithm {
	case optim.SGD:
		if r.scratch.Nil() {
			b, err := m.dev.Alloc(4 * max(n, 1))
			if err != nil {
				return fmt.Errorf("nn: %s on %s: SGD's scratch: %w", m.host.arch, m.dev.Name(), err)
			}
			r.allocs = append(r.allocs, b)
			r.scratch = b.Slice(0, n)
		}
		m.dev.Upload(m.grads, F32Bytes(grads))
		m.dev.Zero(r.scratch, n)
		m.dev.SGDMomentum(m.params, r.scratch, m.grads, n, s.LR, 0, s.WD, false)
	case optim.Momentum, optim.Nesterov:
		buf, err := slot(optim.SlotMomentumBuffer)
		if err != nil {
			return err
		}
		m.dev.Upload(m.grads, F32Bytes(grads))
		m.dev.SGDMomentum(m.params, buf, m.grads, n, s.LR, s.Momentum, s.WD, s.Algorithm == optim.Nesterov)
	case optim.Adam, optim.AdamW:
		mom, err := slot(optim.SlotExpAvg)
		if err != nil {
			return err
		}
		sq, err := slot(optim.SlotExpAvgSq)
		if err != nil {
			return err
		}
		m.dev.Upload(m.grads, F32Bytes(grads))
		m.dev.Adam(m.params, mom, sq, m.grads, n, s.Adam)
	default:
		return fmt.Errorf("nn: StepResident: optimizer %q has no device step (want sgd, momentum, nesterov, adam or adamw)", s.Algorithm)
	}
	r.current = false
	return nil
}

// StoreResident copies the device's weights into the vector LoadResident
// was given, and each of the device's slots into slots[name] (a slot
// slots does not name is not copied), and waits for the copies. It
// panics outside a resident run.
func (m *DeviceModel) StoreResident(slots map[string][]float32) error {
	r := m.res
	if r == nil {
		panic("nn: StoreResident without LoadResident")
	}
	if m.err != nil {
		return m.err
	}
	for name, v := range slots {
		b, ok := r.slots[name]
		if !ok || len(v) != b.Bytes()/4 {
			return fmt.Errorf("nn: StoreResident: slot %s of %d floats: the device holds %s", name, len(v), describeSlots(r.slots))
		}
		m.dev.Download(F32Bytes(v), b)
	}
	m.dev.Download(F32Bytes(r.params), m.params)
	if err := m.dev.Sync(); err != nil {
		m.err = fmt.Errorf("%w: %s: %w", ErrDevice, m.dev.Name(), err)
		return m.err
	}
	r.current = true
	return nil
}

// EndResident ends a resident run (if one is under way) and frees the
// device's slots; the host vector keeps what the last StoreResident put
// there. ForwardBackward and Evaluate upload their params again.
func (m *DeviceModel) EndResident() {
	if m.res != nil {
		m.res.free(m.dev)
		m.res = nil
	}
}

// Resident reports whether a resident run is under way.
func (m *DeviceModel) Resident() bool { return m.res != nil }

// residentParams checks, in a resident run, that params is the run's
// host vector, and for op (an evaluation: current) that it holds the
// device's weights.
func (m *DeviceModel) residentParams(op string, params []float32, current bool) {
	r := m.res
	if len(params) != len(r.params) || &params[0] != &r.params[0] {
		panic(fmt.Sprintf("nn: %s in a resident run: params is not the vector LoadResident was given", op))
	}
	if current && !r.current {
		panic(fmt.Sprintf("nn: %s in a resident run: the device's weights are newer than params (StoreResident first)", op))
	}
}

func (r *residentRun) free(dev Device) {
	for _, b := range r.allocs {
		dev.Free(b)
	}
	r.allocs, r.slots, r.scratch = nil, nil, Mem{}
}

func describeSlots(s map[string]Mem) string {
	if len(s) == 0 {
		return "no slot"
	}
	var names []string
	for _, name := range slices.Sorted(maps.Keys(s)) {
		names = append(names, fmt.Sprintf("%s of %d floats", name, s[name].Bytes()/4))
	}
	return fmt.Sprint(names)
}
