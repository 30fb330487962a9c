package optim_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/optim"
)

// float32Rel is a relative tolerance for comparing a float32 result of a few dozen rounded
// operations with a float64 reference: 64·2⁻²⁴ ≈ 3.8e-6.
const float32Rel = 64.0 / (1 << 24)

// assertClose checks |got−want| <= rel·max(|want|, floor) element-wise.
func assertClose(t *testing.T, want []float64, got []float32, rel, floor float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		tol := rel * math.Max(math.Abs(want[i]), floor)
		assert.InDelta(t, want[i], float64(got[i]), tol, "%s[%d]", what, i)
	}
}

func newOpt(t testing.TB, cfg optim.Config, n int) *optim.Optimizer {
	t.Helper()
	o, err := optim.New(cfg, n)
	require.NoError(t, err)
	return o
}

// config is alg at lr and weight decay wd, the other fields DefaultConfig's; delayed-nesterov
// gets delay 3, so that the tests over every algorithm take steps that update its momentum and
// steps that do not (at delay 1 it is nesterov).
func config(alg string, lr, wd float64) optim.Config {
	cfg := optim.DefaultConfig()
	cfg.Algorithm = alg
	cfg.LR = lr
	cfg.WeightDecay = wd
	if alg == optim.DelayedNesterov {
		cfg.Delay = 3
	}
	return cfg
}

// TestGolden checks three steps of every algorithm against values written down independently of
// this package: lr 0.1, μ 0.9, β (0.9, 0.999), default epsilons, on
//
//	p0 = {0.5, -1.25, 2, 0}
//	g1 = {0.1, -0.2, 0.3, 0}, g2 = {-0.05, 0.4, 0.1, 0}, g3 = {0.2, 0.1, -0.3, 0}
//
// computed in float64 from the update rules of the torch.optim documentation. By hand, for the
// first element without weight decay:
//   - sgd: 0.5 − 0.1·(0.1 − 0.05 + 0.2) = 0.475;
//   - momentum: buf = 0.1, 0.04, 0.236, so p = 0.5 − 0.1·0.376 = 0.4624;
//   - nesterov: steps of g+μ·buf = 0.19, −0.014, 0.4124, so p = 0.5 − 0.1·0.5884 = 0.44116.
//
// The last element (p = 0, g = 0) checks that epsilon keeps Adam and Adagrad at exactly 0.
func TestGolden(t *testing.T) {
	p0 := []float32{0.5, -1.25, 2, 0}
	grads := [][]float32{{0.1, -0.2, 0.3, 0}, {-0.05, 0.4, 0.1, 0}, {0.2, 0.1, -0.3, 0}}
	tests := []struct {
		name string
		alg  string
		wd   float64
		want []float64
	}{
		{"sgd", optim.SGD, 0, []float64{0.475, -1.28, 1.99, 0}},
		{"sgd/wd", optim.SGD, 0.1, []float64{0.4602985, -1.24287175, 1.931295, 0}},
		{"momentum", optim.Momentum, 0, []float64{0.4624, -1.2818, 1.9297, 0}},
		{"momentum/wd", optim.Momentum, 0.1, []float64{0.4349185, -1.21263175, 1.819695, 0}},
		{"nesterov", optim.Nesterov, 0, []float64{0.44116, -1.30862, 1.92673, 0}},
		{"nesterov/wd", optim.Nesterov, 0.1, []float64{0.402449411, -1.21033931, 1.7719477, 0}},
		{"adagrad", optim.Adagrad, 0, []float64{0.357434204, -1.26126451, 1.93720194, 0}},
		{"adagrad/wd", optim.Adagrad, 0.1, []float64{0.321838962, -1.21094312, 1.86934425, 0}},
		{"adam", optim.Adam, 0, []float64{0.307555154, -1.22817547, 1.80805492, 0}},
		{"adam/wd", optim.Adam, 0.1, []float64{0.258484961, -1.14551269, 1.74550313, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOpt(t, config(tt.alg, 0.1, tt.wd), len(p0))
			p := slices.Clone(p0)
			for _, g := range grads {
				require.NoError(t, o.Step(p, g))
			}
			assert.Equal(t, int64(3), o.Steps())
			assertClose(t, tt.want, p, float32Rel, 1, "params")
			assert.Zero(t, p[3], "zero gradient on a zero parameter must leave it at exactly 0")
		})
	}
}

// reference is an independent float64 implementation, written from the formulas of the
// torch.optim documentation without any of the package's float32 care.
type reference struct {
	cfg            optim.Config
	eps            float64
	t              int64
	buf, m, v, sum []float64
	delta          []float64 // delayed-nesterov: Algorithm 3's Δ
}

