package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/shoalml/shoal/consistency"
)

// AsyncConfig configures Downpour SGD.
type AsyncConfig struct {
	// WorkerID identifies the worker to the servers (its rank).
	WorkerID int64
	// PushEvery: push the summed gradients every PushEvery steps (Downpour's
	// n_push; default 1). With async servers only: an SSP shard counts a
	// worker's progress in pushed steps, so a worker that pushes less
	// often than every staleness+1 steps waits for its own push (and
	// times out). NewAsync cannot tell the servers' mode; shoal worker
	// refuses --push-every and --fetch-every other than 1 outside async.
	PushEvery int
	// FetchEvery: pull fresh weights every FetchEvery steps (n_fetch;
	// default 1). In between, steps compute on the weights last pulled.
	FetchEvery int
	// Overlap pushes each step's gradient in the background while the
	// next step's weights are pulled, so both directions of the worker's
	// and the servers' links carry traffic at once (BytePS's argument for
	// parameter servers). The pull may then miss this worker's own last
	// push: up to one more update of staleness. Needs PushEvery and
	// FetchEvery 1. The push sends a copy of the gradient (one more
	// vector of memory, one copy a step), so Apply's caller may reuse its
	// buffer as soon as Apply returns.
	Overlap bool
	// Record keeps every push's PushRecord in Async.Pushes, for replaying
	// the run's schedule (package emulate).
	Record bool
}

// PushRecord is one push as shard 0 saw it: the step, the clock of the
// weights its gradient was computed on, and its staleness (how many
// updates the shard had applied since that clock). Clock + Staleness is
// the update the push became (counting from 0), and the shard's order
// of reads and pushes follows from every worker's records.
type PushRecord struct {
	Step      int64 `json:"step"`
	Clock     int64 `json:"clock"`
	Staleness int64 `json:"staleness"`
}

// Async is Downpour SGD: pull every FetchEvery steps, push every PushEvery
// steps, and the servers apply each push at once. It also drives SSP: its
// pulls name the step about to be computed, and SSP servers hold them while
// that step is too far ahead of the slowest worker.
type Async struct {
	ps     ParameterServers
	cfg    AsyncConfig
	clocks []int64
	steps  []int64 // the step of the pull, once per shard
	// acc sums the gradients of the steps not pushed yet (PushEvery > 1).
	acc     []float32
	pending int
	last    int64 // the last step accumulated
	// Staleness counts pushes by the largest staleness any shard saw.
	Staleness consistency.Staleness
	// Pushes has each push's record, in order, when AsyncConfig.Record
	// is set. It is not safe to read while Apply or Finish runs.
	Pushes []PushRecord
	waited time.Duration // by the last pull
	// inflight reports the background push (Overlap); Params, Apply and
	// Finish wait for it. sending is the gradient it pushes: Apply copies
	// the caller's into it, so the caller may reuse its buffer at once.
	inflight chan error
	sending  []float32
	// prefetched: the last Apply's push-pull already wrote the weights of
	// the next step into params.
	prefetched bool
	// lastStep is the step after which no weights are wanted (-1: not
	// known).
	lastStep int64
}

var (
	_ Strategy     = (*Async)(nil)
	_ WaitReporter = (*Async)(nil)
	_ LastStepper  = (*Async)(nil)
)

// NewAsync returns the Downpour strategy for a vector of n floats.
func NewAsync(ps ParameterServers, n, shards int, cfg AsyncConfig) (*Async, error) {
	if cfg.PushEvery == 0 {
		cfg.PushEvery = 1
	}
	if cfg.FetchEvery == 0 {
		cfg.FetchEvery = 1
	}
	if cfg.PushEvery < 1 || cfg.FetchEvery < 1 {
		return nil, fmt.Errorf("async: push every %d, fetch every %d steps: want >= 1", cfg.PushEvery, cfg.FetchEvery)
	}
	if cfg.Overlap && (cfg.PushEvery != 1 || cfg.FetchEvery != 1) {
		return nil, fmt.Errorf("async: overlapping push and pull needs push every 1 and fetch every 1 step, not %d and %d", cfg.PushEvery, cfg.FetchEvery)
	}
	a := &Async{ps: ps, cfg: cfg, steps: make([]int64, shards), lastStep: -1}
	if cfg.PushEvery > 1 {
		a.acc = make([]float32, n)
	}
	if cfg.Overlap {
		a.sending = make([]float32, n)
	}
	return a, nil
}

// SetLastStep says which step is the worker's last: its push fetches no
// weights after it.
func (a *Async) SetLastStep(step int64) { a.lastStep = step }

