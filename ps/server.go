package ps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/internal/freelist"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/timeline"
)

// Errors a Server returns, wrapped with the details; branch with errors.Is.
var (
	// ErrInvalidArgument: a push or pull that names bad ranges, has the
	// wrong length, carries non-finite values, comes from an unknown
	// worker or a step from the far future. Nothing was changed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrWrongPlan: the caller computed a different partition plan.
	ErrWrongPlan = errors.New("wrong partition plan")
	// ErrStale: a sync push for a step that was already applied (without
	// backup workers, where it cannot be a straggler's).
	ErrStale = errors.New("stale step")
	// ErrWaitTimeout: a pull or push waited for other workers until its
	// context ended or MaxWait passed; the message names the workers it
	// waited for, and the error also wraps the context's error.
	ErrWaitTimeout = errors.New("timed out waiting for other workers")
)

// Config configures one shard.
type Config struct {
	// Mode is one that goes through parameter servers: consistency.Async,
	// Sync or SSP.
	Mode consistency.Mode
	// Shard is this server's index in Plan.
	Shard int
	// Plan partitions the vector over the shards.
	Plan shard.Plan
	// Layout names the tensors of the vector (served to workers by Info).
	Layout nn.Layout
	// Optimizer is applied to each owned chunk with its own state.
	Optimizer optim.Config
	// Workers is the number of workers, ids 0..Workers-1: sync and ssp
	// wait for them (until membership arrives it comes from the
	// launcher), and every mode refuses pushes from other ids. Zero is 1
	// in sync and ssp and MaxWorkers in async, whose workers may come and
	// go unannounced; at most MaxWorkers.
	Workers int
	// BackupWorkers: sync applies a step once Workers−BackupWorkers pushed
	// it; later pushes for it are dropped and counted.
	BackupWorkers int
	// Staleness is SSP's bound s.
	Staleness int64
	// MaxWait bounds every wait for other workers, also for callers that
	// set no deadline (default 10 minutes).
	MaxWait time.Duration
	// ParallelStep updates the shard's chunks in parallel, up to
	// GOMAXPROCS at once, while the pull of a push-pull reads the ones
	// done (stepLocked). Off by default: on 2 cores it measured within the
	// noise of the serial update; it is there to be measured where the
	// cores are (docs/BENCHMARKS.md).
	ParallelStep bool
	// CheckpointDir, when set, is where the shard checkpoints every
	// CheckpointEvery updates and resumes from at start.
	CheckpointDir   string
	CheckpointEvery int64
	// CheckpointErrorsWarn: a checkpoint that cannot be written during
	// the run is logged and the shard serves on. Otherwise (the default)
	// it is also sent on Failed, and the shard's owner stops it: a run
	// that believes it is checkpointed must not go on without checkpoints.
	CheckpointErrorsWarn bool
	// Journal, with a CheckpointDir, appends every update to a journal
	// there before applying it, and a starting shard replays what the
	// journal holds past its newest checkpoint: a shard killed and
	// restarted loses no acknowledged update (journal.go).
	Journal bool
	// Logger receives events; nil discards them.
	Logger *slog.Logger
	// StallWarning, when > 0, is how long pulls may wait for other
	// workers before the shard logs, once per StallWarning while they
	// wait, which workers it waits for, for which step, and since when
	// (Stall reports the same).
	StallWarning time.Duration
	// Timeline, when set, records the shard's spans: each pull, push and
	// push-pull (row worker+1), the waits for other workers, and the
	// optimizer steps (row 0).
	Timeline *timeline.Writer
	// OnWait, when set, is called with the length of every wait a pull
	// made for other workers (a sync barrier, the SSP bound), under the
	// shard's lock: it must be quick and must not call the shard.
	OnWait func(time.Duration)
}

// DefaultConfig is an async single shard with the default optimizer; Plan
// and Layout must still be set.
func DefaultConfig() Config {
	return Config{Mode: consistency.Async, Optimizer: optim.DefaultConfig(), MaxWait: 10 * time.Minute}
}