func newReference(cfg optim.Config, n int) *reference {
	eps := cfg.Epsilon
	if eps == 0 {
		switch cfg.Algorithm {
		case optim.Adam, optim.AdamW:
			eps = 1e-8
		case optim.Adagrad:
			eps = 1e-10
		}
	}
	return &reference{cfg: cfg, eps: eps, m: make([]float64, n), v: make([]float64, n), sum: make([]float64, n), delta: make([]float64, n)}
}

func (r *reference) step(p, grad []float64) {
	c := r.cfg
	lr := c.Schedule.LRAt(c.LR, r.t)
	r.t++
	t := float64(r.t)
	first := r.buf == nil
	if first {
		r.buf = make([]float64, len(p))
	}
	for i := range p {
		g := grad[i] + c.WeightDecay*p[i]
		if c.Algorithm == optim.AdamW {
			// Decoupled (torch.optim.AdamW): the weight decays, the
			// gradient does not carry it.
			g = grad[i]
			p[i] *= 1 - lr*c.WeightDecay
		}
		switch c.Algorithm {
		case optim.SGD:
			p[i] -= lr * g
		case optim.Momentum, optim.Nesterov:
			if first {
				r.buf[i] = g
			} else {
				r.buf[i] = c.Momentum*r.buf[i] + g
			}
			if c.Algorithm == optim.Nesterov {
				g += c.Momentum * r.buf[i]
			} else {
				g = r.buf[i]
			}
			p[i] -= lr * g
		case optim.DelayedNesterov:
			// Liu et al., arXiv 2401.09135, Algorithm 3 with c = 0, as written
			// there: Δ += g; every N-th step m = β·m + Δ/N, p −= lr·(β·m + g/N),
			// Δ = 0; otherwise p −= lr·g/N.
			n := float64(max(c.Delay, 1))
			r.delta[i] += g
			if r.t%int64(n) == 0 {
				r.buf[i] = c.Momentum*r.buf[i] + r.delta[i]/n
				r.delta[i] = 0
				p[i] -= lr * (c.Momentum*r.buf[i] + g/n)
			} else {
				p[i] -= lr * g / n
			}
		case optim.Adagrad:
			r.sum[i] += g * g
			p[i] -= lr * g / (math.Sqrt(r.sum[i]) + r.eps)
		case optim.Adam, optim.AdamW:
			r.m[i] = c.Beta1*r.m[i] + (1-c.Beta1)*g
			r.v[i] = c.Beta2*r.v[i] + (1-c.Beta2)*g*g
			bias1 := 1 - math.Pow(c.Beta1, t)
			bias2 := 1 - math.Pow(c.Beta2, t)
			p[i] -= lr / bias1 * r.m[i] / (math.Sqrt(r.v[i])/math.Sqrt(bias2) + r.eps)
		}
	}
}

