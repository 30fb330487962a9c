package ps

import (
	"context"
	"fmt"
)

// asyncApplier is Downpour: every push is applied at once, as the update
// rule says (update.go; N is Config.Workers), and a push-pull reads each
// chunk right after its update. Workers may come and go unannounced:
// there is no live set and nothing waits.
type asyncApplier struct{ s *Server }

var _ applier = asyncApplier{}

func (a asyncApplier) checkStepLocked(in Push, last int64) error {
	if in.Step > last+MaxStepGap {
		// A step far past the worker's own would make every real push up
		// to it a "duplicate": one forged push could stop a run learning.
		return refuse(RejectedStep, fmt.Errorf("%w: push for step %d from worker %d: more than %d steps past its last push (step %d); a worker pushes at most every %d steps",
			ErrInvalidArgument, in.Step, in.WorkerID, MaxStepGap, last, MaxStepGap))
	}
	if a.s.cfg.LocalSteps > 0 && in.Clock > a.s.clock {
		// A pseudo-gradient is the way from weights the shard served to
		// the worker's own: from weights of a later clock, none could be.
		// (Gradients are taken at their word: a lying clock only makes a
		// push staler.)
		return refuse(RejectedStep, fmt.Errorf("%w: pseudo-gradient from worker %d (its step %d) computed from the weights of outer step %d: the shard is at outer step %d; a worker pushes the way from weights it pulled",
			ErrInvalidArgument, in.WorkerID, in.Step, in.Clock, a.s.clock))
	}
	return nil
}

func (a asyncApplier) pushLocked(_ context.Context, in Push, gmax float64, read ChunkReader) (PushResult, error) {
	return a.s.applyLocked(in, gmax, a.s.cfg.Workers, read, nil)
}

func (asyncApplier) readsWithPush() bool                  { return true }
func (asyncApplier) readWait(int64) (func() bool, string) { return nil, "" }
func (a asyncApplier) stallLocked() (int64, []int64)      { w, step := a.s.slowestLocked(); return step, w }
func (a asyncApplier) waitingForLocked() string           { return a.s.slowestString() }
func (asyncApplier) checkLiveLocked(int64) error          { return nil }

// goneLocked notes w gone for Config.ScaleLR's world size; async waits
// for no one, so w was never among the workers it waits for.
func (a asyncApplier) goneLocked(w int64) bool {
	a.s.gone[w] = true
	return false
}

func (a asyncApplier) joinLocked(w, next int64) int64 {
	delete(a.s.gone, w)
	return next
}
func (asyncApplier) rewindLocked(map[int64]int64) {}
