package ps

import (
	"errors"
	"fmt"

	"github.com/shoalml/shoal/shard"
)

// CheckPlan returns ErrWrongPlan unless version is the plan version this
// shard uses (0 means the caller does not say).
func (s *Server) CheckPlan(version uint32) error {
	if version != 0 && version != shard.Version {
		return fmt.Errorf("%w: caller uses plan version %d, this server %d", ErrWrongPlan, version, shard.Version)
	}
	return nil
}

// checkRange verifies r lies inside chunks this shard owns.
// CheckRange returns an ErrInvalidArgument unless r is a non-empty range
// of chunks this shard owns, the ranges Read takes.
func (s *Server) CheckRange(r shard.Range) error { return s.checkRange(r) }

func (s *Server) checkRange(r shard.Range) error {
	p := s.cfg.Plan
	if r.Len <= 0 || r.Off < 0 || r.End() > p.VectorLen {
		return fmt.Errorf("%w: range %v: want a non-empty range inside [0,%d)", ErrInvalidArgument, r, p.VectorLen)
	}
	for c := p.ChunkAt(r.Off); c <= p.ChunkAt(r.End()-1); c++ {
		if o := p.Owner(c); o != s.cfg.Shard {
			return fmt.Errorf("%w: range %v: chunk %d is owned by shard %d, this is shard %d", ErrInvalidArgument, r, c, o, s.cfg.Shard)
		}
	}
	return nil
}

// MaxWorkers bounds the worker ids a shard accepts (0..MaxWorkers-1),
// and with them what it keeps per worker.
const MaxWorkers = 1 << 16

// CheckWorker returns an ErrInvalidArgument for a worker id outside
// 0..Workers-1, the ids a push may carry.
func (s *Server) CheckWorker(w int64) error { return s.checkWorker(w) }

// checkWorker refuses worker ids outside 0..Workers-1.
func (s *Server) checkWorker(w int64) error {
	if w < 0 || w >= int64(s.cfg.Workers) {
		return fmt.Errorf("%w: worker %d: this shard expects workers 0..%d", ErrInvalidArgument, w, s.cfg.Workers-1)
	}
	return nil
}

// ValidateRanges checks the ranges of a push header: whole chunks this
// shard owns, increasing, without overlap. It returns their total length.
func (s *Server) ValidateRanges(rs []shard.Range) (int, error) {
	if len(rs) == 0 {
		return 0, fmt.Errorf("%w: push names no ranges", ErrInvalidArgument)
	}
	p := s.cfg.Plan
	total, prevEnd := 0, 0
	for i, r := range rs {
		if err := s.checkRange(r); err != nil {
			return 0, err
		}
		if i > 0 && r.Off < prevEnd {
			return 0, fmt.Errorf("%w: push range %v overlaps or precedes the previous one ending at %d", ErrInvalidArgument, r, prevEnd)
		}
		if !p.IsBoundary(r.Off) || !p.IsBoundary(r.End()) {
			return 0, fmt.Errorf("%w: push range %v does not cover whole chunks (chunk %d is %v)", ErrInvalidArgument, r, p.ChunkAt(r.Off), p.Chunk(p.ChunkAt(r.Off)))
		}
		prevEnd = r.End()
		total += r.Len
	}
	return total, nil
}

// rejection is a refused push with the reason it is counted under
// (Stats.RejectedBy).
type rejection struct {
	reason string
	err    error
}

func (r *rejection) Error() string { return r.err.Error() }

func (r *rejection) Unwrap() error { return r.err }

// Reasons a push is refused for, as Stats.RejectedBy counts them.
const (
	RejectedShape     = "shape"      // ranges, length, coverage
	RejectedNonFinite = "non-finite" // a NaN or ±Inf in the gradient
	RejectedWorker    = "worker"     // a worker id outside the job's
	RejectedStep      = "step"       // a step or clock outside what the mode allows
	RejectedMagnitude = "magnitude"  // could take a weight past MaxMagnitude
	RejectedWire      = "wire"       // a malformed stream: no header, a second one, an unknown encoding, lanes that disagree
	RejectedPlan      = "plan"       // a partition plan version other than the shard's (CheckPlan)
	RejectedOther     = "other"      // a refusal no check above tagged
)

// CountRefused counts a push refused under reason (Stats.Rejected and
// RejectedBy): the server counts its own refusals; an adapter that refuses
// a push before the server sees it (a malformed stream, a bad lane) counts
// it here, so that every refusal is counted once, by reason.
func (s *Server) CountRefused(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Rejected++
	if s.stats.RejectedBy == nil {
		s.stats.RejectedBy = map[string]int64{}
	}
	s.stats.RejectedBy[reason]++
}

// CountRefusedPull counts a pull refused under reason (Stats.RejectedPullsBy)
// by an adapter before CheckPull saw it (a wrong plan version:
// RejectedPlan); CheckPull counts its own.
func (s *Server) CountRefusedPull(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stats.RejectedPullsBy == nil {
		s.stats.RejectedPullsBy = map[string]int64{}
	}
	s.stats.RejectedPullsBy[reason]++
}

// RefusedFor is the reason a push was refused for (RejectedShape, …),
// or "" when err is no refusal of a push.
func RefusedFor(err error) string {
	var r *rejection
	if errors.As(err, &r) {
		return r.reason
	}
	return ""
}

// refuse tags a refusal (an ErrInvalidArgument not tagged yet) with its
// reason; other errors and nil pass through.
func refuse(reason string, err error) error {
	var r *rejection
	if err == nil || !errors.Is(err, ErrInvalidArgument) || errors.As(err, &r) {
		return err
	}
	return &rejection{reason, err}
}

// vectorIndex turns index i into the floats of ranges rs into the
// vector's index, for messages.
func vectorIndex(i int, rs []shard.Range) int {
	for _, r := range rs {
		if i < r.Len {
			return i + r.Off
		}
		i -= r.Len
	}
	return i
}
