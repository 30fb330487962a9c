package emulate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/sim"
	"github.com/shoalml/shoal/worker"
)

// turns hands the shard to the workers in the schedule's order: a call
// waits until the next op of the schedule is its own, and runs under mu,
// so the shard sees the pushes and reads in exactly that order.
type turns struct {
	mu   sync.Mutex
	cond *sync.Cond
	ops  []sim.Op
	pos  int // the next op
	// live workers have not returned from Run; asks holds what each
	// waiting one waits for. When every live worker waits and none is
	// next, the workers and the schedule disagree: err says how.
	live int
	asks map[int]sim.Op
	err  error

	srv    *ps.Server
	ranges []shard.Range
	steps  int64 // each worker's; reads for later steps are not scheduled
	// evaluate runs once the shard's clock reaches evalAt, then every
	// `every` updates.
	evaluate      func(context.Context) error
	evalAt, every int64
}

// take waits, under t.mu, until op is the next in the schedule, and
// moves past it.
func (t *turns) take(ctx context.Context, op sim.Op) error {
	t.asks[op.Worker] = op
	defer delete(t.asks, op.Worker)
	for {
		switch {
		case t.err != nil:
			return t.err
		case ctx.Err() != nil:
			return ctx.Err()
		case t.pos < len(t.ops) && t.ops[t.pos] == op:
			t.pos++
			t.cond.Broadcast()
			return nil
		case len(t.asks) == t.live && !t.nextAsked():
			t.err = t.disagreement()
			t.cond.Broadcast()
			return t.err
		}
		t.cond.Wait()
	}
}

// nextAsked says whether a waiting worker waits for the next op.
func (t *turns) nextAsked() bool {
	if t.pos == len(t.ops) {
		return false
	}
	next := t.ops[t.pos]
	return t.asks[next.Worker] == next
}

// disagreement describes a schedule that no waiting worker can follow.
func (t *turns) disagreement() error {
	next := "its end"
	if t.pos < len(t.ops) {
		next = describe(t.ops[t.pos])
	}
	var asks []string
	for _, w := range slices.Sorted(maps.Keys(t.asks)) {
		asks = append(asks, describe(t.asks[w]))
	}
	return fmt.Errorf("emulate: the schedule and the workers disagree (a bug): at op %d of %d the schedule has %s next, and every worker waits for something else: %s",
		t.pos, len(t.ops), next, strings.Join(asks, "; "))
}

func describe(op sim.Op) string {
	if op.Read {
		return fmt.Sprintf("worker %d's read for step %d", op.Worker, op.Step)
	}
	return fmt.Sprintf("worker %d's push of step %d", op.Worker, op.Step)
}

// leave says a worker returned from Run.
func (t *turns) leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.live--
	t.cond.Broadcast()
}

// failure is the run's error: the first worker's that is not a
// consequence of another's, or the schedule left unfinished.
func (t *turns) failure(errs []error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	var first error
	for _, err := range errs {
		if err != nil && (first == nil || errors.Is(first, context.Canceled) && !errors.Is(err, context.Canceled)) {
			first = err
		}
	}
	if first != nil {
		return fmt.Errorf("emulate: %w", first)
	}
	if t.pos != len(t.ops) {
		return fmt.Errorf("emulate: the workers finished at op %d of the schedule's %d (%s next): a bug", t.pos, len(t.ops), describe(t.ops[t.pos]))
	}
	return nil
}

// gate is worker w's ParameterServers: the shard, in turn.
type gate struct {
	t       *turns
	w       int
	session ps.Session // w's on the shard
}

var _ worker.ParameterServers = (*gate)(nil)

func (g *gate) Pull(ctx context.Context, args worker.PullArgs, dst []float32) ([]int64, error) {
	g.t.mu.Lock()
	defer g.t.mu.Unlock()
	return g.read(ctx, args.Steps[0], dst)
}

func (g *gate) Push(ctx context.Context, args worker.PushArgs) (worker.PushResult, error) {
	g.t.mu.Lock()
	defer g.t.mu.Unlock()
	return g.push(ctx, args)
}

func (g *gate) PushPull(ctx context.Context, args worker.PushPullArgs) (worker.PushPullResult, error) {
	g.t.mu.Lock()
	defer g.t.mu.Unlock()
	res, err := g.push(ctx, args.PushArgs)
	if err != nil {
		return worker.PushPullResult{}, err
	}
	clocks, err := g.read(ctx, args.Steps[0], args.Dst)
	return worker.PushPullResult{PushResult: res, PullClocks: clocks}, err
}

// read gives the worker the weights for step once the schedule says so,
// first checking that the shard's own rule (the sync barrier, the SSP
// bound) lets it read them now: a schedule that breaks it is a bug.
func (g *gate) read(ctx context.Context, step int64, dst []float32) ([]int64, error) {
	t := g.t
	if step < t.steps {
		if err := t.take(ctx, sim.Op{Worker: g.w, Step: step, Read: true}); err != nil {
			return nil, err
		}
		now, cancel := context.WithCancel(ctx)
		cancel() // WaitToRead answers at once when the read may go ahead
		if err := t.srv.WaitToRead(now, int64(g.w), step); err != nil {
			return nil, fmt.Errorf("emulate: the schedule lets worker %d read for step %d, the shard's rule does not (a bug): %w", g.w, step, err)
		}
	}
	clock, err := t.srv.SnapshotFor(int64(g.w), dst)
	return []int64{clock}, err
}

// push applies the worker's gradient once the schedule says so, and
// evaluates the weights when an evaluation is due.
func (g *gate) push(ctx context.Context, args worker.PushArgs) (worker.PushResult, error) {
	t := g.t
	if err := t.take(ctx, sim.Op{Worker: g.w, Step: args.Step}); err != nil {
		return worker.PushResult{}, err
	}
	res, err := t.srv.Push(ctx, ps.Push{WorkerID: args.WorkerID, Session: g.session, Step: args.Step, Clock: args.Clocks[0], Ranges: t.ranges, Grads: args.Grads})
	if ps.RefusedFor(err) == ps.RejectedMagnitude {
		// The weights have grown to where the shard refuses what could
		// take them past its bound: the job has diverged, as surely as a
		// loss of NaN says.
		return worker.PushResult{}, fmt.Errorf("%w: %w", worker.ErrDiverged, err)
	}
	if err != nil {
		return worker.PushResult{}, err
	}
	if clock := t.srv.Clock(); clock >= t.evalAt {
		for t.evalAt <= clock {
			t.evalAt += t.every
		}
		if err := t.evaluate(ctx); err != nil {
			return worker.PushResult{}, err
		}
	}
	out := worker.PushResult{Staleness: []int64{res.Staleness}}
	if res.Dropped {
		out.Dropped = 1
	}
	return out, nil
}
