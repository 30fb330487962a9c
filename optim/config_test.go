package optim_test

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/optim"
)

func TestDefaultConfig(t *testing.T) {
	cfg := optim.DefaultConfig()
	assert.Equal(t, optim.Config{
		Algorithm: "sgd", LR: 0.01, Momentum: 0.9, Beta1: 0.9, Beta2: 0.999,
	}, cfg)
	require.NoError(t, cfg.Validate())
	for _, alg := range optim.Algorithms() {
		cfg.Algorithm = alg
		assert.NoError(t, cfg.Validate(), alg)
	}
}

func TestAlgorithms(t *testing.T) {
	algs := optim.Algorithms()
	assert.Equal(t, []string{"sgd", "momentum", "nesterov", "adagrad", "adam", "adamw", "delayed-nesterov"}, algs)
	algs[0] = "changed"
	assert.Equal(t, "sgd", optim.Algorithms()[0], "Algorithms must return a fresh slice")
}

func TestConfigValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*optim.Config)
	}{
		{"momentum 0 with momentum", func(c *optim.Config) { c.Algorithm, c.Momentum = optim.Momentum, 0 }},
		{"beta1 0", func(c *optim.Config) { c.Algorithm, c.Beta1 = optim.Adam, 0 }},
		{"beta2 0", func(c *optim.Config) { c.Algorithm, c.Beta2 = optim.Adam, 0 }},
		{"weight decay", func(c *optim.Config) { c.WeightDecay = 5e-4 }},
		{"explicit epsilon", func(c *optim.Config) { c.Epsilon = 1e-6 }},
		{"big lr", func(c *optim.Config) { c.LR = 10 }},
		{"delayed-nesterov without momentum", func(c *optim.Config) { c.Algorithm, c.Momentum = optim.DelayedNesterov, 0 }},
		{"delayed-nesterov delay 0", func(c *optim.Config) { c.Algorithm, c.Delay = optim.DelayedNesterov, 0 }},
		{"delayed-nesterov at the bound", func(c *optim.Config) { c.Algorithm, c.Delay = optim.DelayedNesterov, optim.MaxDelay }},
		{"min lr equal to lr", func(c *optim.Config) {
			c.Schedule = optim.Schedule{Decay: optim.DecayCosine, DecaySteps: 10, MinLR: c.LR}
		}},
		{"min lr above lr ignored without decay", func(c *optim.Config) { c.Schedule.MinLR = 1 }},
		{"warmup only", func(c *optim.Config) { c.Schedule.WarmupSteps = 100 }},
		{"explicit none", func(c *optim.Config) { c.Schedule.Decay = optim.DecayNone }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := optim.DefaultConfig()
			tt.mutate(&cfg)
			assert.NoError(t, cfg.Validate())
			_, err := optim.New(cfg, 3)
			assert.NoError(t, err)
		})
	}
}

