package node

import (
	"log/slog"
	"sync"
	"time"

	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/ps"
)

// workerWatch follows the job's workers in a shard's gossip: it logs and
// reports each change, and with ExitWhenDone ends the run once they
// are done. report runs on the membership goroutine, the exit-wait
// timer's function on its own.
type workerWatch struct {
	cfg    *ShardConfig
	core   *ps.Server
	log    *slog.Logger
	emit   func(launch.Event)
	endRun func()

	mu   sync.Mutex
	done cluster.Done // when the workers are done
	// Set while every worker that came has left but some never came: it
	// ends the run after ExitWait unless one joins first.
	wait *time.Timer
}

func (w *workerWatch) report(r cluster.Report) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rank := r.Change.Member.Meta.Rank
	w.log.Info("worker "+r.Change.What(), "component", "membership", "rank", rank, "steps", r.Steps, "clock", w.core.Clock(), "live", r.Live, "view", r.View)
	w.emit(launch.Event{Event: launch.Member, Role: cluster.RoleWorker.String(), Rank: rank, Change: r.Change.What(), Steps: r.Steps, Live: r.Live})
	// A worker that never comes (it failed before it joined) is waited
	// for ExitWait, not for ever.
	over, missing := w.done.Step(r)
	if !w.cfg.ExitWhenDone {
		return
	}
	w.stopWaiting()
	if !over {
		return
	}
	if len(missing) == 0 {
		w.log.Info("every worker has left: the run is over", "component", "ps", "clock", w.core.Clock())
		w.endRun()
		return
	}
	w.waitFor(missing)
}

// waitFor ends the run after ExitWait unless a worker joins first.
// Called with mu held.
func (w *workerWatch) waitFor(missing []int) {
	exitWait := w.cfg.ExitWait
	w.log.Warn("every worker that joined has left; waiting for the ranks that never joined", "component", "ps", "missing", missing, "wait", exitWait)
	var t *time.Timer
	t = time.AfterFunc(exitWait, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.wait != t {
			return // a worker joined meanwhile
		}
		w.log.Warn("every worker has left, and these ranks never joined: the run is over without them", "component", "ps", "missing", missing, "waited", exitWait, "clock", w.core.Clock())
		w.endRun()
	})
	w.wait = t
}

// stopWaiting stops the exit-wait timer, if set. Called with mu held.
func (w *workerWatch) stopWaiting() {
	if w.wait != nil {
		w.wait.Stop()
		w.wait = nil
	}
}

// stop stops the exit-wait timer once the gossip is left.
func (w *workerWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopWaiting()
}
