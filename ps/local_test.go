package ps

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
)

// newOuterServer is the single shard of 4 floats (0,1,2,3) of a
// low-communication run (LocalSteps 10) in mode, whose optimizer is the
// outer one: Nesterov at lr 0.7, momentum 0.9, the DiLoCo paper's.
func newOuterServer(t *testing.T, mode consistency.Mode, workers int) *Server {
	t.Helper()
	var l nn.Layout
	l.Add("w", 4)
	plan, err := shard.New(4, 1, 16)
	require.NoError(t, err)
	outer := optim.DefaultConfig()
	outer.Algorithm, outer.LR, outer.Momentum = optim.Nesterov, 0.7, 0.9
	s, err := New(Config{Mode: mode, Plan: plan, Layout: l, Optimizer: outer, Workers: workers, LocalSteps: 10, Update: UpdateConfig{Rule: UpdateFull}}, []float32{0, 1, 2, 3})
	require.NoError(t, err)
	return s
}

// TestOuterNesterovAppliesTheMeanPseudoGradient: a sync outer step is one
// Nesterov step on the mean of the workers' pseudo-gradients.
func TestOuterNesterovAppliesTheMeanPseudoGradient(t *testing.T) {
	s := newOuterServer(t, consistency.Sync, 2)
	push(t, s, 0, 0, 0, 1)
	push(t, s, 1, 0, 0, 3)
	require.Equal(t, int64(1), s.Clock())
	// The mean Δ is 2: the momentum buffer b = 2, the Nesterov update
	// Δ + 0.9·b = 3.8, times lr 0.7 = 2.66.
	got := values(t, s)
	for i, v := range []float32{0, 1, 2, 3} {
		assert.InDelta(t, v-2.66, got[i], 1e-6)
	}
	// The second step carries the momentum: b = 0.9·2 + 2 = 3.8, update
	// 2 + 0.9·3.8 = 5.42, times 0.7 = 3.794.
	push(t, s, 0, 1, 1, 2)
	push(t, s, 1, 1, 1, 2)
	got2 := values(t, s)
	for i := range got {
		assert.InDelta(t, got[i]-3.794, got2[i], 1e-5)
	}
}

// TestAPseudoGradientRefusedChangesNothing: a pseudo-gradient of the
// wrong length, with a non-finite value, or from weights of an outer step
// the shard has not reached is refused as an invalid argument, counted by
// its reason, and leaves the weights, the clock and the outer optimizer's
// state as they were, in both modes that take them.
func TestAPseudoGradientRefusedChangesNothing(t *testing.T) {
	cases := []struct {
		name   string
		in     func(clock int64) Push
		reason string
		modes  []consistency.Mode
	}{
		{"wrong length", func(c int64) Push {
			return Push{WorkerID: 0, Step: 1, Clock: c, Ranges: whole, Grads: []float32{1, 1, 1}}
		}, RejectedShape, []consistency.Mode{consistency.Sync, consistency.Async}},
		{"NaN", func(c int64) Push {
			return Push{WorkerID: 0, Step: 1, Clock: c, Ranges: whole, Grads: []float32{1, float32(math.NaN()), 1, 1}}
		}, RejectedNonFinite, []consistency.Mode{consistency.Sync, consistency.Async}},
		{"+Inf", func(c int64) Push {
			return Push{WorkerID: 0, Step: 1, Clock: c, Ranges: whole, Grads: []float32{1, 1, float32(math.Inf(1)), 1}}
		}, RejectedNonFinite, []consistency.Mode{consistency.Sync, consistency.Async}},
		// Async: from weights one outer step past the shard's. Sync: two
		// (a push for the next step waits for the barrier, as a gradient's).
		{"an outer step not reached (async)", func(c int64) Push {
			return Push{WorkerID: 0, Step: 1, Clock: c + 1, Ranges: whole, Grads: fill(1)}
		}, RejectedStep, []consistency.Mode{consistency.Async}},
		{"an outer step not reached (sync)", func(c int64) Push {
			return Push{WorkerID: 0, Step: 1, Clock: c + 2, Ranges: whole, Grads: fill(1)}
		}, RejectedStep, []consistency.Mode{consistency.Sync}},
	}
	for _, tc := range cases {
		for _, mode := range tc.modes {
			t.Run(tc.name+"/"+mode.String(), func(t *testing.T) {
				s := newOuterServer(t, mode, 1)
				// One outer step first, so that the optimizer has momentum
				// a refused push could disturb.
				push(t, s, 0, 0, 0, 1)
				before, clock := values(t, s), s.Clock()
				_, err := s.Push(context.Background(), signed(s, tc.in(clock)))
				require.ErrorIs(t, err, ErrInvalidArgument)
				t.Log(err)
				assert.Equal(t, before, values(t, s), "the weights are unchanged")
				assert.Equal(t, clock, s.Clock(), "the clock is unchanged")
				st := s.Stats()
				assert.Equal(t, int64(1), st.RejectedBy[tc.reason], "refusals by reason: %v", st.RejectedBy)
				assert.Equal(t, int64(1), st.Pushes, "only the good push counted")

				// The next good push is the second outer step, as if the
				// refused one had never come: its momentum is the first's.
				ref := newOuterServer(t, mode, 1)
				push(t, ref, 0, 0, 0, 1)
				push(t, ref, 0, 1, 1, 2)
				push(t, s, 0, 1, clock, 2)
				assert.Equal(t, values(t, ref), values(t, s))
			})
		}
	}
}

