package optim

import (
	"errors"
	"fmt"
	"math"
)

// Slot names of the optimizer state, those of PyTorch's optimizer state_dict.
const (
	SlotMomentumBuffer = "momentum_buffer" // momentum, nesterov
	SlotSum            = "sum"             // adagrad
	SlotExpAvg         = "exp_avg"         // adam: first moment
	SlotExpAvgSq       = "exp_avg_sq"      // adam: second moment
	// SlotNextMomentum is delayed-nesterov's μ·momentum_buffer + Δ/N, Δ the sum of the
	// gradients since its last momentum update (Liu et al.'s Algorithm 3): the buffer the next
	// update sets, so far.
	SlotNextMomentum = "next_momentum_buffer"
)

// Optimizer applies one algorithm to a flat float32 vector of fixed length. It owns its state
// (allocated once by New) and a step count; it never retains the slices passed to Step.
// It is not safe for concurrent use.
type Optimizer struct {
	cfg   Config // validated, Epsilon resolved
	alg   algorithm
	n     int
	steps int64
	// scale multiplies the base learning rate (SetLRScale); 1 unless set.
	scale float64

	// State slots, each of length n; nil where the algorithm has none.
	buf []float32 // momentum_buffer or sum
	m   []float32 // exp_avg, or delayed-nesterov's next_momentum_buffer
	v   []float32 // exp_avg_sq
}

// New validates cfg and returns an optimizer for vectors of n floats (n >= 0), with all state
// zero and step count 0.
func New(cfg Config, n int) (*Optimizer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, errorf(ErrInvalidConfig, "size %d: must be non-negative", n)
	}
	alg, _ := parseAlgorithm(cfg.Algorithm)
	o := &Optimizer{cfg: cfg.withDefaults(), alg: alg, n: n, scale: 1}
	switch alg {
	case algMomentum, algNesterov, algAdagrad:
		o.buf = make([]float32, n)
	case algAdam, algAdamW:
		o.m = make([]float32, n)
		o.v = make([]float32, n)
	case algDelayedNesterov:
		o.buf = make([]float32, n)
		o.m = make([]float32, n)
	}
	return o, nil
}

// Len returns the number of floats the optimizer updates.
func (o *Optimizer) Len() int { return o.n }

// Config returns the configuration in use, with a zero Epsilon resolved to its default.
func (o *Optimizer) Config() Config { return o.cfg }

// Steps returns the number of steps applied so far (restored by Restore).
func (o *Optimizer) Steps() int64 { return o.steps }

// LR returns the learning rate the next Step will use: Schedule.LRAt(LR·scale, Steps()), scale
// SetLRScale's (1 unless set).
func (o *Optimizer) LR() float64 { return o.cfg.Schedule.LRAt(o.cfg.LR*o.scale, o.steps) }

// SetLRScale multiplies the base learning rate by k (> 0 and finite; otherwise it panics) from
// the next Step on, the warm-up and decay applying to the product: the linear scaling rule of
// Goyal et al. for a world of k ranks, which a caller sets again when the world changes. The
// scale is not optimizer state: State and Restore leave it as it is.
func (o *Optimizer) SetLRScale(k float64) {
	if !(k > 0) || !finite(k) {
		panic(fmt.Sprintf("optim: lr scale %v: must be positive and finite", k))
	}
	o.scale = k
}

// Step applies one update: params is updated in place from grads, which is only read. Both must
// have Len() floats; otherwise Step returns an error wrapping ErrLength and changes nothing.
// Step does not allocate, does not retain either slice, and does not check for NaN or Inf
// (that is the job of whoever received the gradients). It advances the step count by one.
func (o *Optimizer) Step(params, grads []float32) error { return o.StepInto(params, params, grads) }