func randomVector(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

func widen(v []float32) []float64 {
	w := make([]float64, len(v))
	for i, x := range v {
		w[i] = float64(x)
	}
	return w
}

// TestAgainstReference runs each algorithm for several steps on random vectors, with weight
// decay on and off and a few non-default hyper-parameters, and checks parameters and state
// against the float64 reference.
func TestAgainstReference(t *testing.T) {
	with := func(cfg optim.Config, f func(*optim.Config)) optim.Config { f(&cfg); return cfg }
	tests := []struct {
		name string
		cfg  optim.Config
	}{
		{"sgd", config(optim.SGD, 0.05, 0)},
		{"sgd/wd", config(optim.SGD, 0.05, 0.01)},
		{"momentum", config(optim.Momentum, 0.05, 0)},
		{"momentum/wd", config(optim.Momentum, 0.05, 0.01)},
		{"momentum/mu=0.5", with(config(optim.Momentum, 0.05, 0), func(c *optim.Config) { c.Momentum = 0.5 })},
		{"nesterov", config(optim.Nesterov, 0.05, 0)},
		{"nesterov/wd", config(optim.Nesterov, 0.05, 0.01)},
		{"delayed-nesterov/delay=3", config(optim.DelayedNesterov, 0.05, 0)},
		{"delayed-nesterov/delay=3/wd", config(optim.DelayedNesterov, 0.05, 0.01)},
		{"delayed-nesterov/delay=1", with(config(optim.DelayedNesterov, 0.05, 0), func(c *optim.Config) { c.Delay = 1 })},
		{"delayed-nesterov/delay=4", with(config(optim.DelayedNesterov, 0.7, 0), func(c *optim.Config) { c.Delay = 4 })},
		{"delayed-nesterov/delay=7/mu=0.5", with(config(optim.DelayedNesterov, 0.05, 0), func(c *optim.Config) { c.Delay, c.Momentum = 7, 0.5 })},
		{"adagrad", config(optim.Adagrad, 0.05, 0)},
		{"adagrad/wd", config(optim.Adagrad, 0.05, 0.01)},
		{"adagrad/eps", with(config(optim.Adagrad, 0.05, 0), func(c *optim.Config) { c.Epsilon = 1e-3 })},
		{"adam", config(optim.Adam, 1e-3, 0)},
		{"adam/wd", config(optim.Adam, 1e-3, 0.01)},
		// β1 < 0.5 takes the other branch of PyTorch's lerp.
		{"adam/beta1=0.3", with(config(optim.Adam, 1e-3, 0.01), func(c *optim.Config) { c.Beta1, c.Beta2 = 0.3, 0.99 })},
		{"adam/beta1=0", with(config(optim.Adam, 1e-3, 0), func(c *optim.Config) { c.Beta1 = 0 })},
		{"adam/eps", with(config(optim.Adam, 1e-3, 0), func(c *optim.Config) { c.Epsilon = 1e-4 })},
		{"adam/schedule", with(config(optim.Adam, 1e-3, 0), func(c *optim.Config) {
			c.Schedule = optim.Schedule{WarmupSteps: 2, Decay: optim.DecayCosine, DecaySteps: 3}
		})},
		{"adamw", config(optim.AdamW, 1e-3, 0)},
		{"adamw/wd", config(optim.AdamW, 1e-3, 0.1)},
		{"adamw/wd large", config(optim.AdamW, 1e-2, 5)},
		{"adamw/schedule", with(config(optim.AdamW, 1e-3, 0.1), func(c *optim.Config) {
			c.Schedule = optim.Schedule{WarmupSteps: 2, Decay: optim.DecayCosine, DecaySteps: 3}
		})},
	}
	const n, steps = 257, 6
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			p := randomVector(rng, n, 1)
			ref := newReference(tt.cfg, n)
			refP := widen(p)
			o := newOpt(t, tt.cfg, n)
			for range steps {
				g := randomVector(rng, n, 0.1)
				gCopy := slices.Clone(g)
				require.NoError(t, o.Step(p, g))
				assert.Equal(t, gCopy, g, "Step must not modify grads")
				ref.step(refP, widen(g))
			}
			assertClose(t, refP, p, float32Rel, 1, "params")
			st := o.State()
			switch tt.cfg.Algorithm {
			case optim.Momentum, optim.Nesterov:
				assertClose(t, ref.buf, st.Slots[optim.SlotMomentumBuffer], float32Rel, 0.1, "momentum_buffer")
			case optim.DelayedNesterov:
				assertClose(t, ref.buf, st.Slots[optim.SlotMomentumBuffer], float32Rel, 0.1, "momentum_buffer")
				next := make([]float64, n)
				for i := range next {
					next[i] = tt.cfg.Momentum*ref.buf[i] + ref.delta[i]/float64(tt.cfg.Delay)
				}
				assertClose(t, next, st.Slots[optim.SlotNextMomentum], float32Rel, 0.1, "next_momentum_buffer")
			case optim.Adagrad:
				assertClose(t, ref.sum, st.Slots[optim.SlotSum], float32Rel, 1e-3, "sum")
			case optim.Adam, optim.AdamW:
				assertClose(t, ref.m, st.Slots[optim.SlotExpAvg], float32Rel, 1e-2, "exp_avg")
				assertClose(t, ref.v, st.Slots[optim.SlotExpAvgSq], float32Rel, 1e-5, "exp_avg_sq")
			}
		})
	}
}

func TestNesterovDiffersFromMomentum(t *testing.T) {
	// One step from p = 1 with g = 0.5, lr 0.1, μ 0.9: momentum moves by lr·g = 0.05,
	// nesterov by lr·(g + μ·g) = 0.095. On later steps they keep differing.
	run := func(alg string) []float32 {
		o := newOpt(t, config(alg, 0.1, 0), 1)
		p := []float32{1}
		require.NoError(t, o.Step(p, []float32{0.5}))
		first := p[0]
		require.NoError(t, o.Step(p, []float32{0.5}))
		return []float32{first, p[0]}
	}
	mom, nes := run(optim.Momentum), run(optim.Nesterov)
	assert.InDelta(t, 0.95, mom[0], 1e-7)
	assert.InDelta(t, 0.905, nes[0], 1e-7)
	// Second step: buf = 0.95; momentum p −= 0.095, nesterov p −= 0.1·(0.5 + 0.855).
	assert.InDelta(t, 0.855, mom[1], 1e-6)
	assert.InDelta(t, 0.7695, nes[1], 1e-6)
}

