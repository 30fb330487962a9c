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
	cfg.Mode, cfg.Optimizer = consistency.Async, optim.DefaultConfig()
	cfg.Optimizer.LR = 1
	assert.Empty(t, cfg.UnstableWarning(), "outer sgd")
}
