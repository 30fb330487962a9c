package optim

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Algorithm names accepted in Config.Algorithm.
const (
	SGD      = "sgd"      // plain SGD: p -= lr·g
	Momentum = "momentum" // SGD with heavy-ball momentum (PyTorch SGD, momentum > 0)
	Nesterov = "nesterov" // SGD with Nesterov momentum (PyTorch SGD, nesterov=True)
	Adagrad  = "adagrad"  // PyTorch Adagrad with lr_decay 0 and initial accumulator 0
	Adam     = "adam"     // PyTorch Adam (amsgrad off, weight decay coupled as L2)
	AdamW    = "adamw"    // PyTorch AdamW (amsgrad off, weight decay decoupled: p *= 1 − lr·wd first)
	// DelayedNesterov is Liu et al.'s delayed Nesterov momentum ("Asynchronous Local-SGD
	// Training for Language Modeling", arXiv 2401.09135, Algorithm 3, with momentum activation
	// c = 0), for a server applying each of many workers' (pseudo-)gradients as it arrives: every
	// step applies its gradient at lr/N without momentum, and every N-th step (N Config.Delay)
	// also updates the momentum buffer with the mean of the last N gradients and applies it. A
	// round of N steps then moves the weights as one Nesterov step on their mean does, and a
	// stale gradient never takes a momentum step of its own. With N = 1 it is Nesterov.
	DelayedNesterov = "delayed-nesterov"
)

// Default hyper-parameters, those of torch.optim where it has one.
const (
	DefaultLR             = 0.01
	DefaultMomentum       = 0.9
	DefaultBeta1          = 0.9
	DefaultBeta2          = 0.999
	DefaultAdamEpsilon    = 1e-8
	DefaultAdagradEpsilon = 1e-10
)

// Sentinel errors. Every error returned by this package wraps exactly one of them, so callers
// (and the gRPC adapters) branch with errors.Is, never on message text.
var (
	// ErrInvalidConfig: a Config or Schedule field is out of range, or New got a negative size.
	ErrInvalidConfig = errors.New("invalid optimizer config")
	// ErrLength: Step got params or grads whose length is not the optimizer's.
	ErrLength = errors.New("length mismatch")
	// ErrInvalidState: Restore got a state that does not fit the optimizer.
	ErrInvalidState = errors.New("invalid optimizer state")
)

// kindError carries a complete, human-readable message and unwraps to one sentinel, so the
// message reads "lr -1: must be positive and finite" rather than "sentinel: lr -1: ...".
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

func errorf(kind error, format string, args ...any) error {
	return &kindError{msg: fmt.Sprintf(format, args...), kind: kind}
}

// Config selects an algorithm and its hyper-parameters. Start from DefaultConfig: fields whose
// zero value is a legal setting (Momentum, Beta1, Beta2, WeightDecay) are taken as given, so a
// Config literal that leaves them out gets 0, not the PyTorch default.
type Config struct {
	// Algorithm is one of SGD, Momentum, Nesterov, Adagrad, Adam, AdamW.
	Algorithm string
	// LR is the base learning rate, > 0 and finite. Schedule scales it per step.
	LR float64
	// Momentum μ for "momentum", "nesterov" and "delayed-nesterov", in [0, 1); "nesterov"
	// needs μ > 0 (as PyTorch).
	// Ignored by the other algorithms. Dampening is always 0.
	Momentum float64
	// WeightDecay is PyTorch's coupled L2 weight_decay (g += wd·p before the update), >= 0.
	WeightDecay float64
	// Beta1 and Beta2 are Adam's moment decay rates, each in [0, 1). Ignored by the others.
	Beta1, Beta2 float64
	// Epsilon is added to the denominator of Adam and Adagrad, >= 0. Zero selects the
	// algorithm's PyTorch default (DefaultAdamEpsilon, DefaultAdagradEpsilon), which is why an
	// exact zero epsilon cannot be asked for (it would also divide 0 by 0 on a zero gradient).
	Epsilon float64
	// Delay N of DelayedNesterov: the steps between its momentum updates (the gradients whose
	// mean each takes), in 1..MaxDelay; 0 is 1. Ignored by the other algorithms.
	Delay int
	// Schedule scales LR per step; the zero value keeps it constant.
	Schedule Schedule
}