func TestMomentumVariantsReduceToSGD(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	p0 := randomVector(rng, 33, 1)
	grads := [][]float32{randomVector(rng, 33, 1), randomVector(rng, 33, 1), randomVector(rng, 33, 1)}
	run := func(cfg optim.Config) []float32 {
		o := newOpt(t, cfg, len(p0))
		p := slices.Clone(p0)
		for _, g := range grads {
			require.NoError(t, o.Step(p, g))
		}
		return p
	}
	plain := config(optim.SGD, 0.1, 0.01)
	plain.Momentum = 0
	want := run(plain)

	sgdIgnoresMomentum := config(optim.SGD, 0.1, 0.01) // Momentum 0.9 from DefaultConfig
	assert.Equal(t, want, run(sgdIgnoresMomentum), "sgd must ignore Momentum")

	momentumZero := config(optim.Momentum, 0.1, 0.01)
	momentumZero.Momentum = 0
	assert.Equal(t, want, run(momentumZero), "momentum with μ = 0 is plain SGD, as in PyTorch")
}

func TestStepLengthMismatch(t *testing.T) {
	tests := []struct {
		name            string
		params, grads   int
		wantErrContains string
	}{
		{"both short", 10, 9, "step: params has 10 floats, grads 9, want 12"},
		{"params short", 11, 12, "step: params has 11 floats, grads 12, want 12"},
		{"grads long", 12, 13, "step: params has 12 floats, grads 13, want 12"},
		{"nil", 0, 0, "step: params has 0 floats, grads 0, want 12"},
	}
	for _, alg := range optim.Algorithms() {
		for _, tt := range tests {
			t.Run(alg+"/"+tt.name, func(t *testing.T) {
				o := newOpt(t, config(alg, 0.1, 0.01), 12)
				rng := rand.New(rand.NewPCG(5, 6))
				require.NoError(t, o.Step(randomVector(rng, 12, 1), randomVector(rng, 12, 1)))
				before := o.State()

				p := randomVector(rng, tt.params, 1)
				g := randomVector(rng, tt.grads, 1)
				pBefore := slices.Clone(p)
				err := o.Step(p, g)
				require.Error(t, err)
				assert.EqualError(t, err, tt.wantErrContains)
				assert.ErrorIs(t, err, optim.ErrLength)
				assert.Equal(t, pBefore, p, "params must be untouched")
				assert.Equal(t, before, o.State(), "state and step count must be untouched")
			})
		}
	}
}

func TestEmptyOptimizer(t *testing.T) {
	for _, alg := range optim.Algorithms() {
		t.Run(alg, func(t *testing.T) {
			o := newOpt(t, config(alg, 0.1, 0), 0)
			assert.Equal(t, 0, o.Len())
			require.NoError(t, o.Step(nil, nil))
			require.NoError(t, o.Step([]float32{}, nil))
			assert.Equal(t, int64(2), o.Steps())
		})
	}
}

func TestStepUsesScheduledLR(t *testing.T) {
	// With p = 0, g = 1 and plain SGD each step moves p by exactly −lr_t.
	cfg := config(optim.SGD, 0.1, 0)
	cfg.Schedule = optim.Schedule{WarmupSteps: 2, Decay: optim.DecayStep, DecaySteps: 2, Gamma: 0.5}
	o := newOpt(t, cfg, 1)
	want := []float64{0.05, 0.1, 0.1, 0.1, 0.05, 0.05, 0.025}
	p := []float32{0}
	for k, lr := range want {
		assert.InDelta(t, lr, o.LR(), 1e-12, "LR before step %d", k)
		before := p[0]
		require.NoError(t, o.Step(p, []float32{1}))
		assert.InDelta(t, lr, float64(before-p[0]), 1e-7, "step %d", k)
	}
	assert.Equal(t, int64(len(want)), o.Steps())
}

func TestConfigResolvesEpsilon(t *testing.T) {
	tests := []struct {
		name    string
		alg     string
		epsilon float64
		want    float64
	}{
		{"adam default", optim.Adam, 0, 1e-8},
		{"adagrad default", optim.Adagrad, 0, 1e-10},
		{"adam explicit", optim.Adam, 1e-6, 1e-6},
		{"sgd untouched", optim.SGD, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config(tt.alg, 0.1, 0)
			cfg.Epsilon = tt.epsilon
			o := newOpt(t, cfg, 1)
			assert.Equal(t, tt.want, o.Config().Epsilon)
		})
	}
}

