package ps

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
)

// signed is p carrying its worker's session on s, as a worker that joined
// sends it: the tests of what a push means in each mode push as workers
// holding their sessions. A worker that has none is given one without a
// join, which would change the mode's state (the live set, the entry
// step) that those tests set up themselves.
func signed(s *Server, p Push) Push {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[p.WorkerID]
	if !ok {
		sess = Session{0x5e, byte(p.WorkerID), byte(p.WorkerID >> 8)}
		s.sessions[p.WorkerID] = sess
	}
	p.Session = sess
	return p
}

// joinStep is s.Join(w, notBefore, 1)'s step.
func joinStep(s *Server, w, notBefore int64) (int64, error) {
	j, err := s.Join(w, notBefore, 1)
	return j.Step, err
}

// TestOnlyTheSessionOfTheLatestJoinPushes: a push for a worker id is
// applied only with the session its latest join returned. Without one,
// with one of its own making, or with the session of an earlier join (a
// worker restarted since, or another client joined as it), it is refused
// whole, said why and counted (reason session); so is a push for an id
// that never joined this shard. Each refusal changes nothing.
func TestOnlyTheSessionOfTheLatestJoinPushes(t *testing.T) {
	for _, mode := range []consistency.Mode{consistency.Async, consistency.Sync, consistency.SSP} {
		t.Run(mode.String(), func(t *testing.T) {
			s := newModeServer(t, mode, 2, 0, 4)
			first, err := s.Join(0, 0, 1)
			require.NoError(t, err)
			again, err := s.Join(0, 0, 1) // worker 0 restarted
			require.NoError(t, err)
			require.NotEqual(t, first.Session, again.Session, "a new join, a new session")
			require.False(t, again.Session.IsZero())

			tests := []struct {
				name string
				w    int64
				sess Session
				want error
				says string
			}{
				{"no session", 0, Session{}, ErrWrongSession, "without a session"},
				{"a made-up session", 0, Session{1, 2, 3}, ErrWrongSession, "not its current one"},
				{"the earlier join's session", 0, first.Session, ErrWrongSession, "joined again since"},
				{"a worker that never joined", 1, again.Session, ErrNoSession, "has not joined shard 0"},
			}
			for i, tc := range tests {
				_, err := s.Push(context.Background(), Push{WorkerID: tc.w, Session: tc.sess, Ranges: whole, Grads: fill(1)})
				require.ErrorIs(t, err, tc.want, tc.name)
				assert.ErrorContains(t, err, tc.says, tc.name)
				assert.Equal(t, RejectedSession, RefusedFor(err), tc.name)
				assert.Equal(t, int64(i+1), s.Stats().RejectedBy[RejectedSession], "%s: counted", tc.name)
				assert.Equal(t, []float32{0, 1, 2, 3}, values(t, s), "%s: nothing changed", tc.name)
				assert.Equal(t, int64(0), s.StepsPushed(tc.w), tc.name)
			}

			res, err := s.Push(context.Background(), Push{WorkerID: 0, Session: again.Session, Clock: 0, Ranges: whole, Grads: fill(1)})
			require.NoError(t, err, "the latest join's session")
			assert.False(t, res.Duplicate)
			assert.Equal(t, int64(1), s.StepsPushed(0))
		})
	}
}

// TestAWorkerPullsWithItsSession: a pull as a worker (it waits for and is
// served as that worker) needs the worker's session; a reader that is no
// worker (-1) needs none. Refusals are counted by reason.
func TestAWorkerPullsWithItsSession(t *testing.T) {
	s := newModeServer(t, consistency.Async, 2, 0, 0)
	j, err := s.Join(1, 0, 1)
	require.NoError(t, err)
	require.NoError(t, s.CheckPull(-1, Session{}), "a reader that is no worker")
	require.NoError(t, s.CheckPull(1, j.Session))
	require.ErrorIs(t, s.CheckPull(1, Session{}), ErrWrongSession)
	require.ErrorIs(t, s.CheckPull(0, j.Session), ErrNoSession)
	require.ErrorIs(t, s.CheckPull(2, j.Session), ErrInvalidArgument, "worker 2 of 2")
	assert.Equal(t, map[string]int64{RejectedSession: 2, RejectedWorker: 1}, s.Stats().RejectedPullsBy)
}

// TestSessionOf: a session on the wire is 16 bytes, or none.
func TestSessionOf(t *testing.T) {
	s, err := SessionOf(nil)
	require.NoError(t, err)
	assert.True(t, s.IsZero())
	s, err = SessionOf(make([]byte, SessionBytes))
	require.NoError(t, err)
	assert.True(t, s.IsZero())
	b := []byte("0123456789abcdef")
	s, err = SessionOf(b)
	require.NoError(t, err)
	assert.Equal(t, b, s[:])
	_, err = SessionOf(b[:5])
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.ErrorContains(t, err, "a session of 5 bytes: want 16")
}

