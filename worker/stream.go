package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/pscall"
	"github.com/shoalml/shoal/shard"
)

// StreamConfig configures Streaming (streaming fragments).
type StreamConfig struct {
	// LocalSteps is H: each fragment is synchronised every H steps.
	LocalSteps int
	// Fragments is F, a divisor of H: the vector is cut into F fragments
	// of whole rows of the plan (shard.Plan.Fragment), and fragment f is
	// synchronised at the end of the steps t with t+1 = (f+1)·H/F + k·H,
	// so one fragment goes out every H/F steps, in turn.
	Fragments int
	// Overlap is τ, the steps the worker takes while a fragment's
	// push-pull is in flight, 0..H/F−1: the exchange that goes out after
	// step t is merged before step t+τ+1 (waiting for it there if it is
	// not back), so at most one is in flight. 0 waits for each exchange
	// right after its push, as DiLoCo does.
	Overlap int
	// Mix is α in [0, 1], what the merge keeps of the worker's own
	// fragment: θ_f ← α·θ_f + (1−α)·θ̃_f, θ̃_f the global fragment pulled
	// (the paper's mixing factor). 0 takes the global fragment whole,
	// dropping the τ steps' change to the fragment; above 0 those steps
	// count by α. The fragment's next pseudo-gradient is taken from θ̃_f.
	Mix float64
}

// DefaultStreamConfig is one fragment exchanged every h/f steps with one
// step of overlap (none where h/f is 1) and half of the worker's own
// fragment kept at the merge.
func DefaultStreamConfig(h, f int) StreamConfig {
	c := StreamConfig{LocalSteps: h, Fragments: f, Mix: 0.5}
	if f > 0 && h/f > 1 {
		c.Overlap = 1
	}
	return c
}

// Validate checks c against the vector's plan.
func (c StreamConfig) Validate(plan shard.Plan) error {
	switch {
	case c.LocalSteps < 1:
		return fmt.Errorf("streaming fragments: %d local steps, want >= 1", c.LocalSteps)
	case c.Fragments < 1 || c.Fragments > c.LocalSteps:
		return fmt.Errorf("streaming fragments: %d fragments with %d local steps: want 1..%d (at most one fragment a step)", c.Fragments, c.LocalSteps, c.LocalSteps)
	case c.LocalSteps%c.Fragments != 0:
		return fmt.Errorf("streaming fragments: %d fragments with %d local steps: want a divisor of the local steps (one fragment every local-steps/fragments steps)", c.Fragments, c.LocalSteps)
	case c.Overlap < 0 || c.Overlap >= c.LocalSteps/c.Fragments:
		return fmt.Errorf("streaming fragments: overlap of %d steps: want 0..%d (less than the %d steps between two fragments' exchanges)", c.Overlap, c.LocalSteps/c.Fragments-1, c.LocalSteps/c.Fragments)
	case !(c.Mix >= 0 && c.Mix <= 1):
		return fmt.Errorf("streaming fragments: mix %v: want 0..1 (the share of the worker's own fragment kept at the merge)", c.Mix)
	}
	return plan.CheckFragments(c.Fragments)
}

// Streaming is Streaming DiLoCo (Douillard et al. 2025): local steps as
// in Local, but the vector is synchronised one fragment at a time on a
// staggered schedule (StreamConfig.Fragments), each exchange sending and
// receiving only its fragment, and the worker goes on training while it
// is in flight (StreamConfig.Overlap), then merges the pulled fragment
// into its own (StreamConfig.Mix). The inner strategy (Sync or Async,
// built over the FragmentServers given here) counts exchanges: its step
// e is the exchange after the worker's step (e+1)·H/F−1, of fragment
// e mod F, which is the shards' clock.
//
// The run ends with the exchange its last step falls in, pushed without
// a pull (fragment ⌊last/(H/F)⌋ mod F, with the steps since that
// fragment's last exchange); the other fragments' steps since theirs
// are not sent, as a round cut short in Local.
//
// The in-flight exchange runs on a goroutine of its own, which reads
// only the pseudo-gradient and writes only the pulled fragment, both
// Streaming's; Params, Apply and Finish wait for it before they touch
// either, and Finish always waits, so it never outlives the run.
type Streaming struct {
	inner Strategy
	ps    *FragmentServers
	opt   *optim.Optimizer
	cfg   StreamConfig
	p     int64 // H/F: steps between exchanges
	frags []shard.Range
	// anchor holds, per fragment, the global weights its next
	// pseudo-gradient is taken from; delta the pseudo-gradient in flight
	// (its fragment's part); global the weights its pull brings.
	anchor, delta, global []float32
	started               bool
	inflight              chan error
	inflightFrag          int
	mergeAt               int64 // the step before which the exchange in flight is merged
	lastStep              int64 // -1: not known
	// Exchanges records each exchange's (step, fragment) when Record is
	// set (tests); it is not safe to read while Apply runs.
	Exchanges []Exchange
	Record    bool
}

