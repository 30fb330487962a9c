package ps

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/shoalml/shoal/timeline"
)

// waitLocked blocks until ready (called under s.mu) holds, ctx ends or
// MaxWait passes; s.mu is held again when it returns. When the wait ends
// first, the error is an ErrWaitTimeout that also wraps ctx's error
// (context.Canceled, or context.DeadlineExceeded for a deadline or
// MaxWait) and says what the shard was waiting for.
func (s *Server) waitLocked(ctx context.Context, worker, step int64, what string, ready func() bool) error {
	if ready() {
		return nil
	}
	defer s.countWaitLocked(time.Now(), worker, step)
	if s.waiters++; s.waiters == 1 {
		s.waitSince = time.Now()
	}
	defer func() { s.waiters-- }()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.MaxWait)
	defer cancel()
	var stall <-chan time.Time
	if s.cfg.StallWarning > 0 {
		t := time.NewTicker(s.cfg.StallWarning)
		defer t.Stop()
		stall = t.C
	}
	for !ready() {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
			s.mu.Lock()
		case <-stall:
			s.mu.Lock()
			s.logStallLocked(what)
		case <-ctx.Done():
			s.mu.Lock()
			if ready() {
				return nil
			}
			return fmt.Errorf("%w: %s: %s: %w", ErrWaitTimeout, what, s.waitingForLocked(), ctx.Err())
		}
	}
	return nil
}

// Stall is what a shard's waiting pulls wait for.
type Stall struct {
	// Step is the step the pulls wait to read: in sync mode the step
	// whose pushes are missing; in SSP the slowest workers' next step.
	Step int64
	// Workers are the workers whose pushes would end the wait.
	Workers []int64
	// Since is when the pulls began waiting (some pull has waited
	// without a break since then); Pulls is how many wait now.
	Since time.Time
	Pulls int
}

// Stall says what the shard's pulls wait for; ok is false when none
// waits.
func (s *Server) Stall() (st Stall, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stallLocked()
}

func (s *Server) stallLocked() (Stall, bool) {
	if s.waiters == 0 {
		return Stall{}, false
	}
	st := Stall{Since: s.waitSince, Pulls: s.waiters}
	st.Step, st.Workers = s.mode.stallLocked()
	return st, true
}

// logStallLocked logs what the shard waits for, at most once per
// StallWarning however many pulls wait.
func (s *Server) logStallLocked(what string) {
	st, ok := s.stallLocked()
	if !ok || time.Since(s.stallLogged) < s.cfg.StallWarning*9/10 {
		return
	}
	s.stallLogged = time.Now()
	s.log.Warn("stalled: pulls are waiting for other workers", "waiting_for_workers", st.Workers, "step", st.Step,
		"since", st.Since.UTC().Format(time.RFC3339Nano), "waited", time.Since(st.Since).Round(time.Millisecond), "pulls", st.Pulls, "state", s.waitingForLocked(), "first", what)
}

// waitingForLocked describes who the shard waits for.
func (s *Server) waitingForLocked() string { return s.mode.waitingForLocked() }

// slowestString describes the slowest workers (async, ssp).
func (s *Server) slowestString() string {
	slow, min := s.slowestLocked()
	return fmt.Sprintf("the slowest worker(s) %v pushed %d steps", slow, min)
}

// slowestLocked returns the workers with the fewest steps pushed (ssp).
func (s *Server) slowestLocked() ([]int64, int64) {
	var slow []int64
	min := int64(math.MaxInt64)
	for _, w := range s.live {
		switch p := s.progress[w]; {
		case p < min:
			min, slow = p, []int64{w}
		case p == min:
			slow = append(slow, w)
		}
	}
	return slow, min
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// WaitToRead blocks until worker may read the weights for step: in sync
// until every earlier step is applied, in ssp while step is more than
// Staleness ahead of the slowest worker; async never waits.
func (s *Server) WaitToRead(ctx context.Context, worker, step int64) error {
	ready, what := s.mode.readWait(step)
	if ready == nil || step <= 0 {
		return nil // nothing to wait for (async, step 0, or the launcher's final read)
	}
	if err := s.checkWorker(worker); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waitLocked(ctx, worker, step, what, ready)
}

// countWaitLocked counts a wait of worker's call for step that began at
// start.
func (s *Server) countWaitLocked(start time.Time, worker, step int64) {
	d := time.Since(start)
	s.cfg.Timeline.Span(int(worker)+1, "barrier wait", start, d, timeline.Arg{Key: "step", Val: step})
	s.stats.Waits++
	s.stats.WaitSeconds += d.Seconds()
	if s.cfg.OnWait != nil {
		s.cfg.OnWait(d)
	}
}