func (c Config) validate() error {
	if c.MaxWait < 0 {
		return fmt.Errorf("max wait %v: want > 0 (0: the default, 10 minutes)", c.MaxWait)
	}
	if !c.Mode.UsesServers() {
		return fmt.Errorf("mode %s: not a parameter-server mode (want %s, %s or %s)", c.Mode, consistency.Async, consistency.Sync, consistency.SSP)
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
	if c.Workers < 1 || c.Workers > MaxWorkers {
		return fmt.Errorf("workers %d: want 1..%d", c.Workers, MaxWorkers)
	}
	if c.BackupWorkers < 0 || c.BackupWorkers >= c.Workers {
		return fmt.Errorf("backup workers %d: want 0..%d for %d workers", c.BackupWorkers, c.Workers-1, c.Workers)
	}
	if c.Journal && c.CheckpointDir == "" {
		return errors.New("journal: needs a checkpoint directory to write it in")
	}
	if c.BackupWorkers > 0 && c.Mode != consistency.Sync {
		return fmt.Errorf("backup workers %d: only sync mode has backup workers, this is %s", c.BackupWorkers, c.Mode)
	}
	if c.Staleness < 0 {
		return fmt.Errorf("staleness %d: want >= 0", c.Staleness)
	}
	if c.CheckpointEvery < 0 {
		return fmt.Errorf("checkpoint every %d: want >= 0", c.CheckpointEvery)
	}
	return c.Optimizer.Validate()
}

// synchronous reports whether pushes go through the barrier: sync, and
// ssp with staleness 0.
func (c Config) synchronous() bool { return c.Mode.Synchronous(c.Staleness) }

// chunk is one owned chunk of the vector with its optimizer state.
type chunk struct {
	r   shard.Range
	buf *valueBuf // the chunk's values now (buf.data)
	opt *optim.Optimizer
	// maxValue and maxState bound the magnitudes in values and in the
	// optimizer's state (growth.go); +Inf until measured.
	maxValue, maxState float64
}

// valueBuf holds one version of a chunk's values. The chunk holds a
// reference to its current version, and each reader that sends the values
// after the shard's lock is let go (ChunkRead.Hold) holds one more until
// it is done. An update writes in place while the chunk's is the only
// reference, and into another buffer otherwise (copy-on-write), so a held
// version never changes: a push-pull's reply goes out from the values
// themselves, without a copy under the lock.
type valueBuf struct {
	data []float32
	refs atomic.Int32
}

// newValueBuf returns an unheld buffer of n floats (contents
// undefined), from the shard's free list when it has one.
func (s *Server) newValueBuf(n int) *valueBuf {
	if p := s.freeVals.Get(n); p != nil {
		return valueBufOf(*p)
	}
	return valueBufOf(make([]float32, n))
}

// valueBufOf is data as an unheld valueBuf.
func valueBufOf(data []float32) *valueBuf {
	b := &valueBuf{data: data}
	b.refs.Store(1)
	return b
}

// release drops a reference to b, keeping it for reuse after the last.
func (s *Server) release(b *valueBuf) {
	if b.refs.Add(-1) == 0 {
		s.freeVals.Put(&b.data)
	}
}

// ChunkRead is one chunk as a ChunkReader gets it.
type ChunkRead struct {
	Range shard.Range
	// Values are the chunk's values, to be read before the reader
	// returns (under the shard's lock), or after it returns while held.
	Values []float32
	s      *Server
	buf    *valueBuf
}

// Hold, called while the reader runs, keeps Values as they are after it
// returns, until release is called (once): later updates of the chunk go
// into another buffer meanwhile.
func (c ChunkRead) Hold() (release func()) {
	c.buf.refs.Add(1)
	var once sync.Once
	return func() { once.Do(func() { c.s.release(c.buf) }) }
}

// chunkRead is ch as a ChunkReader gets it (under the shard's lock).
func (s *Server) chunkRead(ch *chunk) ChunkRead {
	return ChunkRead{Range: ch.r, Values: ch.buf.data, s: s, buf: ch.buf}
}

// ownLocked makes ch's buffer one no reader holds, for a write in place
// that is not an update (restoring a checkpoint): a fresh one if a reader
// holds the current one, its contents undefined.
func (s *Server) ownLocked(ch *chunk) {
	if ch.buf.refs.Load() > 1 {
		b := s.newValueBuf(len(ch.buf.data))
		s.release(ch.buf)
		ch.buf = b
	}
}

// Server is one parameter-server shard.
type Server struct {
	cfg    Config
	log    *slog.Logger
	ranges []shard.Range
	floats int // floats owned

	mu     sync.Mutex // guards everything below
	chunks []chunk    // owned chunks in vector order
	// chunkAt holds where each chunk's floats begin in the share.
	chunkAt []int
	clock   int64
	// changed is closed (and replaced) whenever clock or progress moves,
	// waking the calls that wait for them.
	changed chan struct{}
	// lastStep is the last step accepted per worker, for deduplication.
	lastStep map[int64]int64
	// progress counts, per worker, the steps it pushed (ssp).
	progress map[int64]int64
	// live are the workers sync and ssp wait for, in order (members.go).
	live []int64
	bar  *barrier // sync
	// barPrev holds, for each worker in the barrier's step, its lastStep
	// before that push (absent: none), so a checkpoint taken mid-step can
	// record the state of the last whole step.
	barPrev map[int64]*int64
	scratch []float32 // ssp: the scaled gradient
	stats   Stats

	// waiters counts the pulls waiting for other workers, waitSince is
	// when the current spell of waiting began (some pull has waited ever
	// since), stallLogged when the stall was last logged.
	waiters                int
	waitSince, stallLogged time.Time

	// freeVals keeps the chunks' value buffers that copy-on-write let go
	// (valueBuf), for the next updates that need one.
	freeVals *freelist.List[float32]

	ckpt checkpointer
	jour *journal // with Config.Journal
	// failed carries the first checkpoint error during the run (Failed).
	failed chan error
}

// Stats are counters of a shard since it started.
type Stats struct {
	Pushes     int64
	Duplicates int64
	Dropped    int64
	Rejected   int64
	// RejectedBy counts the rejected pushes by reason (RejectedShape,
	// RejectedNonFinite, …; "other" for any the shard did not tag).
	RejectedBy map[string]int64
	Pulls      int64
	// ShortSteps counts sync steps applied with fewer pushes than
	// expected because workers left during the step (WorkerGone); each
	// is the mean over the pushes that arrived.
	ShortSteps int64
	// Staleness counts pushes by how many updates old their gradient was;
	// StalenessBuckets-1 counts everything at or above it.
	Staleness consistency.Staleness
	// Waits counts the pulls that waited for other workers (a sync
	// barrier, the SSP bound) and WaitSeconds their total wait.
	Waits       int64
	WaitSeconds float64
	// Left and Joined count the live set's changes (sync and SSP): workers
	// membership took out, and workers that came (back) into it after the
	// start.
	Left, Joined int64
	// Checkpoints counts the checkpoints written; LastCheckpoint is when
	// the newest was, at clock LastCheckpointClock (zero: none yet).
	Checkpoints         int64
	LastCheckpoint      time.Time
	LastCheckpointClock int64
}

// StalenessBuckets bounds the staleness histogram: it counts stalenesses
// 0 to StalenessBuckets-1.
const StalenessBuckets = 64

// New returns a shard holding its chunks of initial, which has
// cfg.Plan.VectorLen floats and is copied. With a CheckpointDir, it
// resumes from the newest checkpoint there instead, if there is one.
func New(cfg Config, initial []float32) (*Server, error) {
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 10 * time.Minute
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
		if cfg.Mode == consistency.Async {
			cfg.Workers = MaxWorkers
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("parameter server: %w", err)
	}
	if len(initial) != cfg.Plan.VectorLen {
		return nil, fmt.Errorf("parameter server: initial vector has %d floats, want %d", len(initial), cfg.Plan.VectorLen)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, lastStep: map[int64]int64{}, progress: map[int64]int64{}, changed: make(chan struct{}), failed: make(chan error, 1)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "ps", "shard", cfg.Shard)
	s.ranges = cfg.Plan.Ranges(cfg.Shard)
	// Room for a few versions of every chunk (a reply in flight per
	// worker holds one), at most 1 GiB of them unless that is less than
	// one more version of each: the list keeps only what was in use at
	// once, and what it does not keep is allocated again.
	keep := 4*len(s.ranges) + 8
	if b := 4 * cfg.Plan.ChunkFloats; b > 0 {
		keep = min(keep, max(len(s.ranges)+8, (1<<30)/b))
	}
	s.freeVals = freelist.New[float32](keep)
	for _, r := range s.ranges {
		o, err := optim.New(cfg.Optimizer, r.Len)
		if err != nil {
			return nil, fmt.Errorf("parameter server: %w", err)
		}
		ch := chunk{r: r, buf: valueBufOf(append([]float32(nil), initial[r.Off:r.End()]...)), opt: o}
		ch.unbound()
		s.chunks = append(s.chunks, ch)
		s.chunkAt = append(s.chunkAt, s.floats)
		s.floats += r.Len
	}
	if cfg.Mode != consistency.Async {
		s.live = make([]int64, cfg.Workers)
		for i := range s.live {
			s.live[i] = int64(i)
		}
	}
	if cfg.synchronous() {
		s.bar = newBarrier(s.live, cfg.BackupWorkers, s.floats)
		s.barPrev = map[int64]*int64{}
	} else if cfg.Mode == consistency.SSP {
		s.scratch = make([]float32, s.floats)
	}
	if cfg.CheckpointDir != "" {
		s.ckpt = checkpointer{dir: cfg.CheckpointDir, every: cfg.CheckpointEvery}
		if err := s.resume(); err != nil {
			return nil, fmt.Errorf("parameter server: %w", err)
		}
	}
	if cfg.Journal {
		n, err := s.replayJournal()
		if err != nil {
			return nil, fmt.Errorf("parameter server: %w", err)
		}
		if n > 0 {
			s.log.Info("replayed the journal", "updates", n, "clock", s.clock)
		}
		if err := s.startJournalLocked(s.clock); err != nil {
			return nil, fmt.Errorf("parameter server: journal: %w", err)
		}
	}
	return s, nil
}

// Config returns the shard's configuration.
func (s *Server) Config() Config { return s.cfg }

// Ranges returns the chunks this shard owns, in vector order. Callers must
// not modify the slice.
func (s *Server) Ranges() []shard.Range { return s.ranges }

// Floats is the number of floats this shard owns.
func (s *Server) Floats() int { return s.floats }

// Clock returns the number of updates applied so far.
func (s *Server) Clock() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clock
}