// StepInto is Step with the updated values written into dst and params only read, so that
// whoever still reads params (a reply being sent from it) keeps the values as they were. dst is
// params (Step) or does not overlap it, and has Len() floats. The values are the same bit for
// bit as Step's.
func (o *Optimizer) StepInto(dst, params, grads []float32) error {
	if len(params) != o.n || len(grads) != o.n {
		return errorf(ErrLength, "step: params has %d floats, grads %d, want %d", len(params), len(grads), o.n)
	}
	if len(dst) != o.n {
		return errorf(ErrLength, "step: dst has %d floats, want %d", len(dst), o.n)
	}
	lr := o.LR()
	o.steps++
	c := &o.cfg
	wd := float32(c.WeightDecay)
	switch o.alg {
	case algSGD:
		stepSGD(dst, params, grads, float32(lr), wd)
	case algMomentum, algNesterov:
		stepMomentum(dst, params, grads, o.buf, float32(lr), wd, float32(c.Momentum), o.alg == algNesterov)
	case algAdagrad:
		// clr = lr / (1 + (t-1)·lr_decay) with lr_decay 0 is lr itself.
		stepAdagrad(dst, params, grads, o.buf, float32(lr), wd, float32(c.Epsilon))
	case algAdam, algAdamW:
		k := o.adamStep(lr)
		stepAdam(dst, params, grads, o.m, o.v, k)
	case algDelayedNesterov:
		// The step count is t of Algorithm 3: the momentum moves on every
		// Delay-th step, counted from the first (restored with the state).
		stepDelayedNesterov(dst, params, grads, o.buf, o.m, float32(lr), wd, float32(c.Momentum), float32(c.Delay), o.steps%int64(c.Delay) == 0)
	}
	return nil
}

// adamStep is the scalars of Adam's (AdamW's) step o.steps (counted from 1) at learning rate lr.
func (o *Optimizer) adamStep(lr float64) AdamStep {
	c := &o.cfg
	t := float64(o.steps)
	bc1 := 1 - math.Pow(c.Beta1, t)
	bc2 := 1 - math.Pow(c.Beta2, t)
	k := AdamStep{
		StepSize:      float32(lr / bc1),
		BC2Sqrt:       float32(math.Sqrt(bc2)),
		Weight:        float32(1 - c.Beta1),
		Beta2:         float32(c.Beta2),
		OneMinusBeta2: float32(1 - c.Beta2),
		Eps:           float32(c.Epsilon),
		WD:            float32(c.WeightDecay),
		Decay:         1,
	}
	if o.alg == algAdamW {
		// PyTorch's AdamW: param.mul_(1 - lr * weight_decay), then
		// Adam without the L2 term.
		k.WD, k.Decay = 0, float32(1-lr*c.WeightDecay)
	}
	return k
}

// DeviceStep is one step's update for a caller that holds the vector and the state slots
// elsewhere (a GPU's memory) and applies the update there: what StepInto would compute, as the
// scalars the device's kernels take (nn.Device's SGDMomentum and Adam).
type DeviceStep struct {
	// Algorithm is the Config's: SGD, Momentum, Nesterov, Adam or AdamW.
	Algorithm string
	// LR is the step's learning rate (schedule and scale applied), WD the weight decay and
	// Momentum μ: SGD's and the momentum algorithms'.
	LR, WD, Momentum float32
	// Adam is Adam's and AdamW's step.
	Adam AdamStep
}

// ErrNotOnDevice: Advance was asked for an algorithm no device kernel applies (adagrad).
var ErrNotOnDevice = errors.New("no device kernel for the algorithm")

// Advance returns the next step's DeviceStep and counts the step, as StepInto does, without
// touching a vector: the caller applies the update to the vector and to the slots it holds
// (LiveSlots moves them to and from the optimizer). Adagrad has no device kernel: Advance then
// returns an error wrapping ErrNotOnDevice and counts nothing.
func (o *Optimizer) Advance() (DeviceStep, error) {
	if o.alg == algAdagrad {
		return DeviceStep{}, errorf(ErrNotOnDevice, "optimizer %s: no device step (want sgd, momentum, nesterov, adam or adamw)", o.cfg.Algorithm)
	}
	lr := o.LR()
	o.steps++
	c := &o.cfg
	s := DeviceStep{Algorithm: o.cfg.Algorithm, LR: float32(lr), WD: float32(c.WeightDecay)}
	switch o.alg {
	case algMomentum, algNesterov:
		s.Momentum = float32(c.Momentum)
	case algAdam, algAdamW:
		s.Adam = o.adamStep(lr)
	}
	return s, nil
}

