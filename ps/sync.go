package ps

import (
	"context"
	"fmt"
)

// syncApplier is the barrier (sync, and SSP with staleness 0): each
// shard step collects one push from every live worker (or all but
// BackupWorkers), applies their mean once, and only then lets the pulls
// of the next step read.
type syncApplier struct {
	s   *Server
	bar *barrier
	// barPrev holds, for each worker in the barrier's step, its lastStep
	// before that push (absent: none), so a checkpoint taken mid-step can
	// record the state of the last whole step.
	barPrev map[int64]*int64
}

var _ applier = (*syncApplier)(nil)

func newSyncApplier(s *Server) *syncApplier {
	s.startLive()
	return &syncApplier{s: s, bar: newBarrier(s.live, s.cfg.BackupWorkers, s.floats), barPrev: map[int64]*int64{}}
}

func (a *syncApplier) checkStepLocked(in Push, last int64) error {
	s := a.s
	if in.Step > max(last, s.clock)+MaxStepGap {
		// As in async mode, where the run would stall here: the worker's
		// pushes would never reach the barrier again. A worker that joins
		// a run under way starts at the shard's step, so that is the base
		// until it has pushed.
		return refuse(RejectedStep, fmt.Errorf("%w: push for step %d from worker %d: more than %d steps past the shard's step %d and the worker's last push (step %d)",
			ErrInvalidArgument, in.Step, in.WorkerID, MaxStepGap, s.clock, last))
	}
	return nil
}

func (a *syncApplier) pushLocked(ctx context.Context, in Push, gmax float64, _ ChunkReader) (PushResult, error) {
	res, err := a.pushStepLocked(ctx, in, gmax)
	return res, refuse(RejectedStep, err)
}

func (a *syncApplier) pushStepLocked(ctx context.Context, in Push, gmax float64) (PushResult, error) {
	s := a.s
	if f := int64(s.cfg.fragments()); f > 1 && int64(in.frag) != in.Clock%f {
		return PushResult{}, fmt.Errorf("%w: pseudo-gradient of fragment %d from worker %d for shard step %d: the staggered schedule syncs fragment %d there (step e syncs fragment e mod %d)",
			ErrInvalidArgument, in.frag, in.WorkerID, in.Clock, in.Clock%f, f)
	}
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
			d, dropped := s.droppedStep[in.WorkerID]
			return PushResult{Clock: s.clock, Duplicate: true, Dropped: dropped && d == in.Step}, nil
		}
	}
	if in.Clock < s.clock {
		if s.cfg.BackupWorkers > 0 {
			// A straggler: the step went ahead with the others.
			s.acceptLocked(in.WorkerID, in.Step)
			s.droppedStep[in.WorkerID] = in.Step
			s.stats.Dropped++
			return PushResult{Clock: s.clock, Dropped: true}, nil
		}
		return PushResult{}, fmt.Errorf("%w: push for step %d from worker %d: the shard already applied it and is at step %d", ErrStale, in.Clock, in.WorkerID, s.clock)
	}
	if !a.bar.member(in.WorkerID, s.clock) {
		return PushResult{}, fmt.Errorf("%w: push for step %d from worker %d: it joined for step %d on",
			ErrInvalidArgument, in.Clock, in.WorkerID, a.bar.entry[in.WorkerID])
	}
	if a.bar.has(in.WorkerID) {
		return PushResult{}, fmt.Errorf("%w: worker %d already pushed step %d (as its step %d)", ErrInvalidArgument, in.WorkerID, in.Clock, s.lastStep[in.WorkerID])
	}
	// The step's mean is no larger than its largest push, so a push the
	// shard can take whole keeps the step safe too.
	if err := s.checkGrowthLocked(in, gmax); err != nil {
		return PushResult{}, err
	}
	if prev, ok := s.lastStep[in.WorkerID]; ok {
		a.barPrev[in.WorkerID] = &prev
	} else {
		a.barPrev[in.WorkerID] = nil
	}
	s.acceptLocked(in.WorkerID, in.Step)
	s.stats.Pushes++
	s.stats.PushBytes += in.Bytes
	s.stats.Staleness.Add(0)
	if a.bar.add(in.WorkerID, s.clock, s.chunkAt[s.fragLo[in.frag]], in.Grads, gmax) {
		if err := a.applyStepLocked(); err != nil {
			return PushResult{}, err
		}
	}
	return PushResult{Clock: s.clock}, nil
}

// applyStepLocked applies the mean of the barrier's step. Where the
// journal cannot take the step it applies nothing and returns ErrJournal
// (the shard has failed; Failed says so).
func (a *syncApplier) applyStepLocked() error {
	s := a.s
	if a.bar.short {
		// Workers that left held it up: it goes on with those that pushed.
		s.stats.ShortSteps++
		s.log.Info("step applied without the workers that left", "step", s.clock, "pushes", len(a.bar.arrived))
	}
	mean := a.bar.mean()
	s.scaleLRLocked(float64(s.worldLocked()))
	if s.jour != nil {
		rec := journalRecord{clock: s.clock + 1, lrScale: s.lrScale, grads: mean}
		for _, w := range a.bar.arrived {
			rec.steps = append(rec.steps, [2]int64{w, s.lastStep[w]})
		}
		if err := s.journalLocked(rec); err != nil {
			return err
		}
	}
	f := int(s.clock % int64(s.cfg.fragments()))
	lo, hi := s.fragLo[f], s.fragLo[f+1]
	s.stepChunksLocked(lo, hi, mean[s.chunkAt[lo]:s.chunkEnd(hi-1)], a.bar.gmax, nil)
	a.bar.reset()
	clear(a.barPrev)
	s.clock++
	s.captureLocked()
	s.notifyLocked()
	return nil
}

func (*syncApplier) readsWithPush() bool { return false }

func (a *syncApplier) readWait(step int64) (func() bool, string) {
	s := a.s
	return func() bool { return s.clock >= step }, fmt.Sprintf("pull for step %d", step)
}

func (a *syncApplier) stallLocked() (int64, []int64) {
	return a.s.clock, a.bar.waitingFor(a.s.clock)
}

func (a *syncApplier) waitingForLocked() string {
	return fmt.Sprintf("step %d has %s", a.s.clock, a.bar.missing(a.s.clock))
}

func (a *syncApplier) checkLiveLocked(w int64) error { return a.s.checkLiveLocked(w) }

func (a *syncApplier) goneLocked(w int64) bool {
	s := a.s
	if !s.leaveLiveLocked(w) {
		return false
	}
	if a.bar.remove(w, s.clock) {
		_ = a.applyStepLocked() // a journal that failed is on Failed already
	}
	s.notifyLocked()
	return true
}

func (a *syncApplier) joinLocked(w, next int64) int64 {
	s := a.s
	s.enterLiveLocked(w)
	entry := s.clock
	if a.bar.has(w) || (len(a.bar.arrived) > 0 && !a.bar.member(w, s.clock)) {
		entry++ // the step in progress goes on without it
	}
	entry = max(entry, next)
	if a.bar.admit(w, entry, s.clock) {
		_ = a.applyStepLocked() // a journal that failed is on Failed already
	}
	s.notifyLocked()
	return entry
}

// rewindLocked gives the workers in the barrier's step their dedup record
// from before their push, so that they push again after a restart and the
// step is collected anew.
func (a *syncApplier) rewindLocked(lastStep map[int64]int64) {
	for w, prev := range a.barPrev {
		if prev == nil {
			delete(lastStep, w)
		} else {
			lastStep[w] = *prev
		}
	}
}
