package ps

import (
	"context"
	"fmt"
	"math"
	"slices"
)

// sspApplier is bounded staleness with a bound above 0 (0 is sync): a
// push is applied at once as the update rule says (update.go; by default
// scaled by 1/N for N live workers), unless its step is more than the
// bound ahead of the slowest live worker; a pull waits while the worker
// is more than the bound ahead.
type sspApplier struct {
	s *Server
}

var _ applier = (*sspApplier)(nil)

func newSSPApplier(s *Server) *sspApplier {
	s.startLive()
	return &sspApplier{s: s}
}

func (*sspApplier) checkStepLocked(Push, int64) error { return nil } // the bound holds steps to the slowest worker's

func (a *sspApplier) pushLocked(_ context.Context, in Push, gmax float64, _ ChunkReader) (PushResult, error) {
	s := a.s
	_, min := s.slowestLocked()
	if in.Step > min+s.cfg.Staleness {
		return PushResult{}, refuse(RejectedStep, fmt.Errorf("%w: push for step %d from worker %d: more than the staleness bound %d ahead of the slowest worker (%d steps pushed)",
			ErrInvalidArgument, in.Step, in.WorkerID, s.cfg.Staleness, min))
	}
	// By default each push moves the weights by 1/N of its gradient, N
	// the live workers, so that a round of pushes makes one mean step.
	p := max(s.progress[in.WorkerID], in.Step+1)
	res, err := s.applyLocked(in, gmax, len(s.live), nil, [][2]int64{{in.WorkerID, p}})
	if err != nil {
		return PushResult{}, err
	}
	s.progress[in.WorkerID] = p
	s.notifyLocked()
	return res, nil
}

func (*sspApplier) readsWithPush() bool { return false }

func (a *sspApplier) readWait(step int64) (func() bool, string) {
	s := a.s
	return func() bool {
		_, min := s.slowestLocked()
		return step-min <= s.cfg.Staleness
	}, fmt.Sprintf("pull for step %d with staleness bound %d", step, s.cfg.Staleness)
}

func (a *sspApplier) stallLocked() (int64, []int64) { w, step := a.s.slowestLocked(); return step, w }
func (a *sspApplier) waitingForLocked() string      { return a.s.slowestString() }
func (a *sspApplier) checkLiveLocked(w int64) error { return a.s.checkLiveLocked(w) }

func (a *sspApplier) goneLocked(w int64) bool {
	if !a.s.leaveLiveLocked(w) {
		return false
	}
	a.s.notifyLocked()
	return true
}

func (a *sspApplier) joinLocked(w, next int64) int64 {
	s := a.s
	_, live := slices.BinarySearch(s.live, w)
	s.enterLiveLocked(w)
	if !live { // a live worker keeps its place; a returning one skips ahead
		slowest := int64(math.MaxInt64)
		for _, o := range s.live {
			if o != w {
				slowest = min(slowest, s.progress[o])
			}
		}
		if slowest != math.MaxInt64 {
			next = max(next, slowest)
		}
	}
	next = max(next, s.progress[w])
	s.progress[w] = next
	s.notifyLocked()
	return next
}

func (*sspApplier) rewindLocked(map[int64]int64) {}
