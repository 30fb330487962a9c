package worker

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Sync is synchronous SGD through parameter servers: each step's gradient
// is pushed for the step the weights were pulled at, the shards average
// the workers' gradients and apply them once, and the next pull waits on
// each shard until it has applied the step this worker pushed there.
type Sync struct {
	ps     ParameterServers
	worker int64
	clocks []int64 // of the last pull: the step of each shard
	next   []int64 // per shard, the step the next pull waits for
	// Dropped counts pushes that shards dropped as a backup worker's late
	// gradient.
	Dropped int64
	waited  time.Duration // by the last pull
	// prefetched: the last Apply's push-pull wrote the next step's
	// weights into params.
	prefetched bool
	lastStep   int64 // the step after which no weights are wanted (-1: not known)
	// final, once the last step is pushed: per shard, the clock at which
	// that shard will have applied the run's last step (FinalPull).
	final []int64
	// complete: the last pull came from past the run's last step (see
	// worker.ErrRunComplete).
	complete bool
}

var (
	_ Strategy     = (*Sync)(nil)
	_ WaitReporter = (*Sync)(nil)
	_ LastStepper  = (*Sync)(nil)
	_ Starter      = (*Sync)(nil)
	_ FinalPuller  = (*Sync)(nil)
)

// NewSync returns the synchronous strategy of worker over shards shards.
func NewSync(ps ParameterServers, worker int64, shards int) *Sync {
	return &Sync{ps: ps, worker: worker, next: make([]int64, shards), lastStep: -1}
}

// SetLastStep says which step is the worker's last: its push fetches no
// weights after it. The Worker calls it before its first step.
func (s *Sync) SetLastStep(step int64) { s.lastStep = step }

// StartAt makes the first pull wait for step: a worker that joins a run
// under way enters at the step boundary its shards named.
func (s *Sync) StartAt(step int64) {
	for i := range s.next {
		s.next[i] = step
	}
}

// Params pulls the weights of the step after the one last pushed, unless
// the push-pull of the last step brought them.
func (s *Sync) Params(ctx context.Context, _ int64, params []float32) error {
	if s.complete {
		return fmt.Errorf("worker %d: %w (the shards are at step %d; the run has %d)", s.worker, ErrRunComplete, slices.Min(s.clocks), s.lastStep+1)
	}
	if s.prefetched {
		s.prefetched, s.waited = false, 0
		return nil
	}
	s.waited = 0
	clocks, err := s.ps.Pull(ctx, PullArgs{WorkerID: s.worker, Steps: s.next, Waited: &s.waited}, params)
	if err != nil {
		return err
	}
	s.clocks = clocks
	// A worker that starts (or pulls) after the others finished finds the
	// shards past the run's last step: a push now would open a step no one
	// else will join, and its pull would wait out --max-wait.
	if s.pastLastStep() {
		return fmt.Errorf("worker %d: %w (the shards are at step %d; the run has %d)", s.worker, ErrRunComplete, slices.Min(s.clocks), s.lastStep+1)
	}
	return nil
}

// FinalPull is the pull that reads the run's final weights once the last
// step is pushed: as this worker, waiting on each shard until it applied
// that step (the other workers' last pushes too, or their backups), so
// rank 0 evaluates the run's end and not the moment it finished itself.
// false before the last step is pushed (a run stopped early).
func (s *Sync) FinalPull() (PullArgs, bool) {
	if s.final == nil {
		return PullArgs{}, false
	}
	return PullArgs{WorkerID: s.worker, Steps: slices.Clone(s.final)}, true
}

// pastLastStep says the shards, as last read, applied every step of a run
// of lastStep+1 steps.
func (s *Sync) pastLastStep() bool { return s.lastStep >= 0 && slices.Min(s.clocks) > s.lastStep }

// LastWait is how long the last pull was held by the shards (WaitReporter).
func (s *Sync) LastWait() time.Duration { return s.waited }

// Apply pushes the gradient for the step the weights came from and, in
// the same round trip, reads the weights of the next step into params once
// each shard has applied this one.
func (s *Sync) Apply(ctx context.Context, step int64, params, grads []float32) error {
	s.waited = 0
	for i, c := range s.clocks {
		s.next[i] = c + 1
	}
	// With backup workers the shards may end the run at different times:
	// a push to one that applied every step of it would open a step no
	// one else joins (it waits out --max-wait, or is applied past the
	// end), so the shards past the last step are left out.
	var skip []bool
	for i, c := range s.clocks {
		if s.lastStep >= 0 && c > s.lastStep {
			if skip == nil {
				skip = make([]bool, len(s.clocks))
			}
			skip[i] = true
		}
	}
	push := PushArgs{WorkerID: s.worker, Step: step, Clocks: s.clocks, Grads: grads, Skip: skip}
	if step == s.lastStep {
		res, err := s.ps.Push(ctx, push)
		if err != nil {
			return err
		}
		s.Dropped += int64(res.Dropped)
		// A shard left out was past the last step already: as it was.
		s.final = slices.Clone(s.next)
		for i := range skip {
			if skip[i] {
				s.final[i] = s.clocks[i]
			}
		}
		return nil
	}
	res, err := s.ps.PushPull(ctx, PushPullArgs{PushArgs: push, Steps: s.next, Dst: params, Waited: &s.waited})
	if err != nil {
		return err
	}
	s.Dropped += int64(res.Dropped)
	for i := range skip {
		if skip[i] {
			res.PullClocks[i] = s.clocks[i] // not read again: as it was
		}
	}
	s.clocks, s.prefetched = res.PullClocks, true
	// Every step of a run of lastStep+1 steps is applied once the shards
	// are past it; a worker whose late pushes were dropped (backup
	// workers) gets there before its own step count runs out.
	s.complete = s.pastLastStep()
	return nil
}

// Finish has nothing pending: every step was pushed.
func (s *Sync) Finish(context.Context) error { return nil }
