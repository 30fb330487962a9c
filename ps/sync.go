package ps

import (
	"context"
	"fmt"
)

func (s *Server) pushSyncLocked(ctx context.Context, in Push, gmax float64) (PushResult, error) {
	switch {
	case in.Clock > s.clock+1:
		return PushResult{}, fmt.Errorf("%w: push for step %d from worker %d: the shard is at step %d; a push may be at most one step ahead",
			ErrInvalidArgument, in.Clock, in.WorkerID, s.clock)
	case in.Clock == s.clock+1:
		err := s.waitLocked(ctx, in.WorkerID, in.Step, fmt.Sprintf("push for step %d", in.Clock), func() bool { return s.clock >= in.Clock })
		if err != nil {
			return PushResult{}, err
		}
		// The same push sent again (a retry) may have waited beside it
		// and gone in first.
		if last, ok := s.lastStep[in.WorkerID]; ok && in.Step <= last {
			s.stats.Duplicates++
			return PushResult{Clock: s.clock, Duplicate: true}, nil
		}
	}
	if in.Clock < s.clock {
		if s.cfg.BackupWorkers > 0 {
			// A straggler: the step went ahead with the others.
			s.lastStep[in.WorkerID] = in.Step
			s.stats.Dropped++
			return PushResult{Clock: s.clock, Dropped: true}, nil
		}
		return PushResult{}, fmt.Errorf("%w: push for step %d from worker %d: the shard already applied it and is at step %d", ErrStale, in.Clock, in.WorkerID, s.clock)
	}
	if !s.bar.member(in.WorkerID, s.clock) {
		return PushResult{}, fmt.Errorf("%w: push for step %d from worker %d: it joined for step %d on",
			ErrInvalidArgument, in.Clock, in.WorkerID, s.bar.entry[in.WorkerID])
	}
	if s.bar.has(in.WorkerID) {
		return PushResult{}, fmt.Errorf("%w: worker %d already pushed step %d (as its step %d)", ErrInvalidArgument, in.WorkerID, in.Clock, s.lastStep[in.WorkerID])
	}
	// The step's mean is no larger than its largest push, so a push the
	// shard can take whole keeps the step safe too.
	if err := s.checkGrowthLocked(in, gmax); err != nil {
		return PushResult{}, err
	}
	if prev, ok := s.lastStep[in.WorkerID]; ok {
		s.barPrev[in.WorkerID] = &prev
	} else {
		s.barPrev[in.WorkerID] = nil
	}
	s.lastStep[in.WorkerID] = in.Step
	s.stats.Pushes++
	s.stats.Staleness.Add(0)
	if s.bar.add(in.WorkerID, s.clock, in.Grads, gmax) {
		s.applyStepLocked()
	}
	return PushResult{Clock: s.clock}, nil
}

// applyStepLocked applies the mean of the barrier's step.
func (s *Server) applyStepLocked() {
	if s.bar.short {
		// Workers that left held it up: it goes on with those that pushed.
		s.stats.ShortSteps++
		s.log.Info("step applied without the workers that left", "step", s.clock, "pushes", len(s.bar.arrived))
	}
	mean := s.bar.mean()
	if s.jour != nil {
		rec := journalRecord{clock: s.clock + 1, grads: mean}
		for _, w := range s.bar.arrived {
			rec.steps = append(rec.steps, [2]int64{w, s.lastStep[w]})
		}
		s.journalLocked(rec)
	}
	s.stepLocked(mean, s.bar.gmax, nil)
	s.bar.reset()
	clear(s.barPrev)
	s.clock++
	s.captureLocked()
	s.notifyLocked()
}