// MaxDelay bounds Config.Delay.
const MaxDelay = 1 << 20

// DefaultConfig returns plain SGD at lr 0.01 with the PyTorch defaults filled in for the other
// algorithms (momentum 0.9, betas 0.9 and 0.999, epsilon per algorithm), so that switching
// Algorithm alone gives a sensible optimizer.
func DefaultConfig() Config {
	return Config{
		Algorithm: SGD,
		LR:        DefaultLR,
		Momentum:  DefaultMomentum,
		Beta1:     DefaultBeta1,
		Beta2:     DefaultBeta2,
	}
}

// Algorithms returns the accepted Algorithm names, in a fixed order. The slice is a fresh copy.
func Algorithms() []string {
	return []string{SGD, Momentum, Nesterov, Adagrad, Adam, AdamW, DelayedNesterov}
}

type algorithm int

const (
	algSGD algorithm = iota
	algMomentum
	algNesterov
	algAdagrad
	algAdam
	algAdamW
	algDelayedNesterov
)

func parseAlgorithm(name string) (algorithm, bool) {
	switch name {
	case SGD:
		return algSGD, true
	case Momentum:
		return algMomentum, true
	case Nesterov:
		return algNesterov, true
	case Adagrad:
		return algAdagrad, true
	case Adam:
		return algAdam, true
	case AdamW:
		return algAdamW, true
	case DelayedNesterov:
		return algDelayedNesterov, true
	}
	return 0, false
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func unitInterval(x float64) bool { return x >= 0 && x < 1 } // false for NaN

// Validate reports every out-of-range field, joined (errors.Join); each wraps ErrInvalidConfig.
// All fields are checked whatever the algorithm, so a typo in an unused field is still caught.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, errorf(ErrInvalidConfig, format, args...))
	}
	if _, ok := parseAlgorithm(c.Algorithm); !ok {
		bad("optimizer %q: unknown algorithm (want %s)", c.Algorithm, strings.Join(Algorithms(), ", "))
	}
	if !(c.LR > 0) || !finite(c.LR) {
		bad("lr %v: must be positive and finite", c.LR)
	}
	if !unitInterval(c.Momentum) {
		bad("momentum %v: must be in [0, 1)", c.Momentum)
	} else if c.Algorithm == Nesterov && c.Momentum == 0 {
		bad("momentum 0: nesterov needs momentum > 0")
	}
	if c.Delay < 0 || c.Delay > MaxDelay {
		bad("delay %d: must be in 0..%d (0 is 1)", c.Delay, MaxDelay)
	}
	if !(c.WeightDecay >= 0) || !finite(c.WeightDecay) {
		bad("weight decay %v: must be non-negative and finite", c.WeightDecay)
	}
	if !unitInterval(c.Beta1) {
		bad("beta1 %v: must be in [0, 1)", c.Beta1)
	}
	if !unitInterval(c.Beta2) {
		bad("beta2 %v: must be in [0, 1)", c.Beta2)
	}
	if !(c.Epsilon >= 0) || !finite(c.Epsilon) {
		bad("epsilon %v: must be non-negative and finite (0 selects the default)", c.Epsilon)
	}
	if err := c.Schedule.Validate(); err != nil {
		errs = append(errs, err)
	} else if c.Schedule.usesMinLR() && c.Schedule.MinLR > c.LR && c.LR > 0 && finite(c.LR) { // a bad lr is said once, above
		bad("schedule: min lr %v: must not exceed lr %v", c.Schedule.MinLR, c.LR)
	}
	return errors.Join(errs...)
}

// withDefaults resolves the zero Epsilon to the algorithm's default, and delayed-nesterov's zero
// Delay to 1.
func (c Config) withDefaults() Config {
	if c.Algorithm == DelayedNesterov && c.Delay == 0 {
		c.Delay = 1
	}
	if c.Epsilon == 0 {
		switch c.Algorithm {
		case Adam, AdamW:
			c.Epsilon = DefaultAdamEpsilon
		case Adagrad:
			c.Epsilon = DefaultAdagradEpsilon
		}
	}
	return c
}
