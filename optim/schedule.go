package optim

import (
	"errors"
	"math"
)

// Decay names accepted in Schedule.Decay.
const (
	DecayNone   = "none"   // constant after warm-up ("" means the same)
	DecayStep   = "step"   // multiply by Gamma every DecaySteps steps (PyTorch StepLR)
	DecayCosine = "cosine" // cosine from the base lr to MinLR over DecaySteps (CosineAnnealingLR)
	DecayLinear = "linear" // straight line from the base lr to MinLR over DecaySteps
)

// Schedule scales the base learning rate by step. The zero value is a constant learning rate.
//
// Steps are counted from 0: step k is the (k+1)-th call to Optimizer.Step. The first
// WarmupSteps steps ramp linearly from base/WarmupSteps up to base (the gradual warm-up of
// Goyal et al., "Accurate, Large Minibatch SGD"); decay then starts from base, counting
// d = k − WarmupSteps:
//
//	none:   base
//	step:   max(MinLR, base·Gamma^⌊d/DecaySteps⌋)
//	cosine: MinLR + (base−MinLR)·(1+cos(π·min(d,DecaySteps)/DecaySteps))/2
//	linear: base − (base−MinLR)·min(d,DecaySteps)/DecaySteps
//
// so cosine and linear reach MinLR at step WarmupSteps+DecaySteps and stay there.
type Schedule struct {
	WarmupSteps int64   // >= 0; 0 is no warm-up
	Decay       string  // "", DecayNone, DecayStep, DecayCosine or DecayLinear
	DecaySteps  int64   // > 0 for step (the period), cosine and linear (the length)
	Gamma       float64 // step decay factor, in (0, 1]; ignored by the others
	MinLR       float64 // floor for step, end point for cosine and linear; >= 0, <= Config.LR
}

func (s Schedule) usesMinLR() bool {
	return s.Decay == DecayStep || s.Decay == DecayCosine || s.Decay == DecayLinear
}

// Validate reports every out-of-range field, joined; each error wraps ErrInvalidConfig.
// That MinLR does not exceed the base lr is checked by Config.Validate, which knows the base.
func (s Schedule) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, errorf(ErrInvalidConfig, "schedule: "+format, args...))
	}
	if s.WarmupSteps < 0 {
		bad("warmup steps %d: must be non-negative", s.WarmupSteps)
	}
	switch s.Decay {
	case "", DecayNone:
		if s.DecaySteps < 0 {
			bad("decay steps %d: must be non-negative", s.DecaySteps)
		}
	case DecayStep, DecayCosine, DecayLinear:
		if s.DecaySteps <= 0 {
			bad("decay steps %d: %s decay needs decay steps > 0", s.DecaySteps, s.Decay)
		}
	default:
		bad("decay %q: unknown (want none, step, cosine or linear)", s.Decay)
	}
	if s.Decay == DecayStep {
		if !(s.Gamma > 0 && s.Gamma <= 1) {
			bad("gamma %v: must be in (0, 1]", s.Gamma)
		}
	} else if !(s.Gamma >= 0) || !finite(s.Gamma) {
		bad("gamma %v: must be non-negative and finite", s.Gamma)
	}
	if !(s.MinLR >= 0) || !finite(s.MinLR) {
		bad("min lr %v: must be non-negative and finite", s.MinLR)
	}
	return errors.Join(errs...)
}

// LRAt returns the learning rate of step (counted from 0) for base learning rate base. It is a
// pure function of its arguments, usable by anyone who needs the same numbers (a worker that
// logs its lr, a server shard, a test). A negative step is taken as 0. On a schedule that fails
// Validate it does not panic, but the value is unspecified.
func (s Schedule) LRAt(base float64, step int64) float64 {
	if step < 0 {
		step = 0
	}
	if step < s.WarmupSteps {
		return base * float64(step+1) / float64(s.WarmupSteps)
	}
	if s.DecaySteps <= 0 {
		return base
	}
	d := step - s.WarmupSteps
	switch s.Decay {
	case DecayStep:
		return math.Max(s.MinLR, base*math.Pow(s.Gamma, float64(d/s.DecaySteps)))
	case DecayCosine:
		if d >= s.DecaySteps {
			return s.MinLR
		}
		frac := float64(d) / float64(s.DecaySteps)
		return s.MinLR + (base-s.MinLR)*(1+math.Cos(math.Pi*frac))/2
	case DecayLinear:
		if d >= s.DecaySteps {
			return s.MinLR
		}
		frac := float64(d) / float64(s.DecaySteps)
		return base - (base-s.MinLR)*frac
	}
	return base
}