// Stats returns a copy of the shard's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Staleness = maps.Clone(st.Staleness)
	st.RejectedBy = maps.Clone(st.RejectedBy)
	return st
}

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

// waitLocked blocks until ready (called under s.mu) holds, ctx ends or
// MaxWait passes; s.mu is held again when it returns. When the wait ends
// first, the error is an ErrWaitTimeout that also wraps ctx's error
// (context.Canceled, or context.DeadlineExceeded for a deadline or
// MaxWait) and says what the shard was waiting for.
func (s *Server) waitLocked(ctx context.Context, worker, step int64, what string, ready func() bool) error {
	if ready() {
		return nil
	}
	defer s.countWaitLocked(time.Now(), worker, step)
	if s.waiters++; s.waiters == 1 {
		s.waitSince = time.Now()
	}
	defer func() { s.waiters-- }()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.MaxWait)
	defer cancel()
	var stall <-chan time.Time
	if s.cfg.StallWarning > 0 {
		t := time.NewTicker(s.cfg.StallWarning)
		defer t.Stop()
		stall = t.C
	}
	for !ready() {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
			s.mu.Lock()
		case <-stall:
			s.mu.Lock()
			s.logStallLocked(what)
		case <-ctx.Done():
			s.mu.Lock()
			if ready() {
				return nil
			}
			return fmt.Errorf("%w: %s: %s: %w", ErrWaitTimeout, what, s.waitingForLocked(), ctx.Err())
		}
	}
	return nil
}