// OnDevice reports whether Advance can give the algorithm's steps to a device (all but adagrad).
func OnDevice(algorithm string) bool {
	a, ok := parseAlgorithm(algorithm)
	return ok && a != algAdagrad
}

// The kernels follow PyTorch's single-tensor (CPU) implementations operation by operation, each
// rounded to float32. The explicit float32(...) conversions forbid the compiler to fuse a
// multiply and an add (the Go spec allows fusion otherwise, and arm64 does it), so every
// platform computes bit-identical updates: a server shard and a worker agree exactly.
//
// Each kernel writes the updated p into d (p itself, or a slice that does not overlap it) and
// re-slices its inputs to len(p) so the compiler drops the bounds checks.
//
// On amd64 with AVX2 the cases a parameter server runs on every push (momentum and SGD without
// weight decay) go through assembly (kernels_amd64.s) eight floats a register: the same
// operations in the same order, each rounded to float32, so the same bits (faster by the
// factor BenchmarkPush in ps measures: docs/BENCHMARKS.md, "Figures that lived in code comments"). The build tag
// purego keeps the Go loops (make test-purego tests them).

// stepSGD: g = grad + wd·p; p -= lr·g.
func stepSGD(d, p, grad []float32, lr, wd float32) {
	if wd == 0 {
		// The AVX2 kernel, where there is one, does all but a tail.
		k := sgdVec(d, p, grad, lr)
		d, p, grad = d[k:], p[k:], grad[k:]
	}
	d = d[:len(p)]
	grad = grad[:len(p)]
	for i := range p {
		g := grad[i]
		if wd != 0 {
			g += float32(wd * p[i])
		}
		d[i] = p[i] - float32(lr*g)
	}
}

// StepMomentum applies one momentum step to p with its buffer buf, exactly as an
// Optimizer configured for momentum does (the reference a device's update
// kernel is checked against). All three slices have len(p) elements.
func StepMomentum(p, grad, buf []float32, lr, wd, mu float32, nesterov bool) {
	stepMomentum(p, p, grad, buf, lr, wd, mu, nesterov)
}

// stepMomentum: g = grad + wd·p; buf = μ·buf + g; g = g + μ·buf (nesterov) or buf; p -= lr·g.
// PyTorch sets buf = g on the first step; a zero buffer gives exactly that (μ·0 + g = g).
func stepMomentum(d, p, grad, buf []float32, lr, wd, mu float32, nesterov bool) {
	d = d[:len(p)]
	grad = grad[:len(p)]
	buf = buf[:len(p)]
	if wd == 0 && !nesterov {
		// The common case, without the per-element branches (a parameter
		// server applies it to every push): the same operations, by the
		// AVX2 kernel where there is one, and the rest (all of it
		// without) in place when d is p (the loop through d was 6%
		// slower there, BenchmarkStep/momentum, four alternating rounds).
		k := momentumVec(d, p, grad, buf, lr, mu)
		d, p, grad, buf = d[k:], p[k:], grad[k:], buf[k:]
		if len(p) > 0 && &d[0] == &p[0] {
			for i := range p {
				b := float32(mu*buf[i]) + grad[i]
				buf[i] = b
				p[i] -= float32(lr * b)
			}
			return
		}
		for i := range p {
			b := float32(mu*buf[i]) + grad[i]
			buf[i] = b
			d[i] = p[i] - float32(lr*b)
		}
		return
	}
	for i := range p {
		g := grad[i]
		if wd != 0 {
			g += float32(wd * p[i])
		}
		b := float32(mu*buf[i]) + g
		buf[i] = b
		if nesterov {
			g += float32(mu * b)
		} else {
			g = b
		}
		d[i] = p[i] - float32(lr*g)
	}
}

