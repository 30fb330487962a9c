package worker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/worker"
)

// accuracies is a Measure that returns its values one after the other and
// counts its calls.
type accuracies struct {
	v     []float64
	calls int
}

func (a *accuracies) measure(context.Context, int64, []float32) (float64, error) {
	a.calls++
	return a.v[a.calls-1], nil
}

// TestEarlyStopAlone: in a PS run rank 0 stops alone once it measures the
// target; the other ranks get no Eval (the launcher tells them).
func TestEarlyStopAlone(t *testing.T) {
	acc := &accuracies{v: []float64{0.5, 0.89, 0.9}}
	var cfg0, cfg1 worker.Config
	es := worker.EarlyStop{Target: 0.9, Every: 5, Measure: acc.measure}
	es.Apply(&cfg0, 0)
	es.Apply(&cfg1, 1)
	assert.Nil(t, cfg1.Eval)
	require.NotNil(t, cfg0.Eval)
	assert.Equal(t, int64(5), cfg0.EvalEvery)
	require.NoError(t, cfg0.Eval(ctxT(t), 5, nil))
	require.NoError(t, cfg0.Eval(ctxT(t), 10, nil))
	err := cfg0.Eval(ctxT(t), 15, nil)
	assert.ErrorIs(t, err, worker.ErrStop)
	assert.ErrorContains(t, err, "test accuracy reached 0.9")

	// Without a target rank 0 only measures; without Every, nothing.
	acc = &accuracies{v: []float64{1}}
	var cfg worker.Config
	worker.EarlyStop{Every: 5, Measure: acc.measure}.Apply(&cfg, 0)
	assert.NoError(t, cfg.Eval(ctxT(t), 5, nil))
	assert.Equal(t, 1, acc.calls)
	cfg = worker.Config{}
	worker.EarlyStop{Target: 0.5, Measure: acc.measure}.Apply(&cfg, 0)
	assert.Nil(t, cfg.Eval)

	// A failed measurement ends the run with its error, not a stop.
	boom := errors.New("test set unreadable")
	cfg = worker.Config{}
	worker.EarlyStop{Target: 0.5, Every: 1, Measure: func(context.Context, int64, []float32) (float64, error) { return 0, boom }}.Apply(&cfg, 0)
	err = cfg.Eval(ctxT(t), 1, nil)
	assert.ErrorIs(t, err, boom)
	assert.NotErrorIs(t, err, worker.ErrStop)
}

// TestEarlyStopAgreed: in a ring every rank takes part in each decision,
// and all stop at the evaluation where rank 0 measures the target.
func TestEarlyStopAgreed(t *testing.T) {
	const n = 3
	group := collective.NewMemGroup(n)
	acc := &accuracies{v: []float64{0.2, 0.95}}
	evals := make([]func(context.Context, int64, []float32) error, n)
	for r := range n {
		comm, err := collective.New(group[r], collective.DefaultConfig())
		require.NoError(t, err)
		defer group[r].Close()
		var cfg worker.Config
		worker.EarlyStop{Target: 0.9, Every: 2, Measure: acc.measure, Comm: comm}.Apply(&cfg, r)
		require.NotNil(t, cfg.Eval, "rank %d takes part", r)
		evals[r] = cfg.Eval
	}
	for i, wantStop := range []bool{false, true} {
		errs := make(chan error, n)
		for r := range n {
			go func() { errs <- evals[r](ctxT(t), int64(2*(i+1)), nil) }()
		}
		for range n {
			err := <-errs
			if wantStop {
				assert.ErrorIs(t, err, worker.ErrStop)
			} else {
				assert.NoError(t, err)
			}
		}
	}
	assert.Equal(t, 2, acc.calls, "only rank 0 measures")
}
