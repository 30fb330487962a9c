package worker

import "github.com/shoalml/shoal/optim"

// ScaleWarmup is the warm-up of the linear scaling rule of Goyal et al.
// for a ring (the learning rate times the world size:
// RingConfig.ScaleLR): unless cfg already has a warm-up, one over the
// first epoch of samples training samples when each of world ranks takes
// stepSamples samples a step. (Shards update once per push in async and
// SSP: shoal train gives them an epoch of their updates.)
func ScaleWarmup(cfg optim.Config, world, samples, stepSamples int) optim.Config {
	if cfg.Schedule.WarmupSteps == 0 {
		perRank := (samples + world - 1) / world
		cfg.Schedule.WarmupSteps = int64((perRank + stepSamples - 1) / stepSamples)
	}
	return cfg
}
