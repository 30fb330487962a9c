package worker

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/shoalml/shoal/optim"
)

func TestScaleWarmup(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		in                          optim.Config
		world, samples, stepSamples int
		wantWarmup                  int64
	}{
		{"an epoch of a rank's steps", optim.Config{LR: 0.1}, 4, 1000, 10, 25},
		{"rounds the share and the steps up", optim.Config{LR: 0.1}, 3, 1000, 64, 6},
		{"keeps a warm-up given", optim.Config{LR: 0.1, Schedule: optim.Schedule{WarmupSteps: 7}}, 2, 1000, 10, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ScaleWarmup(tc.in, tc.world, tc.samples, tc.stepSamples)
			assert.Equal(t, tc.wantWarmup, got.Schedule.WarmupSteps)
			assert.Equal(t, tc.in.LR, got.LR, "the rate is scaled by the optimizer (SetLRScale), not here")
		})
	}
}
