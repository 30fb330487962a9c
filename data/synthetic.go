package data

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// SyntheticConfig describes a generated, learnable dataset: each class has
// one random template image (every value drawn from N(0, 1)), and a sample
// is its class's template plus independent Gaussian noise of standard
// deviation Noise. Labels are drawn uniformly. Everything follows from
// Seed, so every process that builds the same config gets the same data.
type SyntheticConfig struct {
	Train, Test int     // samples in each set, ≥ 1
	C, H, W     int     // shape of one sample
	Classes     int     // at least 2
	Seed        uint64  // the same Seed gives the same data
	Noise       float64 // standard deviation of the per-value noise, ≥ 0
}

// DefaultSyntheticConfig is shaped like Fashion-MNIST (1×28×28, 10
// classes) with 6,000 training and 1,000 test samples and noise 1.0, which
// a small MLP learns to high accuracy within an epoch.
func DefaultSyntheticConfig() SyntheticConfig {
	return SyntheticConfig{Train: 6000, Test: 1000, C: 1, H: 28, W: 28, Classes: 10, Seed: 1, Noise: 1}
}

// maxSyntheticFloats bounds the generated data (2³⁰ floats, 4 GiB).
const maxSyntheticFloats = 1 << 30

func (cfg SyntheticConfig) validate() error {
	var errs []error
	if cfg.Train < 1 || cfg.Test < 1 {
		errs = append(errs, fmt.Errorf("train and test sets of %d and %d samples: want ≥ 1 each", cfg.Train, cfg.Test))
	}
	if cfg.C < 1 || cfg.H < 1 || cfg.W < 1 {
		errs = append(errs, fmt.Errorf("shape is %d×%d×%d, want every size ≥ 1", cfg.C, cfg.H, cfg.W))
	}
	if cfg.Classes < 2 {
		errs = append(errs, fmt.Errorf("classes %d: want ≥ 2", cfg.Classes))
	}
	if !(cfg.Noise >= 0) { // also rejects NaN
		errs = append(errs, fmt.Errorf("noise %v: want ≥ 0", cfg.Noise))
	}
	if len(errs) == 0 {
		total := float64(cfg.Train+cfg.Test+cfg.Classes) * float64(cfg.C) * float64(cfg.H) * float64(cfg.W)
		if total > maxSyntheticFloats {
			errs = append(errs, fmt.Errorf("(Train+Test+Classes)·C·H·W is %.0f floats, want at most %d", total, maxSyntheticFloats))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("synthetic dataset config (start from DefaultSyntheticConfig): %w", err)
	}
	return nil
}

// Synthetic generates the training and test sets cfg describes. The test
// set shares the training set's templates and draws its own noise.
func Synthetic(cfg SyntheticConfig) (train, test Dataset, err error) {
	if err := cfg.validate(); err != nil {
		return nil, nil, err
	}
	size := cfg.C * cfg.H * cfg.W
	// Independent PCG streams for the templates and each set, so that
	// changing Test does not change the training set.
	templates := make([]float32, cfg.Classes*size)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x7e3a_1a7e))
	for i := range templates {
		templates[i] = float32(rng.NormFloat64())
	}
	gen := func(name string, n int, stream uint64) *memDataset {
		rng := rand.New(rand.NewPCG(cfg.Seed, stream))
		ds := &memDataset{
			name: name, n: n, c: cfg.C, h: cfg.H, w: cfg.W, size: size, classes: cfg.Classes,
			f32: make([]float32, n*size), labels: make([]int32, n),
		}
		for i := range n {
			l := rng.IntN(cfg.Classes)
			ds.labels[i] = int32(l)
			tpl := templates[l*size : (l+1)*size]
			x := ds.f32[i*size : (i+1)*size]
			for j, t := range tpl {
				x[j] = t + float32(cfg.Noise*rng.NormFloat64())
			}
		}
		return ds
	}
	trainDS := gen("synthetic/train", cfg.Train, 1)
	testDS := gen("synthetic/test", cfg.Test, 2)
	if err := errors.Join(trainDS.check(), testDS.check()); err != nil {
		return nil, nil, err
	}
	return trainDS, testDS, nil
}
