package ps

import (
	"errors"
	"fmt"
	"slices"
)

// ErrNotMember: a sync or SSP push or pull from a worker that membership
// took out of the live set (it died or left) and that has not joined
// again (Join, or InfoRequest.worker_id over gRPC).
var ErrNotMember = errors.New("worker not in the live set")

// The live set. Sync and SSP wait only for the live workers: all of
// 0..Workers-1 at start; membership takes out those that die or leave
// (WorkerGone), and a worker that starts again comes back through Join.
// Async waits for no one and keeps no live set.

// LiveWorkers returns the workers sync and SSP wait for, in order (in
// sync mode, from the next step on); nil in async mode.
func (s *Server) LiveWorkers() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.live)
}

// StepsPushed is how many steps worker w has pushed: its last step + 1,
// or 0 if it pushed none.
func (s *Server) StepsPushed(w int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.lastStep[w]; ok {
		return last + 1
	}
	return 0
}

// WorkerGone takes worker w out of the live set: membership saw it die or
// leave. In sync mode a step held up only by w completes at once with the
// gradients that arrived, averaged over those (counted in
// Stats.ShortSteps when w was expected and the step had begun), and later
// steps wait only for the workers still live; in SSP the bound stops
// waiting for w. It reports whether w was live; async mode ignores it.
func (s *Server) WorkerGone(w int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode.goneLocked(w)
}

// startLive makes every worker of the job live (sync and SSP, at New).
func (s *Server) startLive() {
	s.live = make([]int64, s.cfg.Workers)
	for i := range s.live {
		s.live[i] = int64(i)
	}
}

// leaveLiveLocked takes w out of the live set, reporting whether it was
// in it.
func (s *Server) leaveLiveLocked(w int64) bool {
	i, ok := slices.BinarySearch(s.live, w)
	if !ok {
		return false
	}
	s.live = slices.Delete(s.live, i, i+1)
	s.stats.Left++
	s.log.Info("worker left the live set", "worker", w, "clock", s.clock, "live", s.live)
	return true
}

// enterLiveLocked puts w into the live set unless it is there.
func (s *Server) enterLiveLocked(w int64) {
	if _, live := slices.BinarySearch(s.live, w); !live {
		s.live = append(s.live, w)
		slices.Sort(s.live)
		s.stats.Joined++
		s.log.Info("worker joined the live set", "worker", w, "clock", s.clock, "live", s.live)
	}
}

// Join admits worker w, starting or starting again, at the first step it
// can begin at that is not before notBefore, and returns that step. Left
// to itself (notBefore 0) a shard names:
//   - async: the step after the last one w pushed (0 for a new worker), so
//     that its pushes are not taken for duplicates;
//   - sync: the current step, unless that step already has pushes and w is
//     not expected in it, or w already pushed it: then the next one (the
//     shard's pull for that step waits for it);
//   - SSP: where the slowest live worker is, so that a returning worker
//     does not hold the others back; never before its own next step.
//
// Shards may name different steps (a push that reached one shard and not
// yet another): a client asks every shard, then asks again with notBefore
// the latest step named, until all agree (client.JoinWorker). A sync
// shard waits for w from the step it last named on. w must be one of
// 0..Workers-1 (in async, 0..MaxWorkers-1 without Workers).
//
// The join binds w to its caller: Joined.Session, which every later push
// and pull for w must carry, and which replaces the session of any
// earlier join of w (session.go). pushEvery is how many steps apart the
// worker pushes (Downpour's n_push; 0 is 1, at most MaxStepGap): a step
// its earlier sessions' pushes could not have reached at that rate is
// not where it begins (reinLocked).
func (s *Server) Join(w, notBefore, pushEvery int64) (Joined, error) {
	if err := s.checkWorker(w); err != nil {
		return Joined{}, err
	}
	if notBefore < 0 || notBefore > maxStep {
		return Joined{}, fmt.Errorf("%w: join of worker %d not before step %d: want 0..%d", ErrInvalidArgument, w, notBefore, int64(maxStep))
	}
	if pushEvery == 0 {
		pushEvery = 1
	}
	if pushEvery < 0 || pushEvery > MaxStepGap {
		return Joined{}, fmt.Errorf("%w: join of worker %d pushing every %d steps: want 1..%d (0: 1)", ErrInvalidArgument, w, pushEvery, MaxStepGap)
	}
	sess, err := newSession()
	if err != nil {
		return Joined{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reinLocked(w, pushEvery)
	own := int64(0)
	if last, ok := s.lastStep[w]; ok {
		own = last + 1
	}
	step := s.mode.joinLocked(w, max(own, notBefore))
	// A step the join asked for past the worker's record here (a client
	// agreeing with shards that took a push this one missed) is granted,
	// but the next join reins this session's pushes in from the record,
	// not from the step asked for: else whoever joins as w first, asking
	// for a far step, makes the worker skip to it when it next joins.
	base := step
	if notBefore > own && step == notBefore {
		base = own
	}
	s.sessions[w], s.sessionBase[w], s.sessionPushes[w] = sess, base, 0
	return Joined{Step: step, Session: sess}, nil
}

// Joined is what Join tells a worker: the step it begins at and its
// session.
type Joined struct {
	Step    int64
	Session Session
}

// maxStep bounds the steps a join names, far beyond any run, so that step
// arithmetic (the SSP bound adds to it) cannot overflow.
const maxStep = 1 << 62

// checkLiveLocked refuses a worker membership took out (sync and SSP
// appliers).
func (s *Server) checkLiveLocked(w int64) error {
	if _, ok := slices.BinarySearch(s.live, w); !ok {
		return fmt.Errorf("%w: worker %d died or left at or before step %d and has not joined again (live: %v); a restarted worker joins through Info with its worker id",
			ErrNotMember, w, s.clock, s.live)
	}
	return nil
}