// TestAClientThatJoinedFirstCannotMakeTheWorkerSkipItsRun is the issue's
// attack done by a client that joins as worker 0 before the real worker
// does (a session of its own) and pushes one step far past the worker's:
// before, the real worker joined after that step and trained nothing. Its
// join now names only what the pushes taken for the id could have
// reached at the worker's push interval, and the worker's own pushes
// from there are applied, not taken for duplicates. In sync the forged
// step would have made every real push a duplicate that never reached
// the barrier; in SSP the worker would have skipped past the bound.
func TestAClientThatJoinedFirstCannotMakeTheWorkerSkipItsRun(t *testing.T) {
	for _, mode := range []consistency.Mode{consistency.Async, consistency.Sync, consistency.SSP} {
		t.Run(mode.String(), func(t *testing.T) {
			s := newModeServer(t, mode, 1, 0, 2)
			forger, err := s.Join(0, 0, MaxStepGap)
			require.NoError(t, err)
			forged := int64(MaxStepGap - 1)
			if mode == consistency.SSP {
				forged = 2 // as far as SSP's bound lets any push
			}
			_, err = s.Push(context.Background(), Push{WorkerID: 0, Session: forger.Session, Step: forged, Clock: 0, Ranges: whole, Grads: fill(1)})
			require.NoError(t, err, "the forger's push, with its own session")

			real, err := s.Join(0, 0, 1)
			require.NoError(t, err)
			assert.Equal(t, int64(1), real.Step, "one push taken, one step at a time: the worker begins after step 0, not after the forged step %d", forged)
			for step := real.Step; step < real.Step+3; step++ {
				res, err := s.Push(context.Background(), Push{WorkerID: 0, Session: real.Session, Step: step, Clock: s.Clock(), Ranges: whole, Grads: fill(1)})
				require.NoError(t, err, "the real worker's step %d", step)
				assert.False(t, res.Duplicate, "the real worker's step %d", step)
			}
			assert.Equal(t, int64(4), s.Clock(), "the forger's push and the worker's three")
			_, err = s.Push(context.Background(), Push{WorkerID: 0, Session: forger.Session, Step: forged + 1, Clock: s.Clock(), Ranges: whole, Grads: fill(1)})
			require.ErrorIs(t, err, ErrWrongSession, "the forger's session ended with the real worker's join")
		})
	}
}

// TestAJoinAskingForAFarStepDoesNotMoveTheWorker: another client joins
// as worker 0 asking for a far step (JoinWorker's not_before), is granted
// it, and pushes there; the real worker, joining again (restarted), begins
// after its own pushes and the other client's two, not after the far step
// (docs/PROBE.md: the restarted worker began at step 1027 and trained
// nothing).
func TestAJoinAskingForAFarStepDoesNotMoveTheWorker(t *testing.T) {
	s := newModeServer(t, consistency.Async, 1, 0, 0)
	real, err := s.Join(0, 0, 1)
	require.NoError(t, err)
	for step := range int64(5) {
		_, err := s.Push(context.Background(), Push{WorkerID: 0, Session: real.Session, Step: step, Clock: s.Clock(), Ranges: whole, Grads: fill(1)})
		require.NoError(t, err)
	}
	forger, err := s.Join(0, 1023, MaxStepGap)
	require.NoError(t, err)
	require.Equal(t, int64(1023), forger.Step, "a step asked for is granted to the one who asked")
	for _, step := range []int64{1023, 1024} {
		_, err := s.Push(context.Background(), Push{WorkerID: 0, Session: forger.Session, Step: step, Clock: s.Clock(), Ranges: whole, Grads: fill(1)})
		require.NoError(t, err)
	}
	again, err := s.Join(0, 0, 1)
	require.NoError(t, err)
	assert.Equal(t, int64(7), again.Step, "the worker's five steps and the other client's two pushes, one step each: not step 1025")
}

// TestARestartedWorkerBeginsWhereItLeftOff: a worker's own earlier runs
// stay within what their pushes reach, so a restarted worker still
// begins after its last push (async: pushing every k steps, also after a
// final short push), and a shard restarted from its checkpoint trusts
// the record it wrote.
func TestARestartedWorkerBeginsWhereItLeftOff(t *testing.T) {
	for _, k := range []int64{1, 4} {
		t.Run(fmt.Sprintf("push every %d", k), func(t *testing.T) {
			s := newModeServer(t, consistency.Async, 1, 0, 0)
			j, err := s.Join(0, 0, k)
			require.NoError(t, err)
			require.Equal(t, int64(0), j.Step)
			// Two runs: pushes at steps k-1, 2k-1, then a final short
			// push one step later; the second run pushes one more at
			// its k-th step.
			steps := []int64{k - 1, 2*k - 1, 2 * k}
			for _, step := range steps {
				_, err := s.Push(context.Background(), Push{WorkerID: 0, Session: j.Session, Step: step, Clock: s.Clock(), Ranges: whole, Grads: fill(1)})
				require.NoError(t, err)
			}
			j, err = s.Join(0, 0, k)
			require.NoError(t, err)
			assert.Equal(t, 2*k+1, j.Step, "after its last push")
			_, err = s.Push(context.Background(), Push{WorkerID: 0, Session: j.Session, Step: j.Step + k - 1, Clock: s.Clock(), Ranges: whole, Grads: fill(1)})
			require.NoError(t, err)
			j, err = s.Join(0, 0, k)
			require.NoError(t, err)
			assert.Equal(t, 3*k+1, j.Step, "after its last push, again")
		})
	}
}
