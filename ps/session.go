package ps

import (
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
)

// Sessions bind a worker id to whoever joined as it. Any caller the
// transport lets in (a holder of the run's token) may join as any worker
// id; before sessions, any such caller could also push and pull as any
// worker id, and one forged async push far past worker 0's steps made the
// real worker 0 join past them and skip its whole run. Now Join issues a
// session, 16 random bytes, and every later push and worker pull for that
// id must carry it: a push or pull without it, or with an older one, is
// refused and counted (RejectedSession), and a new join (a restarted
// worker) gets a new session that invalidates the old one. A second
// client can still join as a worker id (per-worker credentials would stop
// that), but it then holds the id alone: the worker it displaced is
// refused at its next call, loudly, instead of losing its steps quietly.
//
// A join also takes back what the id's earlier sessions could not have
// pushed (reinLocked): a session that began at step b and had n pushes
// taken reached at most step b + n·k - 1 at the joiner's push interval
// k, so the step Join names never inherits another client's far-ahead
// steps, even where that client joined first.
//
// Sessions live in the shard's memory only: a shard that restarts holds
// none, and answers a push or pull with ErrNoSession (gRPC:
// FailedPrecondition with reason NO_SESSION), on which a client binds the
// id again on that shard alone (Rebind: allowed only where the shard
// holds no session for it, and admitting nothing) and repeats the call
// (client.Client does so).

// SessionBytes is a session's length on the wire.
const SessionBytes = 16

// Session is what Join returns to bind a worker id to its caller; the
// zero Session is none.
type Session [SessionBytes]byte

// IsZero reports whether s is no session.
func (s Session) IsZero() bool { return s == Session{} }

// SessionOf reads a session from the wire: empty is none, anything but
// SessionBytes bytes is an ErrInvalidArgument.
func SessionOf(b []byte) (Session, error) {
	var s Session
	switch len(b) {
	case 0:
	case SessionBytes:
		copy(s[:], b)
	default:
		return s, fmt.Errorf("%w: a session of %d bytes: want %d (JoinWorker's) or none", ErrInvalidArgument, len(b), SessionBytes)
	}
	return s, nil
}

// Errors of a push or pull whose session is not the worker's.
var (
	// ErrNoSession: the shard holds no session for the worker id: it
	// never joined this shard, or the shard restarted since. Join again.
	ErrNoSession = errors.New("no session for the worker")
	// ErrWrongSession: the call carries no session, or another than the
	// worker id's on this shard: the id joined again since (a restarted
	// worker, or another client joined as it).
	ErrWrongSession = errors.New("not the worker's session")
)

// RejectedSession is the reason a push or pull is refused for when its
// session is not the worker id's (ErrNoSession, ErrWrongSession).
const RejectedSession = "session"

// newSession draws a session.
func newSession() (Session, error) {
	var s Session
	if _, err := rand.Read(s[:]); err != nil {
		return s, fmt.Errorf("drawing a session: %w", err)
	}
	return s, nil
}