func TestConfigValidateRejects(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name    string
		mutate  func(*optim.Config)
		wantErr string
	}{
		{"unknown algorithm", func(c *optim.Config) { c.Algorithm = "foo" },
			`optimizer "foo": unknown algorithm (want sgd, momentum, nesterov, adagrad, adam, adamw, delayed-nesterov)`},
		{"empty algorithm", func(c *optim.Config) { c.Algorithm = "" },
			`optimizer "": unknown algorithm (want sgd, momentum, nesterov, adagrad, adam, adamw, delayed-nesterov)`},
		{"algorithm is case-sensitive", func(c *optim.Config) { c.Algorithm = "Adam" },
			`optimizer "Adam": unknown algorithm`},
		{"lr zero", func(c *optim.Config) { c.LR = 0 }, "lr 0: must be positive and finite"},
		{"lr negative", func(c *optim.Config) { c.LR = -1 }, "lr -1: must be positive and finite"},
		{"lr NaN", func(c *optim.Config) { c.LR = nan }, "lr NaN: must be positive and finite"},
		{"lr Inf", func(c *optim.Config) { c.LR = inf }, "lr +Inf: must be positive and finite"},
		{"momentum 1", func(c *optim.Config) { c.Momentum = 1 }, "momentum 1: must be in [0, 1)"},
		{"momentum negative", func(c *optim.Config) { c.Momentum = -0.1 }, "momentum -0.1: must be in [0, 1)"},
		{"momentum NaN", func(c *optim.Config) { c.Momentum = nan }, "momentum NaN: must be in [0, 1)"},
		{"nesterov without momentum", func(c *optim.Config) { c.Algorithm, c.Momentum = optim.Nesterov, 0 },
			"momentum 0: nesterov needs momentum > 0"},
		{"delay negative", func(c *optim.Config) { c.Algorithm, c.Delay = optim.DelayedNesterov, -1 },
			"delay -1: must be in 0..1048576 (0 is 1)"},
		{"delay past the bound", func(c *optim.Config) { c.Delay = optim.MaxDelay + 1 },
			"delay 1048577: must be in 0..1048576 (0 is 1)"},
		{"weight decay negative", func(c *optim.Config) { c.WeightDecay = -0.1 },
			"weight decay -0.1: must be non-negative and finite"},
		{"weight decay Inf", func(c *optim.Config) { c.WeightDecay = inf },
			"weight decay +Inf: must be non-negative and finite"},
		{"beta1 1", func(c *optim.Config) { c.Beta1 = 1 }, "beta1 1: must be in [0, 1)"},
		{"beta1 negative", func(c *optim.Config) { c.Beta1 = -0.5 }, "beta1 -0.5: must be in [0, 1)"},
		{"beta2 1", func(c *optim.Config) { c.Beta2 = 1 }, "beta2 1: must be in [0, 1)"},
		{"beta2 NaN", func(c *optim.Config) { c.Beta2 = nan }, "beta2 NaN: must be in [0, 1)"},
		{"epsilon negative", func(c *optim.Config) { c.Epsilon = -1e-8 },
			"epsilon -1e-08: must be non-negative and finite (0 selects the default)"},
		{"epsilon Inf", func(c *optim.Config) { c.Epsilon = inf },
			"epsilon +Inf: must be non-negative and finite"},
		{"schedule field", func(c *optim.Config) { c.Schedule.Decay = "exp" },
			`schedule: decay "exp": unknown (want none, step, cosine or linear)`},
		{"min lr above lr", func(c *optim.Config) {
			c.Schedule = optim.Schedule{Decay: optim.DecayLinear, DecaySteps: 10, MinLR: 0.5}
		}, "schedule: min lr 0.5: must not exceed lr 0.01"},
		{"negative lr under a decay to a min lr", func(c *optim.Config) {
			c.LR, c.Schedule = -1, optim.Schedule{Decay: optim.DecayCosine, DecaySteps: 10}
		}, "lr -1: must be positive and finite"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := optim.DefaultConfig()
			tt.mutate(&cfg)
			err := cfg.Validate()
			require.Error(t, err)
			assert.ErrorIs(t, err, optim.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.wantErr)
			assert.NotContains(t, err.Error(), "\n", "one bad field, one line")

			o, newErr := optim.New(cfg, 3)
			assert.Nil(t, o)
			assert.ErrorIs(t, newErr, optim.ErrInvalidConfig)
		})
	}
}

func TestConfigValidateReportsEveryField(t *testing.T) {
	err := optim.Config{Algorithm: "rmsprop", Momentum: 2, Schedule: optim.Schedule{WarmupSteps: -1}}.Validate()
	require.Error(t, err)
	assert.ErrorIs(t, err, optim.ErrInvalidConfig)
	lines := strings.Split(err.Error(), "\n")
	assert.Equal(t, []string{
		`optimizer "rmsprop": unknown algorithm (want sgd, momentum, nesterov, adagrad, adam, adamw, delayed-nesterov)`,
		"lr 0: must be positive and finite",
		"momentum 2: must be in [0, 1)",
		"schedule: warmup steps -1: must be non-negative",
	}, lines)
}

func TestNewRejectsNegativeSize(t *testing.T) {
	o, err := optim.New(optim.DefaultConfig(), -1)
	assert.Nil(t, o)
	assert.ErrorIs(t, err, optim.ErrInvalidConfig)
	assert.EqualError(t, err, "size -1: must be non-negative")
}