// Stall is what a shard's waiting pulls wait for.
type Stall struct {
	// Step is the step the pulls wait to read: in sync mode the step
	// whose pushes are missing; in SSP the slowest workers' next step.
	Step int64
	// Workers are the workers whose pushes would end the wait.
	Workers []int64
	// Since is when the pulls began waiting (some pull has waited
	// without a break since then); Pulls is how many wait now.
	Since time.Time
	Pulls int
}

// Stall says what the shard's pulls wait for; ok is false when none
// waits.
func (s *Server) Stall() (st Stall, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stallLocked()
}

func (s *Server) stallLocked() (Stall, bool) {
	if s.waiters == 0 {
		return Stall{}, false
	}
	st := Stall{Since: s.waitSince, Pulls: s.waiters}
	if s.bar != nil {
		st.Step, st.Workers = s.clock, s.bar.waitingFor(s.clock)
	} else {
		st.Workers, st.Step = s.slowestLocked()
	}
	return st, true
}

// logStallLocked logs what the shard waits for, at most once per
// StallWarning however many pulls wait.
func (s *Server) logStallLocked(what string) {
	st, ok := s.stallLocked()
	if !ok || time.Since(s.stallLogged) < s.cfg.StallWarning*9/10 {
		return
	}
	s.stallLogged = time.Now()
	s.log.Warn("stalled: pulls are waiting for other workers", "waiting_for_workers", st.Workers, "step", st.Step,
		"since", st.Since.UTC().Format(time.RFC3339Nano), "waited", time.Since(st.Since).Round(time.Millisecond), "pulls", st.Pulls, "state", s.waitingForLocked(), "first", what)
}

// waitingForLocked describes who the shard waits for.
func (s *Server) waitingForLocked() string {
	if s.bar != nil {
		return fmt.Sprintf("step %d has %s", s.clock, s.bar.missing(s.clock))
	}
	slow, min := s.slowestLocked()
	return fmt.Sprintf("the slowest worker(s) %v pushed %d steps", slow, min)
}

