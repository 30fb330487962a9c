package ps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/internal/freelist"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
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
	// ErrJournal: the journal (Config.Journal) could not be written, so
	// the shard takes no update it could lose: the push that met it and
	// every one after it are refused, nothing is applied, and Failed
	// reports it so that the shard's owner stops it (a restarted shard
	// replays what the journal holds).
	ErrJournal = errors.New("the journal cannot be written")
)

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
	// fragLo holds, for each fragment (Config.Fragments), its first
	// chunk, and the number of chunks last (fragment.go).
	fragLo []int
	clock  int64
	// changed is closed (and replaced) whenever clock or progress moves,
	// waking the calls that wait for them.
	changed chan struct{}
	// lastStep is the last step accepted per worker, for deduplication.
	lastStep map[int64]int64
	// droppedStep is, per worker, the step of its last push that sync
	// dropped as a backup worker's late one: a copy sent again (a retry
	// after a lost reply) is answered as dropped too, so the worker
	// counts the drop the shard counted.
	droppedStep map[int64]int64
	// sessions are the workers' sessions (session.go): the one each
	// worker id's latest Join issued. sessionBase is the step that
	// session began at and sessionPushes the pushes it has had taken.
	sessions      map[int64]Session
	sessionBase   map[int64]int64
	sessionPushes map[int64]int64
	// progress counts, per worker, the steps it pushed (ssp).
	progress map[int64]int64
	// live are the workers sync and ssp wait for, in order (members.go).
	live []int64
	// gone are the workers membership took out in async, which keeps no
	// live set: the world size of Config.ScaleLR leaves them out.
	gone map[int64]bool
	// lrScale is the learning-rate scale the chunks' optimizers have
	// (Config.ScaleLR; 1 without it).
	lrScale float64
	// mode is what a push and a pull mean in the configured mode
	// (applier.go), chosen by New.
	mode applier
	// upd is the update rule's state in async and SSP (update.go); nil
	// in sync.
	upd   *updater
	stats Stats

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
	// jourErr is the journal's write failure (ErrJournal): once set, no
	// update is taken.
	jourErr error
	// failed carries the first checkpoint or journal error during the run
	// (Failed).
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
	// RejectedPullsBy counts the refused pulls of workers by reason
	// (RejectedSession, RejectedWorker: CheckPull), and pulls of any
	// reader refused for a wrong plan version (RejectedPlan).
	RejectedPullsBy map[string]int64
	Pulls           int64
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
	// PushBytes counts the bytes of the pushes applied or taken into a
	// sync step, as they travelled (Push.Bytes): with LocalSteps, the
	// pseudo-gradients' traffic into the shard.
	PushBytes int64
}

// StalenessBuckets bounds the staleness histogram: it counts stalenesses
// 0 to StalenessBuckets-1.
const StalenessBuckets = 64

