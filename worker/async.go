package worker

import (
	"context"
	"fmt"

	"github.com/shoalml/shoal/client"
)

// ParameterServers is what the parameter-server strategies need from the
// client library; *client.Client implements it.
type ParameterServers interface {
	Pull(ctx context.Context, dst []float32) (client.Clocks, error)
	Push(ctx context.Context, args client.PushArgs) (client.PushResult, error)
}

var _ ParameterServers = (*client.Client)(nil)

// AsyncConfig configures Downpour SGD.
type AsyncConfig struct {
	// WorkerID identifies the worker to the servers (its rank).
	WorkerID int64
	// PushEvery: push the summed gradients every PushEvery steps (Downpour's
	// n_push; default 1).
	PushEvery int
	// FetchEvery: pull fresh weights every FetchEvery steps (n_fetch;
	// default 1). In between, steps compute on the weights last pulled.
	FetchEvery int
}

// Async is Downpour SGD: pull every FetchEvery steps, push every PushEvery
// steps, and the servers apply each push at once.
type Async struct {
	ps     ParameterServers
	cfg    AsyncConfig
	clocks client.Clocks
	// acc sums the gradients of the steps not pushed yet (PushEvery > 1).
	acc     []float32
	pending int
	last    int64 // the last step accumulated
	// Staleness counts pushes by the largest staleness any shard saw.
	Staleness map[int64]int64
}

var _ Strategy = (*Async)(nil)

// NewAsync returns the Downpour strategy for a vector of n floats.
func NewAsync(ps ParameterServers, n int, cfg AsyncConfig) (*Async, error) {
	if cfg.PushEvery == 0 {
		cfg.PushEvery = 1
	}
	if cfg.FetchEvery == 0 {
		cfg.FetchEvery = 1
	}
	if cfg.PushEvery < 1 || cfg.FetchEvery < 1 {
		return nil, fmt.Errorf("async: push every %d, fetch every %d steps: want >= 1", cfg.PushEvery, cfg.FetchEvery)
	}
	a := &Async{ps: ps, cfg: cfg, Staleness: map[int64]int64{}}
	if cfg.PushEvery > 1 {
		a.acc = make([]float32, n)
	}
	return a, nil
}

// Params pulls the weights on every FetchEvery-th step.
func (a *Async) Params(ctx context.Context, step int64, params []float32) error {
	if a.clocks != nil && step%int64(a.cfg.FetchEvery) != 0 {
		return nil
	}
	clocks, err := a.ps.Pull(ctx, params)
	if err != nil {
		return err
	}
	a.clocks = clocks
	return nil
}

// Apply pushes the gradient, or adds it to the ones pending.
func (a *Async) Apply(ctx context.Context, step int64, grads []float32) error {
	a.last = step
	if a.acc == nil {
		return a.push(ctx, step, grads)
	}
	for i, g := range grads {
		a.acc[i] += g
	}
	a.pending++
	if a.pending < a.cfg.PushEvery {
		return nil
	}
	return a.flush(ctx)
}

// Finish pushes what is still pending.
func (a *Async) Finish(ctx context.Context) error {
	if a.pending == 0 {
		return nil
	}
	return a.flush(ctx)
}

func (a *Async) flush(ctx context.Context) error {
	if err := a.push(ctx, a.last, a.acc); err != nil {
		return err
	}
	clear(a.acc)
	a.pending = 0
	return nil
}

func (a *Async) push(ctx context.Context, step int64, grads []float32) error {
	res, err := a.ps.Push(ctx, client.PushArgs{WorkerID: a.cfg.WorkerID, Step: step, Clocks: a.clocks, Grads: grads})
	if err != nil {
		return err
	}
	var worst int64
	for _, s := range res.Staleness {
		worst = max(worst, s)
	}
	a.Staleness[worst]++
	return nil
}
