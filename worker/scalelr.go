package worker

import "github.com/shoalml/shoal/optim"

// ScaleLR is the linear scaling rule of Goyal et al. for a ring of world
// ranks: the learning rate times world, warmed up over the first epoch of
// samples training samples (unless cfg already has a warm-up) when each
// step of a rank takes stepSamples samples, and a minimum learning rate
// no higher than the scaled one.
func ScaleLR(cfg optim.Config, world, samples, stepSamples int) optim.Config {
	cfg.LR *= float64(world)
	if cfg.Schedule.WarmupSteps == 0 {
		perRank := (samples + world - 1) / world
		cfg.Schedule.WarmupSteps = int64((perRank + stepSamples - 1) / stepSamples)
	}
	if cfg.Schedule.MinLR > cfg.LR {
		cfg.Schedule.MinLR = cfg.LR
	}
	return cfg
}