// New returns a shard holding its chunks of initial, which has
// cfg.Plan.VectorLen floats and is copied. With a CheckpointDir, it
// resumes from the newest checkpoint there instead, if there is one.
func New(cfg Config, initial []float32) (*Server, error) {
	if cfg.Mode == consistency.Async && cfg.Workers == 0 {
		if cfg.ScaleLR {
			return nil, errors.New("parameter server: scaling the learning rate by the world size in async mode needs the number of workers (Workers, --workers)")
		}
		if r := cfg.Update.Rule; r == UpdateAverage || r == UpdateDCASGD {
			return nil, fmt.Errorf("parameter server: update rule %s in async mode needs the number of workers (Workers, --workers): %s", r,
				map[Update]string{UpdateAverage: "it divides every push by it", UpdateDCASGD: "it keeps a copy of the shard per worker"}[r])
		}
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("parameter server: %w", err)
	}
	if len(initial) != cfg.Plan.VectorLen {
		return nil, fmt.Errorf("parameter server: initial vector has %d floats, want %d", len(initial), cfg.Plan.VectorLen)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, lastStep: map[int64]int64{}, droppedStep: map[int64]int64{}, progress: map[int64]int64{}, gone: map[int64]bool{}, lrScale: 1,
		sessions: map[int64]Session{}, sessionBase: map[int64]int64{}, sessionPushes: map[int64]int64{},
		changed: make(chan struct{}), failed: make(chan error, 1)}
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
	if err := s.initFragments(); err != nil {
		return nil, fmt.Errorf("parameter server: %w", err)
	}
	if !cfg.synchronous() {
		if cfg.Update.Rule == UpdateDCASGD {
			if need := DCBytes(cfg.Workers, s.floats); need > cfg.Update.DCMaxBytes {
				return nil, fmt.Errorf("parameter server: update rule dcasgd keeps, per worker, a copy of the weights the shard last served it: %d workers × %d floats × 4 bytes = %.1f MiB on shard %d, over the bound of %.1f MiB (--dc-max-mib): raise the bound, spread the model over more shards (--servers), or use --update-rule staleness, which keeps none",
					cfg.Workers, s.floats, float64(need)/(1<<20), cfg.Shard, float64(cfg.Update.DCMaxBytes)/(1<<20))
			}
		}
		s.upd = newUpdater(cfg.Update, s.floats)
	}
	s.mode = newApplier(s)
	if w := cfg.UnstableWarning(); w != "" {
		s.log.Warn(w)
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
	s.baseSessionsLocked()
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
	st.RejectedPullsBy = maps.Clone(st.RejectedPullsBy)
	return st
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
// (ChunkRead.Hold). It counts as a pull, as Snapshot does. It serves no
// worker: a worker's pull is ViewFor.
func (s *Server) View(read func(ChunkRead)) int64 { return s.ViewFor(-1, read) }

// ViewFor is View for worker's pull: the update rule notes that the shard
// served it these weights (update.go). A worker id outside 0..Workers-1
// (-1: a reader that is no worker) serves no one.
func (s *Server) ViewFor(worker int64, read func(ChunkRead)) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.chunks {
		read(s.chunkRead(&s.chunks[i], s.clock))
	}
	s.stats.Pulls++
	s.serveLocked(worker, true)
	return s.clock
}

// Snapshot copies every owned value, chunk after chunk in vector order,
// into dst (len Floats()) as one consistent view, and returns its clock.
// It serves no worker: a worker's read is SnapshotFor.
func (s *Server) Snapshot(dst []float32) (int64, error) { return s.SnapshotFor(-1, dst) }

// SnapshotFor is Snapshot for worker's read, which the update rule notes
// as ViewFor does.
func (s *Server) SnapshotFor(worker int64, dst []float32) (int64, error) {
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
	s.serveLocked(worker, true)
	return s.clock, nil
}

// worldLocked is the world size Config.ScaleLR scales the learning rate
// by: the live workers in sync and SSP, Workers less the gone in async
// (at least 1); 1 without ScaleLR.
func (s *Server) worldLocked() int {
	switch {
	case !s.cfg.ScaleLR:
		return 1
	case s.cfg.Mode == consistency.Async:
		return max(s.cfg.Workers-len(s.gone), 1)
	}
	return max(len(s.live), 1)
}

// scaleLRLocked makes k the scale of every chunk's learning rate.
func (s *Server) scaleLRLocked(k float64) {
	if k == s.lrScale {
		return
	}
	for i := range s.chunks {
		s.chunks[i].opt.SetLRScale(k)
		s.chunks[i].unbound() // the bounds carried forward assumed the old rate
	}
	s.lrScale = k
}

// weightsLocked yields the shard's values, chunk after chunk.
func (s *Server) weightsLocked(yield func([]float32) bool) {
	for i := range s.chunks {
		if !yield(s.chunks[i].buf.data) {
			return
		}
	}
}

// serveLocked notes, for the update rule, that worker w was served the
// whole share as it is now; with journal, the journal gets a record of
// it (a serve that goes with an update is in that update's record
// instead): the staleness and DC-ASGD rules depend on it, and every
// rule reports the staleness.
func (s *Server) serveLocked(w int64, journal bool) {
	if s.upd == nil || s.checkWorker(w) != nil {
		return
	}
	if journal {
		// A journal that cannot be written has stopped the shard
		// (Failed); the read itself went out.
		_ = s.journalLocked(journalRecord{clock: s.clock, served: []int64{w}})
	}
	s.upd.serve(w, s.clock, s.weightsLocked)
}

// Push is one gradient from a worker.
type Push struct {
	WorkerID int64
	// Session is the worker's, from its Join (session.go); a push
	// without it is refused.
	Session Session
	// Step is the worker's step; (WorkerID, Step) is applied at most once.
	Step int64
	// Clock is the shard clock of the values the gradient was computed
	// from; in sync mode, the step it belongs to.
	Clock int64
	// Ranges are whole owned chunks, in increasing order, without overlap.
	Ranges []shard.Range
	// Grads holds the gradient of each range, concatenated.
	Grads []float32
	// Scan, when it covers every float of Grads, is their scan by the
	// caller (piece by piece, as they arrived, while they were in the
	// cache): the shard takes its bound and its first NaN or ±Inf from it
	// and does not pass over Grads again. Otherwise (nil, or a scan of
	// fewer floats) the shard scans Grads itself.
	Scan *Scan
	// Bytes is the push's payload as it travelled (its values in their
	// encoding, and int8's scales), which Stats.PushBytes counts once the
	// push is applied or taken into a sync step; 0 where none travelled.
	Bytes int64
	// frag is the fragment Ranges cover (Config.Fragments; 0 with one),
	// set once they are checked.
	frag int
}

// PushResult says what a push did.
type PushResult struct {
	Clock     int64
	Duplicate bool
	Dropped   bool
	Staleness int64
	// Waited is how long a push-pull's pull waited for other workers
	// before its read (PushPull); zero for a push alone.
	Waited time.Duration
}

// Push checks a gradient and applies it as the mode says. A bad range, a
// wrong length, a non-finite value, an unknown worker or a step from the
// far future is an ErrInvalidArgument, a session that is not the worker's
// an ErrNoSession or ErrWrongSession, and changes nothing. In sync mode a
// push for the step after the current one waits (bounded by ctx) for the
// current one to be applied.
func (s *Server) Push(ctx context.Context, in Push) (PushResult, error) {
	return s.PushRead(ctx, in, nil)
}

// ChunkReader receives the values of one owned chunk, right after a push
// or a push-pull's wait, with the push's result. It runs under the shard's lock: it must copy
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
	if !s.mode.readsWithPush() {
		read = nil
	}
	res, err := s.push(ctx, in, read)
	if err == nil && read != nil {
		s.mu.Lock()
		s.stats.Pulls++
		s.mu.Unlock()
	}
	if reason := RefusedFor(err); reason != "" {
		s.CountRefused(reason)
	} else if errors.Is(err, ErrInvalidArgument) {
		s.CountRefused(RejectedOther)
	}
	if err == nil && !res.Duplicate {
		s.maybeCheckpoint()
	}
	return res, err
}