// Exchange is one fragment exchange: after the worker's Step, of
// Fragment.
type Exchange struct {
	Step     int64
	Fragment int
}

var (
	_ Strategy     = (*Streaming)(nil)
	_ WaitReporter = (*Streaming)(nil)
	_ LastStepper  = (*Streaming)(nil)
	_ FinalPuller  = (*Streaming)(nil)
	_ Starter      = (*Streaming)(nil)
)

// NewStreaming returns the streaming strategy over inner, whose pushes go
// through ps, for the vector of plan; opt is the inner optimizer.
func NewStreaming(inner Strategy, ps *FragmentServers, opt *optim.Optimizer, plan shard.Plan, cfg StreamConfig) (*Streaming, error) {
	if err := cfg.Validate(plan); err != nil {
		return nil, err
	}
	if opt.Len() != plan.VectorLen {
		return nil, fmt.Errorf("streaming fragments: an optimizer of %d floats for a vector of %d", opt.Len(), plan.VectorLen)
	}
	s := &Streaming{inner: inner, ps: ps, opt: opt, cfg: cfg, p: int64(cfg.LocalSteps / cfg.Fragments), lastStep: -1}
	for f := range cfg.Fragments {
		r, err := plan.Fragment(cfg.Fragments, f)
		if err != nil {
			return nil, err
		}
		s.frags = append(s.frags, r)
	}
	n := plan.VectorLen
	s.anchor, s.delta, s.global = make([]float32, n), make([]float32, n), make([]float32, n)
	return s, nil
}

// Fragment returns the range of the vector fragment f covers.
func (s *Streaming) Fragment(f int) (shard.Range, error) {
	if f < 0 || f >= len(s.frags) {
		return shard.Range{}, fmt.Errorf("fragment %d: want 0..%d (%d fragments)", f, len(s.frags)-1, len(s.frags))
	}
	return s.frags[f], nil
}

// exchange is the exchange whose window holds step: the one that goes
// out after step ⌊step/P⌋·P+P−1.
func (s *Streaming) exchange(step int64) int64 { return step / s.p }

// SetLastStep tells the inner strategy that the exchange of the last
// step is its last.
func (s *Streaming) SetLastStep(step int64) {
	s.lastStep = step
	if ls, ok := s.inner.(LastStepper); ok {
		ls.SetLastStep(s.exchange(step))
	}
}

// FinalPull is the inner strategy's: the shards' clock counts
// exchanges, so waiting for the last one waits for every earlier one.
func (s *Streaming) FinalPull() (PullArgs, bool) {
	if fp, ok := s.inner.(FinalPuller); ok {
		return fp.FinalPull()
	}
	return PullArgs{}, false
}

// StartAt makes a worker that joins late begin at step, which the caller
// computed from the shards' clock (exchanges, H/F steps each).
func (s *Streaming) StartAt(step int64) {
	if st, ok := s.inner.(Starter); ok {
		st.StartAt(s.exchange(step))
	}
}

// LastWait is the inner strategy's, on the first pull; zero after.
func (s *Streaming) LastWait() time.Duration {
	if wr, ok := s.inner.(WaitReporter); ok && !s.started {
		return wr.LastWait()
	}
	return 0
}

