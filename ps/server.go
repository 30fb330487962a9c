package ps

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"

	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
)

// Errors a Server returns, wrapped with the details; branch with errors.Is.
var (
	// ErrInvalidArgument: a push or pull that names bad ranges, has the
	// wrong length or carries non-finite values. Nothing was changed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrWrongPlan: the caller computed a different partition plan.
	ErrWrongPlan = errors.New("wrong partition plan")
)

// Modes the server implements.
const (
	ModeAsync = "async"
)

// Config configures one shard.
type Config struct {
	// Mode is the consistency mode; "async" (Downpour: every push is applied
	// at once).
	Mode string
	// Shard is this server's index in Plan.
	Shard int
	// Plan partitions the vector over the shards.
	Plan shard.Plan
	// Layout names the tensors of the vector (served to workers by Info).
	Layout nn.Layout
	// Optimizer is applied to each owned chunk with its own state.
	Optimizer optim.Config
	// Logger receives events; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig is an async single shard with the default optimizer; Plan
// and Layout must still be set.
func DefaultConfig() Config {
	return Config{Mode: ModeAsync, Optimizer: optim.DefaultConfig()}
}

func (c Config) validate() error {
	if c.Mode != ModeAsync {
		return fmt.Errorf("mode %q: unknown (want %s)", c.Mode, ModeAsync)
	}
	if err := c.Plan.Validate(); err != nil {
		return err
	}
	if c.Shard < 0 || c.Shard >= c.Plan.Servers {
		return fmt.Errorf("shard %d: want 0..%d for a plan of %d servers", c.Shard, c.Plan.Servers-1, c.Plan.Servers)
	}
	if err := c.Layout.Validate(); err != nil {
		return err
	}
	if c.Layout.Size() != c.Plan.VectorLen {
		return fmt.Errorf("layout holds %d floats, plan %d", c.Layout.Size(), c.Plan.VectorLen)
	}
	return c.Optimizer.Validate()
}

// chunk is one owned chunk of the vector with its optimizer state.
type chunk struct {
	r      shard.Range
	values []float32
	opt    *optim.Optimizer
}

// Server is one parameter-server shard.
type Server struct {
	cfg    Config
	log    *slog.Logger
	ranges []shard.Range

	mu     sync.RWMutex // guards everything below
	chunks []chunk      // owned chunks in vector order
	clock  int64
	// lastStep is the last step applied per worker, for deduplication.
	lastStep map[int64]int64
	stats    Stats
}

// Stats are counters of a shard since it started.
type Stats struct {
	Pushes     int64
	Duplicates int64
	Rejected   int64
	Pulls      int64
	// Staleness[i] counts pushes whose gradient was i clocks old (the last
	// bucket holds everything at or above it).
	Staleness [StalenessBuckets]int64
}

// StalenessBuckets is the size of the staleness histogram.
const StalenessBuckets = 64

// New returns a shard holding its chunks of initial, which has
// cfg.Plan.VectorLen floats and is copied.
func New(cfg Config, initial []float32) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("parameter server: %w", err)
	}
	if len(initial) != cfg.Plan.VectorLen {
		return nil, fmt.Errorf("parameter server: initial vector has %d floats, want %d", len(initial), cfg.Plan.VectorLen)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, lastStep: make(map[int64]int64)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "ps", "shard", cfg.Shard)
	s.ranges = cfg.Plan.Ranges(cfg.Shard)
	for _, r := range s.ranges {
		o, err := optim.New(cfg.Optimizer, r.Len)
		if err != nil {
			return nil, fmt.Errorf("parameter server: %w", err)
		}
		s.chunks = append(s.chunks, chunk{r: r, values: append([]float32(nil), initial[r.Off:r.End()]...), opt: o})
	}
	return s, nil
}

// Config returns the shard's configuration.
func (s *Server) Config() Config { return s.cfg }

// Ranges returns the chunks this shard owns, in vector order. Callers must
// not modify the slice.
func (s *Server) Ranges() []shard.Range { return s.ranges }

// Clock returns the number of pushes applied so far.
func (s *Server) Clock() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.clock
}

// Stats returns a copy of the shard's counters.
func (s *Server) Stats() Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.stats
}

// CheckPlan returns ErrWrongPlan unless version is the plan version this
// shard uses (0 means the caller does not say).
func (s *Server) CheckPlan(version uint32) error {
	if version != 0 && version != shard.Version {
		return fmt.Errorf("%w: caller uses plan version %d, this server %d", ErrWrongPlan, version, shard.Version)
	}
	return nil
}