// PushPull is one worker's push-pull: in, applied as Push applies it, and
// then, when read is not nil, the worker's pull of the values for step
// pullStep, every owned chunk handed to read with the push's result, as
// one consistent view (counted as a pull). When the read goes is the
// mode's: in async each chunk right after its update, in the push's
// critical section (PushRead); in sync and SSP once the pull may read
// (WaitToRead), from one View, res.Waited saying how long it waited.
// Before such a wait, once the push is applied, waiting (when not nil) is
// called outside the shard's lock; an error from it ends the push-pull
// with that error, unread. read nil is Push.
func (s *Server) PushPull(ctx context.Context, in Push, pullStep int64, read ChunkReader, waiting func() error) (PushResult, error) {
	if read == nil || s.mode.readsWithPush() {
		return s.PushRead(ctx, in, read)
	}
	res, err := s.Push(ctx, in)
	if err != nil {
		return res, err
	}
	if waiting != nil {
		if err := waiting(); err != nil {
			return res, err
		}
	}
	start := time.Now()
	if err := s.WaitToRead(ctx, in.WorkerID, pullStep); err != nil {
		return res, err
	}
	res.Waited = time.Since(start)
	read = s.fragmentReader(s.fragmentAt(in.Ranges[0].Off), read)
	s.ViewFor(in.WorkerID, func(c ChunkRead) { read(res, c) })
	return res, nil
}

