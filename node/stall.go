package node

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/worker"
)

// watchStalls is a worker's stall inspector: while the worker finishes no
// step for every (--stall-warning), it logs once per every that it is
// stalled, at which step, since when, and what describe says it waits
// for. It counts steps through cfg.OnStep (after what is there already);
// stop ends it, and may be called more than once.
func watchStalls(cfg *worker.Config, every time.Duration, log *slog.Logger, describe func(context.Context) string) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	var last, next atomic.Int64
	last.Store(time.Now().UnixNano())
	next.Store(cfg.StartStep)
	prev := cfg.OnStep
	cfg.OnStep = func(step int64, t worker.StepTimes) {
		if prev != nil {
			prev(step, t)
		}
		next.Store(step + 1)
		last.Store(time.Now().UnixNano())
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			since := time.Unix(0, last.Load())
			if time.Since(since) < every {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), min(every, 5*time.Second))
			what := describe(ctx)
			cancel()
			log.Warn("stalled: no step finished", "component", "worker", "rank", cfg.Rank, "step", next.Load(),
				"since", since.UTC().Format(time.RFC3339Nano), "waited", time.Since(since).Round(time.Millisecond), "waiting_for", what)
		}
	}()
	var once sync.Once
	return func() { // may be called again
		once.Do(func() { close(done) })
		<-stopped
	}
}

// psStalls describes what the shards' waiting pulls wait for, e.g.
// "shard 0: workers [2] at step 41 since 12:00:01.5 (3 pulls)".
func psStalls(ps *client.Client) func(context.Context) string {
	return func(ctx context.Context) string {
		stalls, err := ps.Stalls(ctx)
		var parts []string
		for _, s := range stalls {
			parts = append(parts, fmt.Sprintf("shard %d: workers %v at step %d since %s (%d pulls waiting)", s.Shard, s.Workers, s.Step,
				s.Since.UTC().Format(time.RFC3339Nano), s.Pulls))
		}
		if len(parts) == 0 {
			parts = append(parts, "no shard has a pull waiting for other workers (a shard may be slow or unreachable)")
		}
		if err != nil {
			parts = append(parts, "could not ask: "+err.Error())
		}
		return strings.Join(parts, "; ")
	}
}

// ringStalls describes what a ring rank's transport waits on, e.g.
// "rank 2: receiving since 12:00:01.5".
func ringStalls(cur func() *countingTransport) func(context.Context) string {
	return func(context.Context) string {
		t := cur()
		if t == nil {
			return "no ring formed"
		}
		var parts []string
		for _, p := range []*pending{&t.recv, &t.send} {
			if peer, since, ok := p.get(); ok {
				parts = append(parts, fmt.Sprintf("rank %d: %s since %s", peer, p.what, since.UTC().Format(time.RFC3339Nano)))
			}
		}
		if len(parts) == 0 {
			return "no transfer under way (between collectives)"
		}
		return strings.Join(parts, "; ")
	}
}

// pending records the transfer a transport is blocked in, if any.
type pending struct {
	what  string
	peer  atomic.Int64 // peer+1; 0: none
	since atomic.Int64
}

func (p *pending) begin(peer int) {
	p.since.Store(time.Now().UnixNano())
	p.peer.Store(int64(peer) + 1)
}

func (p *pending) end() { p.peer.Store(0) }

func (p *pending) get() (int, time.Time, bool) {
	peer := p.peer.Load()
	return int(peer - 1), time.Unix(0, p.since.Load()), peer != 0
}