// slowestLocked returns the workers with the fewest steps pushed (ssp).
func (s *Server) slowestLocked() ([]int64, int64) {
	var slow []int64
	min := int64(math.MaxInt64)
	for _, w := range s.live {
		switch p := s.progress[w]; {
		case p < min:
			min, slow = p, []int64{w}
		case p == min:
			slow = append(slow, w)
		}
	}
	return slow, min
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// WaitToRead blocks until worker may read the weights for step: in sync
// until every earlier step is applied, in ssp while step is more than
// Staleness ahead of the slowest worker; async never waits.
func (s *Server) WaitToRead(ctx context.Context, worker, step int64) error {
	if s.cfg.Mode == consistency.Async || step <= 0 {
		return nil // nothing to wait for (step 0, or the launcher's final read)
	}
	if err := s.checkWorker(worker); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bar != nil {
		return s.waitLocked(ctx, worker, step, fmt.Sprintf("pull for step %d", step), func() bool { return s.clock >= step })
	}
	return s.waitLocked(ctx, worker, step, fmt.Sprintf("pull for step %d with staleness bound %d", step, s.cfg.Staleness), func() bool {
		_, min := s.slowestLocked()
		return step-min <= s.cfg.Staleness
	})
}

// countWaitLocked counts a wait of worker's call for step that began at
// start.
func (s *Server) countWaitLocked(start time.Time, worker, step int64) {
	d := time.Since(start)
	s.cfg.Timeline.Span(int(worker)+1, "barrier wait", start, d, timeline.Arg{Key: "step", Val: step})
	s.stats.Waits++
	s.stats.WaitSeconds += d.Seconds()
	if s.cfg.OnWait != nil {
		s.cfg.OnWait(d)
	}
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
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := p.ChunkAt(r.Off); c <= p.ChunkAt(r.End()-1); c++ {
		ch := &s.chunks[c/p.Servers]
		lo, hi := max(r.Off, ch.r.Off), min(r.End(), ch.r.End())
		copy(dst[lo-r.Off:hi-r.Off], ch.buf.data[lo-ch.r.Off:hi-ch.r.Off])
	}
	return s.clock, nil
}

// View hands every owned chunk, in vector order, to read under the
// shard's lock, as one consistent view, and returns its clock: a Snapshot
// without the copy, for a reader that holds what it sends
// (ChunkRead.Hold). It counts as a pull, as Snapshot does.
func (s *Server) View(read func(ChunkRead)) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.chunks {
		read(s.chunkRead(&s.chunks[i]))
	}
	s.stats.Pulls++
	return s.clock
}

// Snapshot copies every owned value, chunk after chunk in vector order,
// into dst (len Floats()) as one consistent view, and returns its clock.
func (s *Server) Snapshot(dst []float32) (int64, error) {
	if len(dst) != s.floats {
		return 0, fmt.Errorf("%w: snapshot into %d floats, the shard owns %d", ErrInvalidArgument, len(dst), s.floats)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	off := 0
	for _, ch := range s.chunks {
		off += copy(dst[off:], ch.buf.data)
	}
	s.stats.Pulls++
	return s.clock, nil
}

// Push is one gradient from a worker.
type Push struct {
	WorkerID int64
	// Step is the worker's step; (WorkerID, Step) is applied at most once.
	Step int64
	// Clock is the shard clock of the values the gradient was computed
	// from; in sync mode, the step it belongs to.
	Clock int64
	// Ranges are whole owned chunks, in increasing order, without overlap.
	Ranges []shard.Range
	// Grads holds the gradient of each range, concatenated.
	Grads []float32
	// Scanned, when not 0, says that the caller ran ScanGradient over
	// every float of Grads (piece by piece, as they arrived, while they
	// were in the cache) and found them all finite, and is the largest
	// bound it returned: the shard does not scan Grads again. 0 (or any
	// value no scan returns): the shard scans Grads and names the first
	// NaN or ±Inf.
	Scanned float64
}

// PushResult says what a push did.
type PushResult struct {
	Clock     int64
	Duplicate bool
	Dropped   bool
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
		if !p.IsBoundary(r.Off) || !p.IsBoundary(r.End()) {
			return 0, fmt.Errorf("%w: push range %v does not cover whole chunks (chunk %d is %v)", ErrInvalidArgument, r, p.ChunkAt(r.Off), p.Chunk(p.ChunkAt(r.Off)))
		}
		prevEnd = r.End()
		total += r.Len
	}
	return total, nil
}

// Push checks a gradient and applies it as the mode says. A bad range, a
// wrong length, a non-finite value, an unknown worker or a step from the
// far future is an ErrInvalidArgument and changes nothing. In sync mode a
// push for the step after the current one waits (bounded by ctx) for the
// current one to be applied.
func (s *Server) Push(ctx context.Context, in Push) (PushResult, error) {
	return s.PushRead(ctx, in, nil)
}

