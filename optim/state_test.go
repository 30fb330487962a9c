package optim_test

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/optim"
)

func cloneState(s optim.State) optim.State {
	c := optim.State{Steps: s.Steps, Slots: make(map[string][]float32, len(s.Slots))}
	for k, v := range s.Slots {
		c.Slots[k] = slices.Clone(v)
	}
	return c
}

func TestStateRoundTrip(t *testing.T) {
	wantSlots := map[string][]string{
		optim.SGD:      nil,
		optim.Momentum: {"momentum_buffer"},
		optim.Nesterov: {"momentum_buffer"},
		optim.Adagrad:  {"sum"},
		optim.Adam:     {"exp_avg", "exp_avg_sq"},
		optim.AdamW:    {"exp_avg", "exp_avg_sq"},
		// At delay 3 (config's), the steps after the restore (the 4th to
		// the 7th) update the momentum at the 6th only: both slots and
		// the step count must come back.
		optim.DelayedNesterov: {"momentum_buffer", "next_momentum_buffer"},
	}
	for _, alg := range optim.Algorithms() {
		t.Run(alg, func(t *testing.T) {
			cfg := config(alg, 0.01, 1e-3)
			cfg.Schedule = optim.Schedule{WarmupSteps: 2, Decay: optim.DecayCosine, DecaySteps: 6}
			const n = 50
			rng := rand.New(rand.NewPCG(9, 10))
			orig := newOpt(t, cfg, n)
			p := randomVector(rng, n, 1)
			for range 3 {
				require.NoError(t, orig.Step(p, randomVector(rng, n, 0.1)))
			}

			st := orig.State()
			assert.Equal(t, int64(3), st.Steps)
			assert.ElementsMatch(t, wantSlots[alg], slices.Collect(maps.Keys(st.Slots)))
			assert.Equal(t, wantSlots[alg], orig.SlotNames())
			snapshot := cloneState(st)

			restored := newOpt(t, cfg, n)
			require.NoError(t, restored.Restore(st))
			assert.Equal(t, orig.Steps(), restored.Steps())
			assert.Equal(t, orig.LR(), restored.LR())
			assert.Equal(t, st, restored.State())

			// Restore copied: scribbling on st afterwards must not reach the optimizer.
			for _, v := range st.Slots {
				clear(v)
			}
			st.Steps = 99
			assert.Equal(t, snapshot, restored.State())

			// Both continue identically (same code on the same inputs, so bit-identical).
			pOrig, pRestored := slices.Clone(p), slices.Clone(p)
			for range 4 {
				g := randomVector(rng, n, 0.1)
				require.NoError(t, orig.Step(pOrig, g))
				require.NoError(t, restored.Step(pRestored, g))
			}
			assert.Equal(t, pOrig, pRestored)
			assert.Equal(t, orig.State(), restored.State())

			// State was a copy: the original's later steps did not change it.
			if alg != optim.SGD {
				assert.NotEqual(t, snapshot, orig.State())
			}
		})
	}
}

