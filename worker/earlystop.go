package worker

import (
	"context"
	"fmt"

	"github.com/shoalml/shoal/collective"
)

// Allreducer is the one collective EarlyStop agrees through.
type Allreducer interface {
	Allreduce(ctx context.Context, buf []float32, op collective.Op) error
}

// EarlyStop ends a run once rank 0 measures a target test accuracy.
//
// Rank 0 evaluates every Every steps with Measure. In a PS run (Comm nil)
// it stops alone and whoever launched the workers tells the others; in a
// ring, every rank takes part in each decision through an allreduce of
// rank 0's verdict over Comm, so all ranks stop after the same step and no
// collective is left half done.
type EarlyStop struct {
	// Target is the test accuracy that ends the run (0: never; rank 0
	// still measures).
	Target float64
	// Every is how many steps apart the evaluations are (>= 1).
	Every int64
	// Measure returns rank 0's test accuracy of params after steps steps.
	Measure func(ctx context.Context, steps int64, params []float32) (float64, error)
	// Comm, when set, is what the ranks agree through (ring mode).
	Comm Allreducer
}

// Apply sets cfg's Eval and EvalEvery for rank. It sets nothing when
// Every is 0, nor for a rank other than 0 that has no part to play (no
// Comm, or no Target).
func (e EarlyStop) Apply(cfg *Config, rank int) {
	agreeing := e.Comm != nil && e.Target > 0
	if e.Every < 1 || (rank != 0 && !agreeing) {
		return
	}
	flag := make([]float32, 1)
	decide := func(ctx context.Context, reached bool) error {
		if agreeing {
			flag[0] = 0
			if reached {
				flag[0] = 1
			}
			if err := e.Comm.Allreduce(ctx, flag, collective.Max); err != nil {
				return fmt.Errorf("agreeing whether to stop: %w", err)
			}
			reached = flag[0] > 0
		}
		if reached {
			return fmt.Errorf("test accuracy reached %g: %w", e.Target, ErrStop)
		}
		return nil
	}
	cfg.EvalEvery = e.Every
	if rank != 0 {
		cfg.Eval = func(ctx context.Context, _ int64, _ []float32) error { return decide(ctx, false) }
		return
	}
	cfg.Eval = func(ctx context.Context, steps int64, params []float32) error {
		acc, err := e.Measure(ctx, steps, params)
		if err != nil {
			return err
		}
		return decide(ctx, e.Target > 0 && acc >= e.Target)
	}
}