// Params pulls the whole vector on the first step, every fragment's
// anchor; later, before step mergeAt, it waits for the exchange in flight
// and merges its fragment.
func (s *Streaming) Params(ctx context.Context, step int64, params []float32) error {
	if !s.started {
		if err := s.inner.Params(ctx, s.exchange(step), params); err != nil {
			return err
		}
		copy(s.anchor, params)
		s.started = true
		return nil
	}
	if s.inflight != nil && step >= s.mergeAt {
		return s.merge(params)
	}
	return nil
}

// merge waits for the exchange in flight and merges its fragment into
// params: θ_f ← α·θ_f + (1−α)·θ̃_f, and θ̃_f is the fragment's anchor.
func (s *Streaming) merge(params []float32) error {
	err := <-s.inflight
	s.inflight = nil
	if err != nil {
		return err
	}
	r := s.frags[s.inflightFrag]
	g, a, p := s.global[r.Off:r.End()], s.anchor[r.Off:r.End()], params[r.Off:r.End()]
	copy(a, g)
	if alpha := float32(s.cfg.Mix); alpha == 0 {
		copy(p, g)
	} else {
		for i, v := range g {
			p[i] = alpha*p[i] + (1-alpha)*v
		}
	}
	return nil
}

// Apply takes one inner optimizer step on params and, at the end of an
// exchange's window, sends that fragment's pseudo-gradient θ̃_f − θ_f: in
// the background with an overlap (merged by Params before step
// step+Overlap+1), at once without one, and without a pull on the last
// step.
func (s *Streaming) Apply(ctx context.Context, step int64, params, grads []float32) error {
	if err := s.opt.Step(params, grads); err != nil {
		return fmt.Errorf("local step %d: %w", step, err)
	}
	last := step == s.lastStep
	if (step+1)%s.p != 0 && !last {
		return nil
	}
	if s.inflight != nil { // the last step came before the merge
		if err := s.merge(params); err != nil {
			return err
		}
	}
	e := s.exchange(step)
	f := int(e % int64(len(s.frags)))
	r := s.frags[f]
	for i := r.Off; i < r.End(); i++ {
		s.delta[i] = s.anchor[i] - params[i]
	}
	if s.Record {
		s.Exchanges = append(s.Exchanges, Exchange{Step: step, Fragment: f})
	}
	s.ps.span = pscall.Span{Off: r.Off, End: r.End()}
	done := make(chan error, 1)
	s.inflight, s.inflightFrag, s.mergeAt = done, f, step+1+int64(s.cfg.Overlap)
	if last || s.cfg.Overlap == 0 {
		done <- s.inner.Apply(ctx, e, s.global, s.delta)
		if last {
			s.inflight = nil
			return <-done
		}
		return s.merge(params)
	}
	go func() { done <- s.inner.Apply(ctx, e, s.global, s.delta) }()
	return nil
}

// Finish waits for the exchange in flight, if any (its pull is not
// merged: the run is over), and finishes the inner strategy.
func (s *Streaming) Finish(ctx context.Context) error {
	var err error
	if s.inflight != nil {
		err = <-s.inflight
		s.inflight = nil
	}
	if ferr := s.inner.Finish(ctx); err == nil {
		err = ferr
	}
	return err
}

// FragmentServers is ParameterServers whose pushes and push-pulls cover
// the span Streaming sets before each exchange (pscall.PushArgs.Span);
// pulls read the whole vector. Streaming sets the span only while no
// call is under way.
type FragmentServers struct {
	ps   ParameterServers
	span pscall.Span
}

var _ ParameterServers = (*FragmentServers)(nil)

// NewFragmentServers wraps ps.
func NewFragmentServers(ps ParameterServers) *FragmentServers { return &FragmentServers{ps: ps} }

// Pull is ps.Pull, of the whole vector.
func (f *FragmentServers) Pull(ctx context.Context, args PullArgs, dst []float32) ([]int64, error) {
	return f.ps.Pull(ctx, args, dst)
}

// Push is ps.Push of the current span.
func (f *FragmentServers) Push(ctx context.Context, args PushArgs) (PushResult, error) {
	args.Span = f.span
	return f.ps.Push(ctx, args)
}

// PushPull is ps.PushPull of the current span.
func (f *FragmentServers) PushPull(ctx context.Context, args PushPullArgs) (PushPullResult, error) {
	args.Span = f.span
	return f.ps.PushPull(ctx, args)
}