func TestRestoreRefusesBadState(t *testing.T) {
	const n = 4
	good := func() optim.State {
		return optim.State{Steps: 7, Slots: map[string][]float32{
			"exp_avg":    {1, -2, 3, -4},
			"exp_avg_sq": {1, 2, 3, 4},
		}}
	}
	tests := []struct {
		name    string
		mutate  func(*optim.State)
		wantErr string
	}{
		{"negative steps", func(s *optim.State) { s.Steps = -1 }, "restore: steps -1: must be non-negative"},
		{"missing slot", func(s *optim.State) { delete(s.Slots, "exp_avg_sq") },
			`restore: slot "exp_avg_sq": missing for adam`},
		{"no slots", func(s *optim.State) { s.Slots = nil }, `restore: slot "exp_avg": missing for adam`},
		{"unknown slot", func(s *optim.State) { s.Slots["momentum_buffer"] = make([]float32, n) },
			`restore: slot "momentum_buffer": unknown for adam (want exp_avg, exp_avg_sq)`},
		{"short slot", func(s *optim.State) { s.Slots["exp_avg_sq"] = []float32{1, 2, 3} },
			`restore: slot "exp_avg_sq" has 3 floats, want 4`},
		{"long slot", func(s *optim.State) { s.Slots["exp_avg"] = make([]float32, n+1) },
			`restore: slot "exp_avg" has 5 floats, want 4`},
		{"NaN", func(s *optim.State) { s.Slots["exp_avg"][2] = float32(math.NaN()) },
			`restore: slot "exp_avg"[2] = NaN: must be finite`},
		{"Inf", func(s *optim.State) { s.Slots["exp_avg_sq"][1] = float32(math.Inf(1)) },
			`restore: slot "exp_avg_sq"[1] = +Inf: must be finite and non-negative`},
		// exp_avg is valid and different from the current state, so a partial restore would show.
		{"negative second moment", func(s *optim.State) { s.Slots["exp_avg_sq"][3] = -1 },
			`restore: slot "exp_avg_sq"[3] = -1: must be finite and non-negative`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOpt(t, config(optim.Adam, 1e-3, 0), n)
			p := []float32{1, 2, 3, 4}
			require.NoError(t, o.Step(p, []float32{0.1, 0.2, 0.3, 0.4}))
			before := o.State()

			s := good()
			tt.mutate(&s)
			err := o.Restore(s)
			require.Error(t, err)
			assert.ErrorIs(t, err, optim.ErrInvalidState)
			assert.EqualError(t, err, tt.wantErr)
			assert.Equal(t, before, o.State(), "nothing may be half-restored")
		})
	}
	t.Run("good state is accepted", func(t *testing.T) {
		o := newOpt(t, config(optim.Adam, 1e-3, 0), n)
		require.NoError(t, o.Restore(good()))
		assert.Equal(t, good(), o.State())
	})
}

func TestRestoreAcrossAlgorithms(t *testing.T) {
	tests := []struct {
		name     string
		from, to string
		wantErr  string
	}{
		{"adam into momentum", optim.Adam, optim.Momentum, `unknown for momentum (want momentum_buffer)`},
		{"momentum into adagrad", optim.Momentum, optim.Adagrad, `restore: slot "momentum_buffer": unknown for adagrad (want sum)`},
		{"adagrad into sgd", optim.Adagrad, optim.SGD, `restore: slot "sum": unknown for sgd (want no slots)`},
		{"sgd into adam", optim.SGD, optim.Adam, `restore: slot "exp_avg": missing for adam`},
		{"momentum into nesterov", optim.Momentum, optim.Nesterov, ""}, // same slots: allowed
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newOpt(t, config(tt.from, 0.1, 0), 3)
			require.NoError(t, src.Step([]float32{1, 2, 3}, []float32{1, 1, 1}))
			dst := newOpt(t, config(tt.to, 0.1, 0), 3)
			before := dst.State()
			err := dst.Restore(src.State())
			if tt.wantErr == "" {
				require.NoError(t, err)
				assert.Equal(t, src.State(), dst.State())
				return
			}
			assert.ErrorIs(t, err, optim.ErrInvalidState)
			assert.ErrorContains(t, err, tt.wantErr)
			assert.Equal(t, before, dst.State())
		})
	}
}

func TestSGDStateHasNoSlots(t *testing.T) {
	o := newOpt(t, config(optim.SGD, 0.1, 0), 3)
	require.NoError(t, o.Step([]float32{1, 2, 3}, []float32{1, 1, 1}))
	st := o.State()
	assert.Equal(t, optim.State{Steps: 1, Slots: map[string][]float32{}}, st)
	assert.Empty(t, o.SlotNames())

	fresh := newOpt(t, config(optim.SGD, 0.1, 0), 3)
	require.NoError(t, fresh.Restore(optim.State{Steps: 5}))
	assert.Equal(t, int64(5), fresh.Steps())
}