// ChunkReader receives the values of one owned chunk, right after a push,
// with the push's result. It runs under the shard's lock: it must copy
// what it needs or hold it (ChunkRead.Hold), and return without waiting
// for anything. With
// Config.ParallelStep it may be called from several goroutines at once,
// each with a different chunk, in any order.
type ChunkReader func(res PushResult, c ChunkRead)

// PushRead is Push and, in async mode, a read of the values right after
// the push in the same critical section: read gets each owned chunk as
// soon as the optimizer has updated it (in vector order, or, with
// Config.ParallelStep, from the goroutine that updated it), so a caller
// can send the first chunks while the later ones are still being updated,
// and together they are one consistent view. For a duplicate push read
// gets the values as they are, in vector order. In the other modes read
// is not called (a pull there waits for other workers; see WaitToRead).
// read nil is Push.
func (s *Server) PushRead(ctx context.Context, in Push, read ChunkReader) (PushResult, error) {
	if s.cfg.Mode != consistency.Async {
		read = nil
	}
	res, err := s.push(ctx, in, read)
	if err == nil && read != nil {
		s.mu.Lock()
		s.stats.Pulls++
		s.mu.Unlock()
	}
	if err != nil && errors.Is(err, ErrInvalidArgument) {
		reason := RejectedOther
		var r *rejection
		if errors.As(err, &r) {
			reason = r.reason
		}
		s.mu.Lock()
		s.stats.Rejected++
		if s.stats.RejectedBy == nil {
			s.stats.RejectedBy = map[string]int64{}
		}
		s.stats.RejectedBy[reason]++
		s.mu.Unlock()
	}
	if err == nil && !res.Duplicate {
		s.maybeCheckpoint()
	}
	return res, err
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
	RejectedOther     = "other"      // a refusal no check above tagged
)

// refuse tags a refusal (an ErrInvalidArgument not tagged yet) with its
// reason; other errors and nil pass through.
func refuse(reason string, err error) error {
	var r *rejection
	if err == nil || !errors.Is(err, ErrInvalidArgument) || errors.As(err, &r) {
		return err
	}
	return &rejection{reason, err}
}

