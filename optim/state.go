package optim

import (
	"math"
	"slices"
	"strings"
)

// State is an optimizer's mutable state, for checkpoints: the step count and one named slice
// per state slot (SlotMomentumBuffer, SlotSum, SlotExpAvg, SlotExpAvgSq, as in PyTorch's
// state_dict, and delayed-nesterov's SlotNextMomentum). Plain "sgd" has no slots. Delayed-nesterov's
// Steps also says where it is between two momentum updates.
type State struct {
	Steps int64
	Slots map[string][]float32
}

// slotNames lists the slots of the optimizer's algorithm, sorted.
func (o *Optimizer) slotNames() []string {
	switch o.alg {
	case algMomentum, algNesterov:
		return []string{SlotMomentumBuffer}
	case algAdagrad:
		return []string{SlotSum}
	case algAdam, algAdamW:
		return []string{SlotExpAvg, SlotExpAvgSq}
	case algDelayedNesterov:
		return []string{SlotMomentumBuffer, SlotNextMomentum}
	}
	return nil
}

// slot returns the live slice of a slot name.
func (o *Optimizer) slot(name string) []float32 {
	switch name {
	case SlotMomentumBuffer, SlotSum:
		return o.buf
	case SlotExpAvg, SlotNextMomentum:
		return o.m
	case SlotExpAvgSq:
		return o.v
	}
	return nil
}

// SlotNames returns the names of the algorithm's state slots, sorted (none for "sgd").
func (o *Optimizer) SlotNames() []string { return o.slotNames() }

// LiveSlots returns the optimizer's own state slots by name, not copies (none for "sgd"): for a
// caller that applies the steps elsewhere (Advance) and copies the state there and back, in
// place. Step and StepInto change them; the caller must not keep them past its use.
func (o *Optimizer) LiveSlots() map[string][]float32 {
	s := make(map[string][]float32)
	for _, name := range o.slotNames() {
		s[name] = o.slot(name)
	}
	return s
}

// State returns a deep copy of the optimizer's state; the caller owns it, and later steps do not
// change it. It allocates Len() floats per slot.
func (o *Optimizer) State() State {
	s := State{Steps: o.steps, Slots: make(map[string][]float32)}
	for _, name := range o.slotNames() {
		s.Slots[name] = slices.Clone(o.slot(name))
	}
	return s
}

// Restore replaces the optimizer's state with a copy of s (s is not retained). s must have
// Steps >= 0 and exactly the algorithm's slots, each of Len() finite floats, with sum and
// exp_avg_sq non-negative. Otherwise Restore returns an error wrapping ErrInvalidState and the
// optimizer is left exactly as it was. The Config (lr, schedule, ...) is not part of the state.
func (o *Optimizer) Restore(s State) error {
	if s.Steps < 0 {
		return errorf(ErrInvalidState, "restore: steps %d: must be non-negative", s.Steps)
	}
	want := o.slotNames()
	for name := range s.Slots {
		if !slices.Contains(want, name) {
			return errorf(ErrInvalidState, "restore: slot %q: unknown for %s (want %s)",
				name, o.cfg.Algorithm, describeSlots(want))
		}
	}
	for _, name := range want {
		vals, ok := s.Slots[name]
		if !ok {
			return errorf(ErrInvalidState, "restore: slot %q: missing for %s", name, o.cfg.Algorithm)
		}
		if len(vals) != o.n {
			return errorf(ErrInvalidState, "restore: slot %q has %d floats, want %d", name, len(vals), o.n)
		}
		nonNeg := name == SlotSum || name == SlotExpAvgSq
		for i, x := range vals {
			f := float64(x)
			if math.IsNaN(f) || math.IsInf(f, 0) || (nonNeg && x < 0) {
				want := "finite"
				if nonNeg {
					want = "finite and non-negative"
				}
				return errorf(ErrInvalidState, "restore: slot %q[%d] = %v: must be %s", name, i, x, want)
			}
		}
	}
	for _, name := range want {
		copy(o.slot(name), s.Slots[name])
	}
	o.steps = s.Steps
	return nil
}

func describeSlots(names []string) string {
	if len(names) == 0 {
		return "no slots"
	}
	return strings.Join(names, ", ")
}