// TestAsyncTakesPseudoGradientsFromWeightsItServed: a pseudo-gradient
// from weights an outer step behind the shard's is applied (async takes
// it as the update rule says); only those from ahead are refused.
func TestAsyncTakesPseudoGradientsFromWeightsItServed(t *testing.T) {
	s := newOuterServer(t, consistency.Async, 2)
	push(t, s, 0, 0, 0, 1)
	res := push(t, s, 1, 0, 0, 1)
	assert.Equal(t, int64(2), res.Clock)
	assert.Equal(t, int64(1), res.Staleness)
}

// TestLocalStepsConfig: LocalSteps goes with sync and async alone, and
// not with ScaleLR.
func TestLocalStepsConfig(t *testing.T) {
	var l nn.Layout
	l.Add("w", 4)
	plan, err := shard.New(4, 1, 16)
	require.NoError(t, err)
	base := Config{Plan: plan, Layout: l, Optimizer: optim.DefaultConfig(), Workers: 2}
	cases := []struct {
		name  string
		edit  func(*Config)
		error string
	}{
		{"sync", func(c *Config) { c.Mode, c.LocalSteps = consistency.Sync, 10 }, ""},
		{"async", func(c *Config) { c.Mode, c.LocalSteps = consistency.Async, 1 }, ""},
		{"ssp", func(c *Config) { c.Mode, c.LocalSteps = consistency.SSP, 10 }, "only sync and async mode apply pseudo-gradients, this is ssp"},
		{"negative", func(c *Config) { c.Mode, c.LocalSteps = consistency.Sync, -1 }, "local steps -1: want 1.."},
		{"scale-lr", func(c *Config) { c.Mode, c.LocalSteps, c.ScaleLR = consistency.Sync, 10, true }, "leave out scale-lr"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.edit(&cfg)
			_, err := New(cfg, make([]float32, 4))
			if tc.error == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.error)
		})
	}
}