// Rebind binds worker w to its caller with a new session without a
// join, where the shard holds no session for w: it restarted since w
// joined (sessions are not kept across restarts), or w never joined it.
// It admits nothing and names no step: the worker goes on where it is,
// and the record the shard has of it is trusted as its own (reinLocked).
// Where the shard holds a session for w it refuses (ErrWrongSession):
// only a Join takes a worker id over.
func (s *Server) Rebind(w int64) (Session, error) {
	if err := s.checkWorker(w); err != nil {
		return Session{}, err
	}
	sess, err := newSession()
	if err != nil {
		return Session{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, held := s.sessions[w]; held {
		return Session{}, fmt.Errorf("%w: worker %d holds a session on shard %d: a shard binds a worker id again without a join only where it holds none (it restarted, or the id never joined it); join (JoinWorker) to take the id over",
			ErrWrongSession, w, s.cfg.Shard)
	}
	base := int64(0)
	if last, ok := s.lastStep[w]; ok {
		base = last + 1
	}
	s.sessions[w], s.sessionBase[w], s.sessionPushes[w] = sess, base, 0
	return sess, nil
}

// CheckSession returns nil if sess is worker w's session on this shard,
// else an ErrNoSession or ErrWrongSession saying what was wrong. It
// counts nothing: a caller that refuses a push on it counts it
// (CountRefused); Push and CheckPull count their own.
func (s *Server) CheckSession(w int64, sess Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkSessionLocked(w, sess)
}

func (s *Server) checkSessionLocked(w int64, sess Session) error {
	held, ok := s.sessions[w]
	switch {
	case !ok:
		return fmt.Errorf("%w: worker %d has not joined shard %d since it started (or the shard restarted since): join it (JoinWorker) and call again with the session the join returns",
			ErrNoSession, w, s.cfg.Shard)
	case sess.IsZero():
		return fmt.Errorf("%w: a call for worker %d without a session: worker %d joined shard %d, and only the session its join returned may push or pull for it",
			ErrWrongSession, w, w, s.cfg.Shard)
	case subtle.ConstantTimeCompare(held[:], sess[:]) != 1:
		return fmt.Errorf("%w: a call for worker %d with a session that is not its current one on shard %d: worker %d joined again since (a restarted worker, or another client joined as it)",
			ErrWrongSession, w, s.cfg.Shard, w)
	}
	return nil
}

// CheckPull admits a pull for worker w carrying sess: a pull for a
// worker (w >= 0) waits for and is served as that worker, so it must
// carry w's session (CheckSession); a reader that is no worker (w < 0:
// an evaluation, a monitor) needs none. A refusal is counted
// (Stats.RejectedPullsBy).
func (s *Server) CheckPull(w int64, sess Session) error {
	if w < 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.checkWorker(w)
	reason := RejectedWorker
	if err == nil {
		err, reason = s.checkSessionLocked(w, sess), RejectedSession
	}
	if err != nil {
		if s.stats.RejectedPullsBy == nil {
			s.stats.RejectedPullsBy = map[string]int64{}
		}
		s.stats.RejectedPullsBy[reason]++
	}
	return err
}

// acceptLocked records worker w's push of step as taken (applied, in a
// step, or dropped): it is w's last step, and one more push of its
// session (reinLocked).
func (s *Server) acceptLocked(w, step int64) {
	s.lastStep[w] = step
	s.sessionPushes[w]++
}

// reinLocked takes back, before worker w joins again, the part of its
// record that its earlier sessions' pushes could not have reached at one
// push every pushEvery steps: from the step the last session began at,
// each push it had taken moves its step forward by at most pushEvery. A
// worker's own earlier runs (a restart) stay within that; a record past
// it was pushed by another client that joined as w (before the real
// worker did) and must not make the worker skip its steps. What is taken
// back is the dedup record (lastStep) and SSP's progress, so the step
// Join names and the pushes from there on are the worker's own.
func (s *Server) reinLocked(w, pushEvery int64) {
	last, ok := s.lastStep[w]
	if !ok {
		return
	}
	reach := s.sessionBase[w] + s.sessionPushes[w]*pushEvery
	if last+1 <= reach {
		return
	}
	s.log.Warn("a worker's record runs past what its pushes could reach; taking it back so the worker does not skip its steps (another client joined as it and pushed)",
		"worker", w, "last_step", last, "pushes", s.sessionPushes[w], "since_step", s.sessionBase[w], "push_every", pushEvery, "back_to", reach)
	if reach == 0 {
		delete(s.lastStep, w)
	} else {
		s.lastStep[w] = reach - 1
	}
	if p, ok := s.progress[w]; ok && p > reach {
		s.progress[w] = reach
	}
}

// baseSessionsLocked makes the record each worker resumed with (a
// checkpoint, the journal) the start of its reach (reinLocked): the
// shard trusts what it wrote itself.
func (s *Server) baseSessionsLocked() {
	for w, last := range s.lastStep {
		s.sessionBase[w] = last + 1
	}
}
