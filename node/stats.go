package node

import (
	"context"
	"io"
	"time"

	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/worker"
)

// hooks sets cfg's OnStep and Eval as s says; log collects the step
// times, and rank 0's evaluations go to out as eval events. With StopAt
// the run ends once rank 0 measures the target; comm, when set (ring),
// is what the ranks agree through (worker.EarlyStop).
func (s Stats) hooks(cfg *worker.Config, log *launch.StepLog, rank int, model nn.Model, test data.Dataset, out io.Writer, comm worker.Allreducer) {
	if s.Times {
		cfg.OnStep = func(_ int64, t worker.StepTimes) { log.Add(t) }
	}
	// The curve's clock leaves out the evaluations themselves.
	start := time.Now()
	var spent time.Duration
	measure := func(ctx context.Context, steps int64, params []float32) (float64, error) {
		t0 := time.Now()
		at := t0.Sub(start) - spent
		ev, err := worker.Evaluate(ctx, model, params, test, 1000)
		spent += time.Since(t0)
		if err != nil {
			return 0, err
		}
		launch.Emit(out, launch.Event{Event: launch.Eval, Rank: rank, Steps: steps, Seconds: at.Seconds(), TestAccuracy: ev.Accuracy, TestLoss: ev.Loss, TestSamples: ev.Samples})
		return ev.Accuracy, nil
	}
	worker.EarlyStop{Target: s.StopAt, Every: s.EvalEvery, Measure: measure, Comm: comm}.Apply(cfg, rank)
}
