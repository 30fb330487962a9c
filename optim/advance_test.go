package optim_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/optim"
)

// TestAdvanceGivesStepsUpdate: applying Advance's DeviceStep with the
// exported reference kernels (what a device's kernels are checked
// against) to the slots LiveSlots returns gives Step's vector and state
// bit for bit, for every algorithm a device runs, across a schedule.
func TestAdvanceGivesStepsUpdate(t *testing.T) {
	const n = 37
	for _, tc := range []struct {
		name string
		cfg  optim.Config
	}{
		{"sgd", optim.Config{Algorithm: optim.SGD, LR: 0.1}},
		{"sgd wd", optim.Config{Algorithm: optim.SGD, LR: 0.1, WeightDecay: 1e-2}},
		{"momentum", optim.Config{Algorithm: optim.Momentum, LR: 0.1, Momentum: 0.9}},
		{"nesterov wd", optim.Config{Algorithm: optim.Nesterov, LR: 0.1, Momentum: 0.9, WeightDecay: 1e-3}},
		{"adam", optim.Config{Algorithm: optim.Adam, LR: 1e-3, Beta1: 0.9, Beta2: 0.999}},
		{"adam wd", optim.Config{Algorithm: optim.Adam, LR: 1e-3, Beta1: 0.9, Beta2: 0.999, WeightDecay: 1e-2}},
		{"adamw", optim.Config{Algorithm: optim.AdamW, LR: 1e-2, Beta1: 0.9, Beta2: 0.99, WeightDecay: 0.1}},
		{"adam beta1 0.3 cosine", optim.Config{Algorithm: optim.Adam, LR: 1e-2, Beta1: 0.3, Beta2: 0.9,
			Schedule: optim.Schedule{Decay: optim.DecayCosine, DecaySteps: 5, WarmupSteps: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			ref := newOpt(t, tc.cfg, n)
			dev := newOpt(t, tc.cfg, n)
			p := make([]float32, n)
			for i := range p {
				p[i] = float32(rng.NormFloat64())
			}
			q := slices.Clone(p)
			for step := range 6 {
				g := make([]float32, n)
				for i := range g {
					g[i] = float32(rng.NormFloat64())
				}
				require.NoError(t, ref.Step(p, g))
				s, err := dev.Advance()
				require.NoError(t, err)
				require.Equal(t, tc.cfg.Algorithm, s.Algorithm)
				slots := dev.LiveSlots()
				switch s.Algorithm {
				case optim.SGD:
					// SGD is momentum 0 on a zeroed buffer (no sign of a
					// zero differs here: no gradient is zero).
					optim.StepMomentum(q, g, make([]float32, n), s.LR, s.WD, 0, false)
				case optim.Momentum, optim.Nesterov:
					optim.StepMomentum(q, g, slots[optim.SlotMomentumBuffer], s.LR, s.WD, s.Momentum, s.Algorithm == optim.Nesterov)
				default:
					optim.StepAdam(q, g, slots[optim.SlotExpAvg], slots[optim.SlotExpAvgSq], s.Adam)
				}
				for i := range p {
					require.Equal(t, math.Float32bits(p[i]), math.Float32bits(q[i]), "step %d element %d: %v against Step's %v", step, i, q[i], p[i])
				}
				assert.Equal(t, ref.Steps(), dev.Steps())
				assert.Equal(t, ref.State(), dev.State(), "step %d", step)
			}
		})
	}
}

// TestAdvanceRefusesAdagrad: no device kernel runs adagrad, so Advance
// says so and counts no step.
func TestAdvanceRefusesAdagrad(t *testing.T) {
	o := newOpt(t, optim.Config{Algorithm: optim.Adagrad, LR: 0.1}, 3)
	_, err := o.Advance()
	require.ErrorIs(t, err, optim.ErrNotOnDevice)
	assert.ErrorContains(t, err, "adagrad")
	assert.Equal(t, int64(0), o.Steps())
	assert.False(t, optim.OnDevice(optim.Adagrad))
	assert.True(t, optim.OnDevice(optim.AdamW))
}
