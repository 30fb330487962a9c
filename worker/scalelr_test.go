package worker

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/shoalml/shoal/optim"
)

func TestScaleLR(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		in                          optim.Config
		world, samples, stepSamples int
		wantLR, wantMin             float64
		wantWarmup                  int64
	}{
		{"warms up over an epoch", optim.Config{LR: 0.1}, 4, 1000, 10, 0.4, 0, 25},
		{"rounds the share and the steps up", optim.Config{LR: 0.1}, 3, 1000, 64, 0.30000000000000004, 0, 6},
		{"keeps a warm-up given", optim.Config{LR: 0.1, Schedule: optim.Schedule{WarmupSteps: 7}}, 2, 1000, 10, 0.2, 0, 7},
		{"caps the minimum", optim.Config{LR: 0.1, Schedule: optim.Schedule{MinLR: 0.5}}, 2, 100, 10, 0.2, 0.2, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ScaleLR(tc.in, tc.world, tc.samples, tc.stepSamples)
			assert.InDelta(t, tc.wantLR, got.LR, 1e-12)
			assert.InDelta(t, tc.wantMin, got.Schedule.MinLR, 1e-12)
			assert.Equal(t, tc.wantWarmup, got.Schedule.WarmupSteps)
		})
	}
}