// checkRange verifies r lies inside chunks this shard owns and returns the
// index of the first owned chunk it touches. Chunk i of the plan is owned
// chunk i/Servers here.
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

// Read copies the values of r into dst (len r.Len) and returns the clock
// they belong to. r must lie inside chunks this shard owns.
func (s *Server) Read(r shard.Range, dst []float32) (int64, error) {
	if err := s.checkRange(r); err != nil {
		return 0, err
	}
	if len(dst) != r.Len {
		return 0, fmt.Errorf("%w: read of %v into %d floats", ErrInvalidArgument, r, len(dst))
	}
	p := s.cfg.Plan
	s.mu.RLock()
	defer s.mu.RUnlock()
	for c := p.ChunkAt(r.Off); c <= p.ChunkAt(r.End()-1); c++ {
		ch := &s.chunks[c/p.Servers]
		lo, hi := max(r.Off, ch.r.Off), min(r.End(), ch.r.End())
		copy(dst[lo-r.Off:hi-r.Off], ch.values[lo-ch.r.Off:hi-ch.r.Off])
	}
	return s.clock, nil
}

// NotePull counts a finished pull in the stats.
func (s *Server) NotePull() {
	s.mu.Lock()
	s.stats.Pulls++
	s.mu.Unlock()
}

// Push is one gradient from a worker.
type Push struct {
	WorkerID int64
	// Step is the worker's step; (WorkerID, Step) is applied at most once.
	Step int64
	// Clock is the shard clock of the values the gradient was computed from.
	Clock int64
	// Ranges are whole owned chunks, in increasing order, without overlap.
	Ranges []shard.Range
	// Grads holds the gradient of each range, concatenated.
	Grads []float32
}

// PushResult says what a push did.
type PushResult struct {
	Clock     int64
	Duplicate bool
	Staleness int64
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
		if r.Off%p.ChunkFloats != 0 || (r.End()%p.ChunkFloats != 0 && r.End() != p.VectorLen) {
			return 0, fmt.Errorf("%w: push range %v does not cover whole chunks of %d floats", ErrInvalidArgument, r, p.ChunkFloats)
		}
		prevEnd = r.End()
		total += r.Len
	}
	return total, nil
}

// Push checks a gradient and applies it with the optimizer. It is applied
// whole or not at all: a bad range, a wrong length or a non-finite value is
// an ErrInvalidArgument and changes nothing.
func (s *Server) Push(in Push) (PushResult, error) {
	total, err := s.ValidateRanges(in.Ranges)
	if err == nil && len(in.Grads) != total {
		err = fmt.Errorf("%w: push of %d floats, its ranges hold %d", ErrInvalidArgument, len(in.Grads), total)
	}
	if err == nil {
		err = checkFinite(in.Grads, in.Ranges)
	}
	if err != nil {
		s.mu.Lock()
		s.stats.Rejected++
		s.mu.Unlock()
		return PushResult{}, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.lastStep[in.WorkerID]; ok && in.Step <= last {
		s.stats.Duplicates++
		return PushResult{Clock: s.clock, Duplicate: true}, nil
	}
	staleness := max(s.clock-in.Clock, 0)
	p := s.cfg.Plan
	g := in.Grads
	for _, r := range in.Ranges {
		for c := p.ChunkAt(r.Off); c <= p.ChunkAt(r.End()-1); c++ {
			ch := &s.chunks[c/p.Servers]
			if err := ch.opt.Step(ch.values, g[:ch.r.Len]); err != nil {
				// Lengths were checked above; this is a bug, not bad input.
				panic(fmt.Sprintf("ps: optimizer step on chunk %v: %v", ch.r, err))
			}
			g = g[ch.r.Len:]
		}
	}
	s.lastStep[in.WorkerID] = in.Step
	s.clock++
	s.stats.Pushes++
	s.stats.Staleness[min(staleness, StalenessBuckets-1)]++
	return PushResult{Clock: s.clock, Staleness: staleness}, nil
}

func checkFinite(g []float32, rs []shard.Range) error {
	for i, v := range g {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			// Name the vector index, not the offset in the message.
			idx := i
			for _, r := range rs {
				if idx < r.Len {
					idx += r.Off
					break
				}
				idx -= r.Len
			}
			return fmt.Errorf("%w: gradient at index %d is %v, want a finite value", ErrInvalidArgument, idx, v)
		}
	}
	return nil
}