// TestAsyncOuterMomentumWarns: async mode with an outer optimizer with
// momentum is said to be unstable; outer SGD and sync are not.
func TestAsyncOuterMomentumWarns(t *testing.T) {
	nesterov := optim.DefaultConfig()
	nesterov.Algorithm, nesterov.LR, nesterov.Momentum = optim.Nesterov, 0.7, 0.9
	cfg := Config{Mode: consistency.Async, Workers: 4, LocalSteps: 10, Optimizer: nesterov}
	assert.Contains(t, cfg.UnstableWarning(), "outer optimizer nesterov with momentum 0.9 in async mode is known to be unstable")
	cfg.Mode = consistency.Sync
	assert.Empty(t, cfg.UnstableWarning(), "sync averages first: the paper's setting")
	assert.Contains(t, Config{Mode: consistency.Async, Workers: 4, LocalSteps: 10, Optimizer: nesterov}.UnstableWarning(), "use --outer-optimizer delayed-nesterov")
	cfg.Mode, cfg.Optimizer = consistency.Async, optim.DefaultConfig()
	cfg.Optimizer.LR = 1
	assert.Empty(t, cfg.UnstableWarning(), "outer sgd")

	// Delayed Nesterov at its default delay (the workers) is the remedy,
	// under its default rule (full) too; at delay 1 it is Nesterov.
	cfg.Optimizer = nesterov
	cfg.Optimizer.Algorithm = optim.DelayedNesterov
	assert.Empty(t, cfg.UnstableWarning(), "delayed-nesterov")
	cfg.Update.Rule = UpdateFull
	assert.Empty(t, cfg.UnstableWarning(), "delayed-nesterov, full rule")
	cfg.Optimizer.Delay = 1
	assert.Contains(t, cfg.UnstableWarning(), "outer optimizer delayed-nesterov with momentum 0.9 in async mode is known to be unstable")
}

// newDelayedServer is newOuterServer's shard with the outer optimizer
// delayed Nesterov (lr 0.7, momentum 0.9) at delay 0, the default, and
// the update rule rule.
func newDelayedServer(t *testing.T, mode consistency.Mode, workers int, rule Update) *Server {
	t.Helper()
	var l nn.Layout
	l.Add("w", 4)
	plan, err := shard.New(4, 1, 16)
	require.NoError(t, err)
	outer := optim.DefaultConfig()
	outer.Algorithm, outer.LR, outer.Momentum = optim.DelayedNesterov, 0.7, 0.9
	s, err := New(Config{Mode: mode, Plan: plan, Layout: l, Optimizer: outer, Workers: workers, LocalSteps: 10, Update: UpdateConfig{Rule: rule}}, []float32{0, 1, 2, 3})
	require.NoError(t, err)
	return s
}

// TestAsyncDelayedNesterovRoundIsTheSyncOuterStep: in async mode with
// delayed Nesterov and 2 workers, each round of two pseudo-gradients takes
// the weights where sync's outer Nesterov takes them with their mean
// (TestOuterNesterovAppliesTheMeanPseudoGradient's numbers), however stale
// the pushes: the delay defaults to the workers and the update rule to
// full, so nothing scales them a second time. The first push of a round
// moves the weights by lr/2 of its own pseudo-gradient.
func TestAsyncDelayedNesterovRoundIsTheSyncOuterStep(t *testing.T) {
	s := newDelayedServer(t, consistency.Async, 2, UpdateAuto)
	assert.Equal(t, 2, s.cfg.Optimizer.Delay)
	assert.Equal(t, UpdateFull, s.cfg.Update.Rule)
	start := []float32{0, 1, 2, 3}
	push(t, s, 0, 0, 0, 1)
	got := values(t, s)
	for i, v := range start {
		assert.InDelta(t, v-0.35, got[i], 1e-6, "the first push alone: 0.7·1/2")
	}
	push(t, s, 1, 0, 0, 3)
	got = values(t, s)
	for i, v := range start {
		assert.InDelta(t, v-2.66, got[i], 1e-6, "a round: sync's first outer step")
	}
	// Both computed from the weights of clock 0, now 2 and 3 updates old:
	// the staleness rule would have scaled them by 1/2 and 1/3.
	res := push(t, s, 0, 1, 0, 2)
	assert.Equal(t, int64(2), res.Staleness)
	push(t, s, 1, 1, 0, 2)
	got2 := values(t, s)
	for i := range got {
		assert.InDelta(t, got[i]-3.794, got2[i], 1e-5, "a second round: sync's second outer step")
	}
}

