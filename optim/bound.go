package optim

import "math"

// StepBound bounds what the next Step can do to magnitudes, without touching anything. Given
// upper bounds on |params| (p), on every value of the optimizer's state (s, as StateMaxAbs) and
// on |grads| (g), it returns upper bounds on |params| and on the state after that Step (p2, s2),
// and peak, an upper bound on every value the Step computes on the way, p2 and s2 included.
//
// A caller that keeps peak far inside float32's range (say below 2^100) knows, before applying a
// gradient, that no weight or state value can become ±Inf or NaN, and can keep p2 and s2 as the
// bounds for the next call instead of reading the vectors again. The bounds are loose where the
// algorithm divides (Adagrad's and Adam's denominators are taken at their floor, ε), and each
// result is widened by far more than float32 rounding can add. Negative or NaN inputs, or a NaN
// anywhere on the way, give a NaN or +Inf peak, which no limit accepts.
func (o *Optimizer) StepBound(p, s, g float64) (p2, s2, peak float64) {
	const widen = 1 + 0x1p-20 // float32 rounding adds at most 2^-24 per operation
	if p < 0 || s < 0 || g < 0 || math.IsNaN(p+s+g) {
		return math.Inf(1), math.Inf(1), math.NaN()
	}
	c := &o.cfg
	lr := math.Abs(o.LR())
	g1 := (g + math.Abs(c.WeightDecay)*p) * widen // the gradient with weight decay
	var step float64                              // |the change to a parameter|
	eps := float64(float32(c.Epsilon))
	// tiny: below it, a float32 g² may round to 0.
	const tiny = 0x1p-63
	switch o.alg {
	case algSGD:
		step = lr * g1
		peak = max(g1, step)
	case algMomentum, algNesterov:
		mu := math.Abs(c.Momentum)
		s2 = (mu*s + g1) * widen
		d := s2
		if o.alg == algNesterov {
			d = (g1 + mu*s2) * widen
		}
		step = lr * d * widen
		peak = max(g1, s2, d, step)
	case algDelayedNesterov:
		// next and buf are each at most s + g/N after the step (buf =
		// next + g/N; next = μ·buf or next + g/N), whether or not it
		// updates the momentum; the change is at most g/N + μ·buf.
		mu := math.Abs(c.Momentum)
		gn := g1 / float64(c.Delay) * widen
		s2 = (s + gn) * widen
		d := (gn + mu*s2) * widen
		step = lr * d * widen
		peak = max(g1, s2, d, step)
	case algAdagrad:
		// sum ≥ g², so |g|/(sqrt(sum)+ε) ≤ 1, unless g² underflows to 0
		// (|g| < tiny), where ε bounds it.
		s2 = (s + g1*g1) * widen
		step = lr * max(1, tiny/eps) * widen * widen
		peak = max(g1, g1*g1, s2, lr*g1, step)
	case algAdam, algAdamW:
		if o.alg == algAdamW {
			// AdamW scales p by 1 − lr·wd first (g1 above also counts
			// wd·p, which only loosens the bound).
			p *= max(1, math.Abs(1-lr*c.WeightDecay)) * widen
		}
		t := float64(o.steps + 1)
		bc1 := 1 - math.Pow(c.Beta1, t)
		stepSize := lr / bc1
		bc2Sqrt := math.Sqrt(1 - math.Pow(c.Beta2, t))
		m := max(s, g1) * widen    // a lerp between the old m and g
		v := max(s, g1*g1) * widen // a convex combination of the old v and g²
		s2 = max(m, v)
		step = stepSize * m / eps * widen // the denominator at its floor, ε
		if b1, b2 := c.Beta1, c.Beta2; b1*b1 < b2 {
			// m and v are Adam's moving averages of g and g² from zero, so
			// by Cauchy–Schwarz |m|/sqrt(v) ≤ (1−β1)/sqrt((1−β2)(1−β1²/β2)),
			// and the step is at most lr·sqrt(bias2)/bias1 times that: a
			// bound that does not grow with g (twice it, for rounding;
			// ε bounds what a g² underflowing to 0 leaves over).
			ratio := (1 - b1) / math.Sqrt((1-b2)*(1-b1*b1/b2))
			step = min(step, 2*lr*bc2Sqrt/bc1*ratio+stepSize*tiny/eps)
		}
		peak = max(g1, s+g1, g1*g1, s2, stepSize*m, math.Sqrt(v)/bc2Sqrt+1, step)
	}
	p2 = (p + step) * widen
	return p2, s2, max(peak, p2)
}

// StateMaxAbs returns the largest magnitude in the optimizer's state, +Inf if any value is NaN or
// ±Inf, and 0 for an algorithm without state.
func (o *Optimizer) StateMaxAbs() float64 {
	var m float64
	for _, name := range o.slotNames() {
		m = max(m, MaxAbs(o.slot(name)))
	}
	return m
}

// MaxAbs returns the largest magnitude in x, +Inf if x holds a NaN or ±Inf, 0 for an empty x.
func MaxAbs(x []float32) float64 {
	// On the bits: without the sign, a larger pattern is a larger
	// magnitude, and NaN's and Inf's patterns are the largest.
	var m uint32
	for _, v := range x {
		m = max(m, math.Float32bits(v)&0x7fffffff)
	}
	if m >= 0x7f800000 {
		return math.Inf(1)
	}
	return float64(math.Float32frombits(m))
}