func TestStepDoesNotAllocate(t *testing.T) {
	for _, alg := range optim.Algorithms() {
		t.Run(alg, func(t *testing.T) {
			cfg := config(alg, 0.01, 1e-4)
			cfg.Schedule = optim.Schedule{WarmupSteps: 10, Decay: optim.DecayCosine, DecaySteps: 100}
			rng := rand.New(rand.NewPCG(7, 8))
			const n = 1000
			o := newOpt(t, cfg, n)
			p, g := randomVector(rng, n, 1), randomVector(rng, n, 0.1)
			allocs := testing.AllocsPerRun(50, func() {
				if err := o.Step(p, g); err != nil {
					panic(err)
				}
			})
			assert.Zero(t, allocs)
		})
	}
}

func TestErrorsAreDistinct(t *testing.T) {
	assert.False(t, errors.Is(optim.ErrLength, optim.ErrInvalidConfig))
	assert.False(t, errors.Is(optim.ErrInvalidState, optim.ErrLength))
}

// TestStepIntoIsStep: StepInto writes into dst the values Step computes in
// place, bit for bit, leaves params as they were, and refuses a dst of
// the wrong length without changing anything.
func TestStepIntoIsStep(t *testing.T) {
	for _, alg := range optim.Algorithms() {
		for _, wd := range []float64{0, 0.01} {
			t.Run(fmt.Sprintf("%s/wd=%v", alg, wd), func(t *testing.T) {
				const n = 37
				inPlace, into := newOpt(t, config(alg, 0.1, wd), n), newOpt(t, config(alg, 0.1, wd), n)
				rng := rand.New(rand.NewPCG(7, 8))
				p := randomVector(rng, n, 1)
				q := slices.Clone(p)
				for step := range 4 {
					g := randomVector(rng, n, 1)
					require.NoError(t, inPlace.Step(p, g))
					before := slices.Clone(q)
					dst := make([]float32, n)
					require.NoError(t, into.StepInto(dst, q, g))
					assert.Equal(t, before, q, "step %d: params changed", step)
					for i := range p {
						require.Equal(t, math.Float32bits(p[i]), math.Float32bits(dst[i]), "step %d, float %d: in place %v, into dst %v", step, i, p[i], dst[i])
					}
					q = dst
				}
				state := into.State()
				err := into.StepInto(make([]float32, n-1), q, randomVector(rng, n, 1))
				require.ErrorIs(t, err, optim.ErrLength)
				assert.EqualError(t, err, "step: dst has 36 floats, want 37")
				assert.Equal(t, state, into.State(), "a refused step changed the state")
			})
		}
	}
}

func TestSetLRScale(t *testing.T) {
	cfg := optim.Config{Algorithm: optim.SGD, LR: 0.1, Schedule: optim.Schedule{WarmupSteps: 2}}
	o, err := optim.New(cfg, 1)
	require.NoError(t, err)
	o.SetLRScale(4)
	assert.InDelta(t, 0.2, o.LR(), 1e-12, "the warm-up's first step of 0.1×4")
	p := []float32{1}
	require.NoError(t, o.Step(p, []float32{1}))
	assert.InDelta(t, 0.4, o.LR(), 1e-12, "warmed up: 0.1×4")
	o.SetLRScale(2)
	assert.InDelta(t, 0.2, o.LR(), 1e-12, "the world shrank to 2")
	st := o.State()
	require.NoError(t, o.Restore(st))
	assert.InDelta(t, 0.2, o.LR(), 1e-12, "the scale is not state")
	assert.Panics(t, func() { o.SetLRScale(0) })
}

// TestAdamWDecouplesWeightDecay: without weight decay AdamW is Adam bit
// for bit; with it, the two differ (Adam adds wd·p to the gradient, AdamW
// shrinks the weight).
func TestAdamWDecouplesWeightDecay(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	p0 := randomVector(rng, 64, 1)
	grads := [][]float32{randomVector(rng, 64, 0.1), randomVector(rng, 64, 0.1)}
	run := func(alg string, wd float64) []float32 {
		o := newOpt(t, config(alg, 1e-2, wd), len(p0))
		p := slices.Clone(p0)
		for _, g := range grads {
			require.NoError(t, o.Step(p, g))
		}
		return p
	}
	assert.Equal(t, run(optim.Adam, 0), run(optim.AdamW, 0))
	assert.NotEqual(t, run(optim.Adam, 0.1), run(optim.AdamW, 0.1))
}
