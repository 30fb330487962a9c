package ps

import (
	"context"

	"github.com/shoalml/shoal/consistency"
)

// applier is what a push, a pull and a change of membership mean in one
// consistency mode, as etcd/raft's stepLeader and stepFollower are what a
// message means in one role: New picks one by Config.Mode (async.go,
// sync.go, ssp.go), so that no method of Server branches on the mode.
// Methods named …Locked run under the shard's lock; the others hold none.
type applier interface {
	// checkStepLocked refuses a push whose step runs further ahead than
	// the mode allows (last: the worker's last step, -1 for none). It
	// runs before the duplicate check.
	checkStepLocked(in Push, last int64) error
	// pushLocked applies in, checked and not a duplicate, whose
	// magnitudes gmax bounds. read, not nil only where readsWithPush,
	// gets each chunk right after its update.
	pushLocked(ctx context.Context, in Push, gmax float64, read ChunkReader) (PushResult, error)
	// readsWithPush reports whether a push-pull's read goes with its
	// push, each chunk right after its update in the same critical
	// section (async), instead of after the pull has waited to read.
	readsWithPush() bool
	// readWait returns what a pull for step waits for, a condition
	// evaluated under the shard's lock, and what it is, for messages; a
	// nil ready never waits.
	readWait(step int64) (ready func() bool, what string)
	// stallLocked returns the step waiting pulls wait for and the
	// workers whose pushes would end the wait; waitingForLocked says it
	// in words.
	stallLocked() (step int64, workers []int64)
	waitingForLocked() string
	// checkLiveLocked refuses a push from a worker the mode does not
	// count among the live (ErrNotMember).
	checkLiveLocked(w int64) error
	// goneLocked takes w out of the workers the mode waits for; it
	// reports whether w was among them.
	goneLocked(w int64) bool
	// joinLocked admits w at the first step not before next that the
	// mode can begin it at (Join), and returns that step.
	joinLocked(w, next int64) int64
	// rewindLocked undoes in lastStep, a copy for a checkpoint, the
	// pushes of a step collected but not yet applied.
	rewindLocked(lastStep map[int64]int64)
}

// newApplier returns the applier of s's mode; s's chunks are in place.
func newApplier(s *Server) applier {
	switch {
	case s.cfg.synchronous():
		return newSyncApplier(s)
	case s.cfg.Mode == consistency.SSP:
		return newSSPApplier(s)
	default:
		return asyncApplier{s}
	}
}