// Params pulls the weights on every FetchEvery-th step (with Overlap,
// while the last step's push is still under way, and waits for both),
// unless the last step's push-pull already brought them.
func (a *Async) Params(ctx context.Context, step int64, params []float32) error {
	if a.prefetched {
		a.prefetched, a.waited = false, 0
		return nil
	}
	err := a.pull(ctx, step, params)
	if perr := a.waitPush(); perr != nil {
		return perr
	}
	return err
}

// waitPush waits for the background push, if any, and returns its error.
func (a *Async) waitPush() error {
	if a.inflight == nil {
		return nil
	}
	err := <-a.inflight
	a.inflight = nil
	return err
}

func (a *Async) pull(ctx context.Context, step int64, params []float32) error {
	a.waited = 0
	if a.clocks != nil && step%int64(a.cfg.FetchEvery) != 0 {
		return nil
	}
	for i := range a.steps {
		a.steps[i] = step
	}
	clocks, err := a.ps.Pull(ctx, PullArgs{WorkerID: a.cfg.WorkerID, Steps: a.steps, Waited: &a.waited}, params)
	if err != nil {
		return err
	}
	a.clocks = clocks
	return nil
}

// LastWait is how long the last pull was held by the shards (WaitReporter).
func (a *Async) LastWait() time.Duration { return a.waited }

// Apply pushes the gradient, or adds it to the ones pending. When the
// next step fetches weights, the push fetches them in the same round trip
// (a push-pull) into params. With Overlap it copies the gradient and
// pushes the copy in the background (the next Params, Apply or Finish
// waits for that push and returns its error).
func (a *Async) Apply(ctx context.Context, step int64, params, grads []float32) error {
	a.last, a.waited = step, 0
	if a.cfg.Overlap {
		if err := a.waitPush(); err != nil {
			return err
		}
		copy(a.sending, grads)
		done, clocks := make(chan error, 1), a.clocks
		a.inflight = done
		go func() { done <- a.push(ctx, step, clocks, a.sending) }()
		return nil
	}
	if a.acc != nil {
		for i, g := range grads {
			a.acc[i] += g
		}
		a.pending++
		if a.pending < a.cfg.PushEvery {
			return nil
		}
		grads = a.acc
	}
	if next := step + 1; step != a.lastStep && next%int64(a.cfg.FetchEvery) == 0 {
		if err := a.pushPull(ctx, step, grads, params); err != nil {
			return err
		}
	} else if err := a.push(ctx, step, a.clocks, grads); err != nil {
		return err
	}
	if a.acc != nil {
		clear(a.acc)
		a.pending = 0
	}
	return nil
}

// pushPull pushes grads of step and reads the weights for step+1 into
// params in one round trip.
func (a *Async) pushPull(ctx context.Context, step int64, grads, params []float32) error {
	for i := range a.steps {
		a.steps[i] = step + 1
	}
	res, err := a.ps.PushPull(ctx, PushPullArgs{
		PushArgs: PushArgs{WorkerID: a.cfg.WorkerID, Step: step, Clocks: a.clocks, Grads: grads},
		Steps:    a.steps, Dst: params, Waited: &a.waited,
	})
	if err != nil {
		return err
	}
	a.count(step, a.clocks, res.Staleness)
	a.clocks, a.prefetched = res.PullClocks, true
	return nil
}

// Finish waits for the background push and pushes what is still pending.
func (a *Async) Finish(ctx context.Context) error {
	if err := a.waitPush(); err != nil {
		return err
	}
	if a.pending == 0 {
		return nil
	}
	return a.flush(ctx)
}

func (a *Async) flush(ctx context.Context) error {
	if err := a.push(ctx, a.last, a.clocks, a.acc); err != nil {
		return err
	}
	clear(a.acc)
	a.pending = 0
	return nil
}

// push sends grads of step, computed on weights of clocks.
func (a *Async) push(ctx context.Context, step int64, clocks []int64, grads []float32) error {
	res, err := a.ps.Push(ctx, PushArgs{WorkerID: a.cfg.WorkerID, Step: step, Clocks: clocks, Grads: grads})
	if err != nil {
		return err
	}
	a.count(step, clocks, res.Staleness)
	return nil
}

// count counts the push of step, computed on weights of clocks, by the
// largest staleness any shard saw, and records it (Record).
func (a *Async) count(step int64, clocks, per []int64) {
	var worst int64
	for _, s := range per {
		worst = max(worst, s)
	}
	a.Staleness.Add(worst)
	if a.cfg.Record && len(clocks) > 0 && len(per) > 0 {
		a.Pushes = append(a.Pushes, PushRecord{Step: step, Clock: clocks[0], Staleness: per[0]})
	}
}