func (s *Server) push(ctx context.Context, in Push, read ChunkReader) (PushResult, error) {
	total, err := s.ValidateRanges(in.Ranges)
	if err != nil {
		return PushResult{}, refuse(RejectedShape, err)
	}
	if len(in.Grads) != total {
		return PushResult{}, refuse(RejectedShape, fmt.Errorf("%w: push of %d floats, its ranges hold %d", ErrInvalidArgument, len(in.Grads), total))
	}
	if total != s.floats {
		return PushResult{}, refuse(RejectedShape, fmt.Errorf("%w: push covers %d floats, the shard owns %d: push every owned chunk", ErrInvalidArgument, total, s.floats))
	}
	gmax := in.Scanned
	if gmax < scanFloor {
		if gmax, err = checkFinite(in.Grads, in.Ranges); err != nil {
			return PushResult{}, refuse(RejectedNonFinite, err)
		}
	}
	if err := s.checkWorker(in.WorkerID); err != nil {
		return PushResult{}, refuse(RejectedWorker, err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLiveLocked(in.WorkerID); err != nil {
		return PushResult{}, err
	}
	last, ok := s.lastStep[in.WorkerID]
	if !ok {
		last = -1
	}
	switch {
	case in.Step < 0:
		// The worker's record would sit below every real step: in async
		// mode each of them would then be too far past it.
		return PushResult{}, refuse(RejectedStep, fmt.Errorf("%w: push for step %d from worker %d: steps count from 0", ErrInvalidArgument, in.Step, in.WorkerID))
	case s.cfg.Mode == consistency.Async && in.Step > last+MaxStepGap:
		// A step far past the worker's own would make every real push up
		// to it a "duplicate": one forged push could stop a run learning.
		return PushResult{}, refuse(RejectedStep, fmt.Errorf("%w: push for step %d from worker %d: more than %d steps past its last push (step %d); a worker pushes at most every %d steps",
			ErrInvalidArgument, in.Step, in.WorkerID, MaxStepGap, last, MaxStepGap))
	case s.bar != nil && in.Step > max(last, s.clock)+MaxStepGap:
		// The same in sync mode, where the run would stall: the worker's
		// pushes would never reach the barrier again. A worker that joins
		// a run under way starts at the shard's step, so that is the base
		// until it has pushed. (SSP's bound holds steps to the slowest
		// worker's.)
		return PushResult{}, refuse(RejectedStep, fmt.Errorf("%w: push for step %d from worker %d: more than %d steps past the shard's step %d and the worker's last push (step %d)",
			ErrInvalidArgument, in.Step, in.WorkerID, MaxStepGap, s.clock, last))
	}
	if ok && in.Step <= last {
		s.stats.Duplicates++
		res := PushResult{Clock: s.clock, Duplicate: true}
		if read != nil {
			for i := range s.chunks {
				read(res, s.chunkRead(&s.chunks[i]))
			}
		}
		return res, nil
	}
	switch {
	case s.bar != nil:
		res, err := s.pushSyncLocked(ctx, in, gmax)
		return res, refuse(RejectedStep, err)
	case s.cfg.Mode == consistency.SSP:
		_, min := s.slowestLocked()
		if in.Step > min+s.cfg.Staleness {
			return PushResult{}, refuse(RejectedStep, fmt.Errorf("%w: push for step %d from worker %d: more than the staleness bound %d ahead of the slowest worker (%d steps pushed)",
				ErrInvalidArgument, in.Step, in.WorkerID, s.cfg.Staleness, min))
		}
		// Each push moves the weights by 1/N of its gradient, N the live
		// workers, so that a round of pushes makes one mean step.
		inv := 1 / float32(max(len(s.live), 1))
		gmax *= float64(inv)
		if err := s.checkGrowthLocked(in, gmax); err != nil {
			return PushResult{}, err
		}
		for i, g := range in.Grads {
			s.scratch[i] = g * inv
		}
		p := max(s.progress[in.WorkerID], in.Step+1)
		res := s.applyLocked(in, s.scratch, gmax, nil, [][2]int64{{in.WorkerID, p}})
		s.progress[in.WorkerID] = p
		s.notifyLocked()
		return res, nil
	default:
		if err := s.checkGrowthLocked(in, gmax); err != nil {
			return PushResult{}, err
		}
		return s.applyLocked(in, in.Grads, gmax, read, nil), nil
	}
}

// MaxStepGap bounds how far past a worker's last push (or past step 0,
// for its first) an async push's step may be, and a sync push's past the
// shard's step or the worker's last push, whichever is later: Downpour's
// --push-every is at most this, and a forged push cannot mark more than
// this many of the worker's real pushes as duplicates. (The barrier holds
// the clock a sync push names, not the worker's own step count, which the
// duplicate check reads; SSP's bound holds steps to the slowest worker's.)
const MaxStepGap = 1024

// applyLocked applies one update (async, ssp), whose largest magnitude
// is gmax, and counts it; read, when not nil, gets each chunk right after
// its update.
func (s *Server) applyLocked(in Push, grads []float32, gmax float64, read ChunkReader, progress [][2]int64) PushResult {
	s.journalLocked(journalRecord{clock: s.clock + 1, steps: [][2]int64{{in.WorkerID, in.Step}}, progress: progress, grads: grads})
	staleness := max(s.clock-in.Clock, 0)
	res := PushResult{Clock: s.clock + 1, Staleness: staleness}
	var after func(ch *chunk)
	if read != nil {
		after = func(ch *chunk) { read(res, s.chunkRead(ch)) }
	}
	s.stepLocked(grads, gmax, after)
	s.lastStep[in.WorkerID] = in.Step
	s.clock++
	s.stats.Pushes++
	s.stats.Staleness.Add(min(staleness, StalenessBuckets-1))
	s.captureLocked()
	return res
}

// stepLocked runs the optimizer of every chunk over grads (the shard's
// floats, chunk after chunk, none larger in magnitude than gmax), calling
// after (when not nil) on each chunk once it is updated: in vector order,
// from the calling goroutine, unless the step is parallel. With
// Config.ParallelStep, several chunks and a share of at least
// parallelStepFloats, up to GOMAXPROCS goroutines take the chunks in
// order, and each updates a chunk (each chunk has its own optimizer state,
// so the values are the same bit for bit) and then calls after on it, so
// that each chunk goes to the reply as soon as it is ready: the update is
// memory-bound, and on one core it held the shard's lock for most of a
// push of the 670k MLP.
func (s *Server) stepLocked(grads []float32, gmax float64, after func(*chunk)) {
	defer s.cfg.Timeline.Since(0, "optimizer step", time.Now(), timeline.Arg{Key: "clock", Val: s.clock})
	step := func(i int, g []float32) {
		ch := &s.chunks[i]
		ch.maxValue, ch.maxState, _ = ch.opt.StepBound(ch.maxValue, ch.maxState, gmax)
		dst := ch.buf
		if dst.refs.Load() > 1 { // a reply still sends these values
			dst = s.newValueBuf(len(ch.buf.data))
		}
		if err := ch.opt.StepInto(dst.data, ch.buf.data, g); err != nil {
			// Lengths were checked on the way in; this is a bug.
			panic(fmt.Sprintf("ps: optimizer step on chunk %v: %v", ch.r, err))
		}
		if dst != ch.buf {
			s.release(ch.buf)
			ch.buf = dst
		}
	}
	n := len(s.chunks)
	par := min(runtime.GOMAXPROCS(0), n)
	if !s.cfg.ParallelStep || par < 2 || s.floats < parallelStepFloats {
		at := 0
		for i := range s.chunks {
			step(i, grads[at:at+s.chunks[i].r.Len])
			at += s.chunks[i].r.Len
			if after != nil {
				after(&s.chunks[i])
			}
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range par {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				at := s.chunkAt[i]
				step(i, grads[at:at+s.chunks[i].r.Len])
				if after != nil {
					after(&s.chunks[i])
				}
			}
		})
	}
	wg.Wait()
}

// parallelStepFloats is the smallest share whose chunks stepLocked
// updates in parallel: below it starting goroutines costs more than it
// saves.
const parallelStepFloats = 1 << 16

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

// checkFinite returns the largest magnitude in g, the floats of ranges
// rs, or an error naming the first NaN or ±Inf.
func checkFinite(g []float32, rs []shard.Range) (float64, error) {
	i, gmax := ScanGradient(g)
	if i < 0 {
		return gmax, nil
	}
	return 0, fmt.Errorf("%w: gradient at index %d is %v, want a finite value", ErrInvalidArgument, vectorIndex(i, rs), g[i])
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

// ScanGradient returns the index of the first NaN or ±Inf in g, or -1
// and a bound on the magnitudes in g: the largest magnitude where that is
// at least scanFloor, else scanFloor. NaN, ±Inf and every float32 of
// magnitude scanFloor or more have an exponent of at least
// scanFloorExp: adding (256 − scanFloorExp) to the exponent carries into
// the cleared sign bit exactly then. It tests sixteen floats at a time in
// AVX2 registers where there are (scan_amd64.s; 5-6x the words over the
// default model's wider sibling), else two at a time in a 64-bit word,
// branch-free over blocks, and looks at a block float by
// float (for the first NaN or ±Inf, and the largest magnitude) only when
// the test hits: every push is checked whole before anything is applied,
// so this runs over every gradient, and ordinary gradients, all below
// scanFloor, cost no more than the finite check alone. rpc runs it over
// each piece of a push as it arrives (the push's bound is the largest of
// the pieces') and passes the bound as Push.Scanned.
func ScanGradient(g []float32) (int, float64) {
	const (
		exp   = 0x7f8000007f800000
		carry = (256 - scanFloorExp) << 23 * (1 + 1<<32)
		sign  = 0x8000000080000000
		block = 1024 // floats
	)
	var top float32 // the largest magnitude in the blocks that hit
	for lo := 0; lo < len(g); lo += block {
		var hit uint64
		b := g[lo:min(lo+block, len(g))]
		// Sixteen floats at a time in AVX2 registers where there are
		// (all but a tail), then the rest two a word.
		k, vhit := hitsVec(b, carry&0xffffffff)
		if vhit {
			hit = sign
		}
		b = b[k:]
		// Two floats per 8-byte load; a float before an 8-byte boundary
		// and one left over at the end are tested alone.
		if len(b) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
			hit |= (uint64(math.Float32bits(b[0]))&exp + carry) & sign
			b = b[1:]
		}
		if len(b) >= 2 {
			words := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/2)
			for _, w := range words {
				hit |= (w&exp + carry) & sign
			}
		}
		if len(b)%2 == 1 {
			hit |= (uint64(math.Float32bits(b[len(b)-1]))&exp + carry) & sign
		}
		if hit == 0 {
			continue
		}
		for j, v := range g[lo:min(lo+block, len(g))] {
			if math.Float32bits(v)&0x7f800000 == 0x7f800000 {
				return lo + j, 0
			}
			top = max(top, float32(math.Abs(float64(v))))
		}
	}
	return -1, max(float64(top), scanFloor)
}

// scanFloor is the magnitude below which ScanGradient does not look at
// gradients float by float: 2^20, far above any ordinary gradient, and
// far enough below MaxMagnitude to prove every update it bounds safe.
const (
	scanFloorExp = 127 + 20
	scanFloor    = 1 << 20
)