// stepDelayedNesterov is Liu et al.'s Algorithm 3 with c = 0, n its N. It keeps, in place of
// Algorithm 3's sum Δ of the gradients since the last momentum update, next = μ·buf + Δ/n (the
// buffer the next update sets, so far), which holds the same information and whose magnitude
// a bound can carry without it growing geometrically (StepBound): g = grad + wd·p; next += g/n;
// on the steps that update the momentum (update), buf = next, next = μ·buf and p -= lr·(g/n +
// next), which is Algorithm 3's p -= lr·(μ·(μ·buf + Δ/n) + g/n); on the others p -= lr·g/n.
// With n = 1 every step updates, and the operations are Nesterov's (stepMomentum) in the same
// order: the same bits.
func stepDelayedNesterov(d, p, grad, buf, next []float32, lr, wd, mu, n float32, update bool) {
	d = d[:len(p)]
	grad = grad[:len(p)]
	buf = buf[:len(p)]
	next = next[:len(p)]
	for i := range p {
		g := grad[i]
		if wd != 0 {
			g += float32(wd * p[i])
		}
		step := g / n
		u := next[i] + step
		if update {
			buf[i] = u
			u = float32(mu * u)
			step += u
		}
		next[i] = u
		d[i] = p[i] - float32(lr*step)
	}
}

// stepAdagrad: g = grad + wd·p; sum += g²; p -= lr·g / (sqrt(sum) + eps).
func stepAdagrad(d, p, grad, sum []float32, lr, wd, eps float32) {
	d = d[:len(p)]
	grad = grad[:len(p)]
	sum = sum[:len(p)]
	for i := range p {
		g := grad[i]
		if wd != 0 {
			g += float32(wd * p[i])
		}
		s := sum[i] + float32(g*g)
		sum[i] = s
		std := float32(math.Sqrt(float64(s))) + eps
		d[i] = p[i] - float32(float32(lr*g)/std)
	}
}

// AdamStep are the scalars of one Adam or AdamW step, which the optimizer derives from its
// configuration, learning rate and step count (DeviceStep.Adam).
type AdamStep struct {
	StepSize      float32 // lr / (1 − β1^t)
	BC2Sqrt       float32 // sqrt(1 − β2^t)
	Weight        float32 // 1 − β1, the lerp weight
	Beta2         float32
	OneMinusBeta2 float32 // 1 − β2
	Eps           float32
	WD            float32 // coupled (L2) weight decay: Adam's (0 for AdamW)
	Decay         float32 // decoupled weight decay, 1 − lr·wd: AdamW's (1: none)
}

// StepAdam applies one Adam (AdamW) step k to p with its moments m and v, exactly as an
// Optimizer configured for it does (the reference a device's Adam kernel is checked against).
// All four slices have len(p) elements.
func StepAdam(p, grad, m, v []float32, k AdamStep) { stepAdam(p, p, grad, m, v, k) }

// stepAdam (AdamW: p *= decay first, and no wd in g): g = grad + wd·p; m = lerp(m, g, 1−β1); v = β2·v + (1−β2)·g²;
// p -= (lr/bias1)·m / (sqrt(v)/sqrt(bias2) + eps).
// m is updated with PyTorch's lerp (m + w·(g−m), or g − (g−m)·(1−w) when w >= 0.5), which is
// β1·m + (1−β1)·g up to rounding.
func stepAdam(d, p, grad, m, v []float32, k AdamStep) {
	d = d[:len(p)]
	grad = grad[:len(p)]
	m = m[:len(p)]
	v = v[:len(p)]
	w := k.Weight
	smallWeight := w < 0.5
	oneMinW := 1 - w
	for i := range p {
		g := grad[i]
		if k.WD != 0 {
			g += float32(k.WD * p[i])
		}
		mi := m[i]
		if smallWeight {
			mi += float32(w * (g - mi))
		} else {
			mi = g - float32((g-mi)*oneMinW)
		}
		m[i] = mi
		vi := float32(v[i]*k.Beta2) + float32(float32(k.OneMinusBeta2*g)*g)
		v[i] = vi
		denom := float32(float32(math.Sqrt(float64(vi)))/k.BC2Sqrt) + k.Eps
		pi := p[i]
		if k.Decay != 1 {
			pi = float32(pi * k.Decay)
		}
		d[i] = pi - float32(float32(k.StepSize*mi)/denom)
	}
}
