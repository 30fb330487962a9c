package optim_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/optim"
)

func TestScheduleLRAt(t *testing.T) {
	type point struct {
		step int64
		want float64
	}
	tests := []struct {
		name   string
		s      optim.Schedule
		base   float64
		points []point
	}{
		{"zero value is constant", optim.Schedule{}, 0.1,
			[]point{{-5, 0.1}, {0, 0.1}, {1, 0.1}, {1 << 40, 0.1}}},
		{"explicit none ignores decay fields", optim.Schedule{Decay: optim.DecayNone, DecaySteps: 3, Gamma: 0.5}, 0.1,
			[]point{{0, 0.1}, {3, 0.1}, {100, 0.1}}},
		{"warmup ramps from base/W to base", optim.Schedule{WarmupSteps: 4}, 1,
			[]point{{-1, 0.25}, {0, 0.25}, {1, 0.5}, {2, 0.75}, {3, 1}, {4, 1}, {1000, 1}}},
		{"warmup of one step is no warmup", optim.Schedule{WarmupSteps: 1}, 0.3,
			[]point{{0, 0.3}, {1, 0.3}}},
		{"step decay", optim.Schedule{Decay: optim.DecayStep, DecaySteps: 10, Gamma: 0.1}, 1,
			[]point{{0, 1}, {9, 1}, {10, 0.1}, {19, 0.1}, {20, 0.01}, {30, 0.001}}},
		{"step decay floors at min lr", optim.Schedule{Decay: optim.DecayStep, DecaySteps: 10, Gamma: 0.1, MinLR: 0.05}, 1,
			[]point{{9, 1}, {10, 0.1}, {20, 0.05}, {1000, 0.05}}},
		{"step decay counts after warmup", optim.Schedule{WarmupSteps: 2, Decay: optim.DecayStep, DecaySteps: 3, Gamma: 0.5}, 1,
			[]point{{0, 0.5}, {1, 1}, {2, 1}, {4, 1}, {5, 0.5}, {8, 0.25}}},
		{"gamma 1 is constant", optim.Schedule{Decay: optim.DecayStep, DecaySteps: 1, Gamma: 1}, 0.2,
			[]point{{0, 0.2}, {50, 0.2}}},
		{"cosine after warmup", optim.Schedule{WarmupSteps: 2, Decay: optim.DecayCosine, DecaySteps: 10, MinLR: 0.1}, 1.1,
			[]point{{0, 0.55}, {1, 1.1}, {2, 1.1}, {7, 0.6}, {12, 0.1}, {13, 0.1}, {1 << 40, 0.1}}},
		{"cosine quarter points", optim.Schedule{Decay: optim.DecayCosine, DecaySteps: 4}, 1,
			[]point{{0, 1}, {1, (1 + math.Sqrt2/2) / 2}, {2, 0.5}, {3, (1 - math.Sqrt2/2) / 2}, {4, 0}}},
		{"linear", optim.Schedule{Decay: optim.DecayLinear, DecaySteps: 4}, 1,
			[]point{{0, 1}, {1, 0.75}, {2, 0.5}, {3, 0.25}, {4, 0}, {5, 0}}},
		{"linear to min lr after warmup", optim.Schedule{WarmupSteps: 1, Decay: optim.DecayLinear, DecaySteps: 2, MinLR: 0.2}, 1,
			[]point{{0, 1}, {1, 1}, {2, 0.6}, {3, 0.2}, {4, 0.2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tt.s.Validate())
			for _, p := range tt.points {
				assert.InDelta(t, p.want, tt.s.LRAt(tt.base, p.step), 1e-12, "step %d", p.step)
			}
		})
	}
}

func TestScheduleLRAtInvalidDoesNotPanic(t *testing.T) {
	for _, s := range []optim.Schedule{
		{Decay: optim.DecayStep},
		{Decay: optim.DecayCosine, DecaySteps: -1},
		{Decay: "bogus", DecaySteps: 3},
		{WarmupSteps: -3},
	} {
		assert.NotPanics(t, func() { s.LRAt(0.1, 5) }, "%+v", s)
	}
}

func TestScheduleValidate(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name    string
		s       optim.Schedule
		wantErr string // "" for valid
	}{
		{"zero value", optim.Schedule{}, ""},
		{"cosine", optim.Schedule{WarmupSteps: 5, Decay: optim.DecayCosine, DecaySteps: 100, MinLR: 1e-5}, ""},
		{"linear", optim.Schedule{Decay: optim.DecayLinear, DecaySteps: 1}, ""},
		{"step", optim.Schedule{Decay: optim.DecayStep, DecaySteps: 30, Gamma: 0.1}, ""},
		{"none keeps unused fields", optim.Schedule{Decay: optim.DecayNone, DecaySteps: 30, Gamma: 0.1, MinLR: 1}, ""},
		{"negative warmup", optim.Schedule{WarmupSteps: -1}, "schedule: warmup steps -1: must be non-negative"},
		{"unknown decay", optim.Schedule{Decay: "exponential"},
			`schedule: decay "exponential": unknown (want none, step, cosine or linear)`},
		{"decay names are case-sensitive", optim.Schedule{Decay: "Cosine", DecaySteps: 3},
			`schedule: decay "Cosine": unknown`},
		{"step without period", optim.Schedule{Decay: optim.DecayStep, Gamma: 0.5},
			"schedule: decay steps 0: step decay needs decay steps > 0"},
		{"cosine without length", optim.Schedule{Decay: optim.DecayCosine},
			"schedule: decay steps 0: cosine decay needs decay steps > 0"},
		{"linear negative length", optim.Schedule{Decay: optim.DecayLinear, DecaySteps: -2},
			"schedule: decay steps -2: linear decay needs decay steps > 0"},
		{"none negative decay steps", optim.Schedule{DecaySteps: -2},
			"schedule: decay steps -2: must be non-negative"},
		{"step gamma 0", optim.Schedule{Decay: optim.DecayStep, DecaySteps: 3},
			"schedule: gamma 0: must be in (0, 1]"},
		{"step gamma above 1", optim.Schedule{Decay: optim.DecayStep, DecaySteps: 3, Gamma: 1.5},
			"schedule: gamma 1.5: must be in (0, 1]"},
		{"step gamma NaN", optim.Schedule{Decay: optim.DecayStep, DecaySteps: 3, Gamma: nan},
			"schedule: gamma NaN: must be in (0, 1]"},
		{"unused gamma negative", optim.Schedule{Gamma: -1},
			"schedule: gamma -1: must be non-negative and finite"},
		{"min lr negative", optim.Schedule{Decay: optim.DecayCosine, DecaySteps: 3, MinLR: -0.1},
			"schedule: min lr -0.1: must be non-negative and finite"},
		{"min lr NaN", optim.Schedule{MinLR: nan}, "schedule: min lr NaN: must be non-negative and finite"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate()
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, optim.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}