func (s *Server) push(ctx context.Context, in Push, read ChunkReader) (PushResult, error) {
	total, err := s.ValidateRanges(in.Ranges)
	if err != nil {
		return PushResult{}, refuse(RejectedShape, err)
	}
	if len(in.Grads) != total {
		return PushResult{}, refuse(RejectedShape, fmt.Errorf("%w: push of %d floats, its ranges hold %d", ErrInvalidArgument, len(in.Grads), total))
	}
	if in.frag, err = s.fragmentOf(in, total); err != nil {
		return PushResult{}, refuse(RejectedShape, err)
	}
	read = s.fragmentReader(in.frag, read)
	gmax, err := in.scanned()
	if err != nil {
		return PushResult{}, refuse(RejectedNonFinite, err)
	}
	if err := s.checkWorker(in.WorkerID); err != nil {
		return PushResult{}, refuse(RejectedWorker, err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jourErr != nil {
		return PushResult{}, s.jourErr
	}
	if err := s.checkSessionLocked(in.WorkerID, in.Session); err != nil {
		return PushResult{}, &rejection{RejectedSession, err}
	}
	if err := s.mode.checkLiveLocked(in.WorkerID); err != nil {
		return PushResult{}, err
	}
	last, ok := s.lastStep[in.WorkerID]
	if !ok {
		last = -1
	}
	if in.Step < 0 {
		// The worker's record would sit below every real step: in async
		// mode each of them would then be too far past it.
		return PushResult{}, refuse(RejectedStep, fmt.Errorf("%w: push for step %d from worker %d: steps count from 0", ErrInvalidArgument, in.Step, in.WorkerID))
	}
	if err := s.mode.checkStepLocked(in, last); err != nil {
		return PushResult{}, err
	}
	if ok && in.Step <= last {
		s.stats.Duplicates++
		d, dropped := s.droppedStep[in.WorkerID]
		res := PushResult{Clock: s.clock, Duplicate: true, Dropped: dropped && d == in.Step}
		if read != nil {
			for i := range s.chunks {
				read(res, s.chunkRead(&s.chunks[i], s.clock))
			}
			s.serveLocked(in.WorkerID, true)
		}
		return res, nil
	}
	return s.mode.pushLocked(ctx, in, gmax, read)
}

// MaxStepGap bounds how far past a worker's last push (or past step 0,
// for its first) an async push's step may be, and a sync push's past the
// shard's step or the worker's last push, whichever is later: Downpour's
// --push-every is at most this. Only the worker's own session may push
// for it (session.go), so the bound guards against a worker's own bug,
// not against other clients; and a join takes back whatever an earlier
// session's pushes could not have reached (reinLocked), so steps another
// client pushed past the worker's do not make it skip its own. (The
// barrier holds the clock a sync push names, not the worker's own step
// count, which the duplicate check reads; SSP's bound holds steps to the
// slowest worker's.)
const MaxStepGap = 1024

// applyLocked applies one push (async, ssp), whose largest magnitude is
// gmax, from one of n workers, as the update rule says, and counts it;
// read, when not nil, gets each chunk right after its update (a serve of
// the pushing worker). It refuses, changing nothing, an update that could
// grow a value past MaxMagnitude.
func (s *Server) applyLocked(in Push, gmax float64, n int, read ChunkReader, progress [][2]int64) (PushResult, error) {
	staleness := s.upd.staleness(s.clock, in)
	grads, gmax := s.upd.grads(in, gmax, staleness, n, s.weightsLocked)
	s.scaleLRLocked(float64(s.worldLocked()))
	if err := s.checkGrowthLocked(in, gmax); err != nil {
		return PushResult{}, err
	}
	rec := journalRecord{clock: s.clock + 1, steps: [][2]int64{{in.WorkerID, in.Step}}, progress: progress, lrScale: s.lrScale, grads: grads}
	if read != nil {
		rec.served = []int64{in.WorkerID}
	}
	if err := s.journalLocked(rec); err != nil {
		return PushResult{}, err
	}
	res := PushResult{Clock: s.clock + 1, Staleness: staleness}
	var after func(ch *chunk)
	if read != nil {
		after = func(ch *chunk) { read(res, s.chunkRead(ch, res.Clock)) }
	}
	s.stepChunksLocked(s.fragLo[in.frag], s.fragLo[in.frag+1], grads[:len(in.Grads)], gmax, after)
	s.acceptLocked(in.WorkerID, in.Step)
	s.clock++
	s.stats.Pushes++
	s.stats.PushBytes += in.Bytes
	s.stats.Staleness.Add(min(staleness, StalenessBuckets-1))
	if read != nil {
		s.serveLocked(in.WorkerID, false)
	}
	s.captureLocked()
	return res, nil
}