// TestDelayedNesterovDelayAndRule: the delay's default is the pushes of a
// round (the workers in async and ssp, 1 in sync), a delay given is kept,
// async without workers is refused, and the update rule's default under
// delayed Nesterov is full, where one given is kept.
func TestDelayedNesterovDelayAndRule(t *testing.T) {
	var l nn.Layout
	l.Add("w", 4)
	plan, err := shard.New(4, 1, 16)
	require.NoError(t, err)
	dn := optim.DefaultConfig()
	dn.Algorithm = optim.DelayedNesterov
	cases := []struct {
		name      string
		mode      consistency.Mode
		workers   int
		delay     int
		local     int
		rule      Update
		wantDelay int
		wantRule  Update
		error     string
	}{
		{"async", consistency.Async, 4, 0, 10, UpdateAuto, 4, UpdateFull, ""},
		{"async, a delay given", consistency.Async, 4, 3, 10, UpdateAuto, 3, UpdateFull, ""},
		{"async, a rule given", consistency.Async, 4, 0, 10, UpdateAverage, 4, UpdateAverage, ""},
		{"async without local steps", consistency.Async, 8, 0, 0, UpdateAuto, 8, UpdateFull, ""},
		{"sync", consistency.Sync, 4, 0, 10, UpdateAuto, 1, UpdateAverage, ""},
		{"ssp", consistency.SSP, 3, 0, 0, UpdateAuto, 3, UpdateFull, ""},
		{"async without workers", consistency.Async, 0, 0, 10, UpdateAuto, 0, UpdateFull,
			"optimizer delayed-nesterov in async mode: delay 0 and no workers: the delay (the pushes between momentum updates) is by default the number of workers"},
		{"async without workers, a delay given", consistency.Async, 0, 5, 10, UpdateAuto, 5, UpdateFull, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opt := dn
			opt.Delay = tc.delay
			cfg := Config{Mode: tc.mode, Plan: plan, Layout: l, Optimizer: opt, Workers: tc.workers, LocalSteps: tc.local, Update: UpdateConfig{Rule: tc.rule}, Staleness: 1}
			assert.Equal(t, tc.wantDelay, cfg.Delay())
			s, err := New(cfg, make([]float32, 4))
			if tc.error != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.error)
				return
			}
			require.NoError(t, err)
			defer s.Close()
			assert.Equal(t, tc.wantDelay, s.cfg.Optimizer.Delay)
			if tc.mode != consistency.Sync {
				assert.Equal(t, tc.wantRule, s.cfg.Update.Rule)
			}
		})
	}
}

// TestAWorkerKilledMidRoundDoesNotStopTheOthers: in sync mode with local
// steps, a worker that dies after the others pushed their round's
// pseudo-gradients (membership takes it out: WorkerGone) does not hold
// the outer step: it is applied with the mean of the pseudo-gradients that
// came, and the next rounds wait for the live workers only. In async
// nothing waits for it in the first place.
func TestAWorkerKilledMidRoundDoesNotStopTheOthers(t *testing.T) {
	s := newOuterServer(t, consistency.Sync, 3)
	push(t, s, 0, 0, 0, 1)
	push(t, s, 1, 0, 0, 3)
	require.Equal(t, int64(0), s.Clock(), "the round waits for worker 2")
	require.True(t, s.WorkerGone(2))
	require.Equal(t, int64(1), s.Clock(), "the outer step held up by the dead worker is applied")
	// TestOuterNesterovAppliesTheMeanPseudoGradient's numbers: the mean of
	// the two is 2, and the first outer step moves every weight by 2.66.
	got := values(t, s)
	for i, v := range []float32{0, 1, 2, 3} {
		assert.InDelta(t, v-2.66, got[i], 1e-6)
	}
	push(t, s, 0, 1, 1, 2)
	push(t, s, 1, 1, 1, 2)
	assert.Equal(t, int64(2), s.Clock(), "the next round needs the two live workers only")
	got2 := values(t, s)
	for i := range got {
		assert.InDelta(t, got[i]-3.794, got2[i], 1e-5)
	}

	a := newDelayedServer(t, consistency.Async, 3, UpdateAuto)
	push(t, a, 0, 0, 0, 1)
	push(t, a, 1, 0, 0, 1)
	assert.Equal(t, int64(2), a.Clock(), "async applies each pseudo-gradient as it comes, whoever is missing")
}
