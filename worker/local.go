package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/shoalml/shoal/optim"
)

// Local is low-communication training through parameter servers (DiLoCo,
// Douillard et al. 2023): the worker takes H steps with an inner
// optimizer of its own on its own copy of the weights, then hands the
// pseudo-gradient Δ = θ_pulled − θ_local to a parameter-server strategy
// (Sync or Async) as one step's gradient, whose push-pull brings the new
// global weights; the shards' optimizer is the outer one
// (ps.Config.LocalSteps). The inner strategy counts outer steps: its
// step r is the worker's steps r·H to r·H+H−1, and a run whose length is
// no multiple of H ends with a shorter round.
//
// The inner optimizer's state stays on the worker: it is passed in, so a
// worker that joins again (psclient.Rejoining) keeps it.
type Local struct {
	inner Strategy
	opt   *optim.Optimizer
	h     int64
	// anchor holds the weights the round began from (θ_pulled); delta
	// the pseudo-gradient sent.
	anchor, delta []float32
	// inRound: the round's weights were pulled into anchor.
	inRound bool
	// inRoundStart: the last Params pulled (so LastWait is the pull's).
	inRoundStart bool
	lastStep     int64 // the worker's last step (-1: not known)
}

var (
	_ Strategy     = (*Local)(nil)
	_ WaitReporter = (*Local)(nil)
	_ LastStepper  = (*Local)(nil)
	_ Starter      = (*Local)(nil)
	_ FinalPuller  = (*Local)(nil)
)

// NewLocal returns the strategy that takes h local steps with opt
// between exchanges through inner; opt's length is the vector's.
func NewLocal(inner Strategy, opt *optim.Optimizer, h int) (*Local, error) {
	if h < 1 {
		return nil, fmt.Errorf("local steps %d: want >= 1", h)
	}
	n := opt.Len()
	return &Local{inner: inner, opt: opt, h: int64(h), anchor: make([]float32, n), delta: make([]float32, n), lastStep: -1}, nil
}

// Round is the outer step (the inner strategy's step) that the worker's
// step belongs to.
func (l *Local) Round(step int64) int64 { return step / l.h }

// SetLastStep tells the inner strategy which outer step is the last: the
// round of the worker's last step.
func (l *Local) SetLastStep(step int64) {
	l.lastStep = step
	if ls, ok := l.inner.(LastStepper); ok {
		ls.SetLastStep(l.Round(step))
	}
}

// FinalPull is the inner strategy's: after the last round's push, the
// pull that reads the weights of the run's last outer step.
func (l *Local) FinalPull() (PullArgs, bool) {
	if fp, ok := l.inner.(FinalPuller); ok {
		return fp.FinalPull()
	}
	return PullArgs{}, false
}

// StartAt makes a worker that joins late begin at step, which the caller
// computed from the shards' outer step (a multiple of H).
func (l *Local) StartAt(step int64) {
	if st, ok := l.inner.(Starter); ok {
		st.StartAt(l.Round(step))
	}
}

// LastWait is how long the last pull waited for other workers: the inner
// strategy's, at the start of a round; zero within one.
func (l *Local) LastWait() time.Duration {
	if wr, ok := l.inner.(WaitReporter); ok && l.inRoundStart {
		return wr.LastWait()
	}
	return 0
}

// Params pulls the global weights at the start of a round (or takes those
// the last round's push-pull brought) and keeps them as the round's
// anchor; within a round params holds the worker's own weights already.
func (l *Local) Params(ctx context.Context, step int64, params []float32) error {
	l.inRoundStart = false
	if l.inRound && step%l.h != 0 {
		return nil
	}
	if err := l.inner.Params(ctx, l.Round(step), params); err != nil {
		return err
	}
	copy(l.anchor, params)
	l.inRound, l.inRoundStart = true, true
	return nil
}

// Apply takes one inner optimizer step on params and, at the end of a
// round, hands the inner strategy the round's pseudo-gradient; its
// push-pull writes the new global weights into params.
func (l *Local) Apply(ctx context.Context, step int64, params, grads []float32) error {
	if err := l.opt.Step(params, grads); err != nil {
		return fmt.Errorf("local step %d: %w", step, err)
	}
	if (step+1)%l.h != 0 && step != l.lastStep {
		return nil
	}
	for i, a := range l.anchor {
		l.delta[i] = a - params[i]
	}
	l.inRound = false
	return l.inner.Apply(ctx, l.Round(step), params, l.delta)
}

// Finish finishes the inner strategy. A round cut short by an early stop
// is not sent: its steps are lost, as a dead worker's.
func (l *Local) Finish(ctx context.Context) error { return l.inner.Finish(ctx) }
