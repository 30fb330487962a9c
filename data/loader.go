package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"
	"sync/atomic"
)

// Errors of the Loader, tested with errors.Is.
var (
	// ErrClosed: the Loader was closed.
	ErrClosed = errors.New("data: loader closed")
	// ErrNotStarted: Next before the first Start.
	ErrNotStarted = errors.New("data: loader not started: call Start(ctx, epoch) first")
	// ErrAllHeld: Next while the caller holds every batch buffer, so none
	// could ever be filled; Release one first.
	ErrAllHeld = errors.New("data: every batch buffer is held: Release one before Next")
)

// errRestarted cancels a run that a new Start replaces; nobody sees it.
var errRestarted = errors.New("data: epoch replaced by a new Start")

// Batch is one batch of samples, owned by the caller between Loader.Next
// and Loader.Release. Its slices live in a buffer the Loader reuses: do not
// keep them after Release.
type Batch struct {
	X       []float32 // Len()·c·h·w values, sample after sample, channels first
	Y       []int32   // Len() labels
	Indices []int     // Len() dataset indices, in the order of X and Y
	Epoch   int       // the epoch passed to Start
	Index   int       // the batch's position in its epoch, from 0

	x       []float32 // full-size buffers that X, Y, Indices slice
	y       []int32
	indices []int
	loader  *Loader
	held    bool // between Next and Release
}

// Len is the number of samples in the batch; only an epoch's last batch
// can be short.
func (b *Batch) Len() int { return len(b.Y) }

func newBatch(batch, size int, l *Loader) *Batch {
	return &Batch{x: make([]float32, batch*size), y: make([]int32, batch), indices: make([]int, batch), loader: l}
}

// fill gathers the samples idx (at most the buffer's size) from ds.
func (b *Batch) fill(ds Dataset, size int, idx []int) {
	n := len(idx)
	b.X, b.Y, b.Indices = b.x[:n*size], b.y[:n], b.indices[:n]
	copy(b.Indices, idx)
	ds.Gather(b.Indices, b.X, b.Y)
}

// LoaderConfig configures a Loader.
type LoaderConfig struct {
	// Batch is the number of samples per batch, ≥ 1.
	Batch int
	// Depth is how many batches the Loader prepares ahead of the caller,
	// ≥ 1. It allocates Depth+1 batch buffers: Depth queued and one held
	// by the caller.
	Depth int
	// DropLast drops an epoch's final batch when it is short, as PyTorch's
	// DataLoader(drop_last=True). By default that batch is delivered.
	DropLast bool
}

// DefaultLoaderConfig is batches of 64, prepared 2 ahead, last short batch
// kept.
func DefaultLoaderConfig() LoaderConfig { return LoaderConfig{Batch: 64, Depth: 2} }

func (cfg LoaderConfig) validate() error {
	var errs []error
	if cfg.Batch < 1 {
		errs = append(errs, fmt.Errorf("batch %d: want ≥ 1", cfg.Batch))
	}
	if cfg.Depth < 1 {
		errs = append(errs, fmt.Errorf("depth %d: want ≥ 1", cfg.Depth))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("loader config (start from DefaultLoaderConfig): %w", err)
	}
	return nil
}

// Loader delivers one rank's batches of an epoch, in the Sampler's order,
// gathered ahead of time on a goroutine of its own into a fixed pool of
// buffers: once the pool is warm, Next and Release allocate nothing.
//
// Start, Next and Close are meant for one goroutine, the consumer; Release
// may be called from any goroutine. Close must be called to stop the
// prefetching goroutine.
type Loader struct {
	ds    Dataset
	s     *Sampler
	cfg   LoaderConfig
	size  int // floats per sample
	steps int
	free  chan *Batch  // buffers not filled, not queued and not held; capacity Depth+1
	nbuf  int32        // buffers in the pool
	held  atomic.Int32 // buffers between Next and Release
	order []int        // the epoch's indices; written by Start while no run is live

	mu     sync.Mutex
	cur    *run // the latest epoch, or nil before the first Start
	closed bool
}

// run is one epoch's producer.
type run struct {
	epoch  int
	ready  chan *Batch // filled batches; closed by the producer when it ends
	err    error       // why it ended (nil: the epoch is complete); set before ready closes
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the producer has returned
}

// NewLoader returns a Loader of ds's samples that s picks, in batches as cfg
// says. s must be over ds.Len() samples. The Loader starts no goroutine
// until Start.
func NewLoader(cfg LoaderConfig, ds Dataset, s *Sampler) (*Loader, error) {
	if ds == nil || s == nil {
		return nil, errors.New("data: NewLoader: want a non-nil Dataset and Sampler")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if s.Len() != ds.Len() {
		return nil, fmt.Errorf("data: NewLoader: sampler is over %d samples but %s holds %d, want the same", s.Len(), ds.Name(), ds.Len())
	}
	c, h, w := ds.Shape()
	l := &Loader{
		ds: ds, s: s, cfg: cfg, size: c * h * w,
		steps: s.Steps(cfg.Batch, cfg.DropLast),
		free:  make(chan *Batch, cfg.Depth+1),
		nbuf:  int32(cfg.Depth + 1),
	}
	// No batch holds more than the rank's samples of an epoch, however
	// large cfg.Batch is (a batch of 10⁸ is one batch of them all, as in
	// PyTorch, not 10⁸ samples' worth of buffers).
	rows := min(cfg.Batch, max(s.PerRank(), 1))
	for range cfg.Depth + 1 {
		l.free <- newBatch(rows, l.size, l)
	}
	return l, nil
}

// Steps is the number of batches in each epoch.
func (l *Loader) Steps() int { return l.steps }

// Start begins preparing epoch's batches on a new goroutine, abandoning
// (and waiting out) any epoch still in progress; batches of an earlier
// epoch that the caller still holds stay valid until released. ctx bounds
// the goroutine: once it is done, the goroutine ends and Next reports
// ctx's cause. Start does not block on the data.
func (l *Loader) Start(ctx context.Context, epoch int) error {
	return l.StartAt(ctx, epoch, 0)
}

// StartAt is Start from the batch with index first of the epoch on (a
// worker that rejoins a run begins where the run is); first must be in
// 0..Steps().
func (l *Loader) StartAt(ctx context.Context, epoch, first int) error {
	if first < 0 || first > l.steps {
		return fmt.Errorf("loader: start at batch %d of epoch %d: want 0..%d", first, epoch, l.steps)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.cur != nil {
		l.stopLocked(errRestarted)
	}
	l.order = l.s.Indices(epoch, l.order)
	rctx, cancel := context.WithCancelCause(ctx)
	r := &run{epoch: epoch, ready: make(chan *Batch, l.cfg.Depth), cancel: cancel, done: make(chan struct{})}
	l.cur = r
	go l.produce(rctx, r, l.order, first)
	return nil
}

// stopLocked ends the current run, waits for its goroutine and returns the
// batches it queued to the pool. l.mu must be held.
func (l *Loader) stopLocked(cause error) {
	r := l.cur
	r.cancel(cause)
	<-r.done
	for b := range r.ready { // closed by the producer
		l.free <- b
	}
}

// produce is the goroutine of one run; Start starts it, stopLocked waits
// for it.
func (l *Loader) produce(ctx context.Context, r *run, order []int, first int) {
	defer close(r.done)
	var err error
	defer func() {
		r.err = err
		close(r.ready)
	}()
	for k := first; k < l.steps; k++ {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
			return
		}
		var b *Batch
		select {
		case b = <-l.free:
		case <-ctx.Done():
			err = context.Cause(ctx)
			return
		}
		lo := k * l.cfg.Batch
		b.fill(l.ds, l.size, order[lo:min(lo+l.cfg.Batch, len(order))])
		b.Epoch, b.Index = r.epoch, k
		select {
		case r.ready <- b:
		case <-ctx.Done():
			l.free <- b // never blocks: the pool has room for every buffer
			err = context.Cause(ctx)
			return
		}
	}
}

// Next returns the epoch's next batch, waiting for it if needed, or io.EOF
// once the epoch is complete (and again on every later call until the
// next Start). The caller owns the batch until it passes it to Release.
// Next returns ctx.Err() when ctx is done, the cause of Start's ctx when
// that ended the epoch, ErrClosed after Close, ErrNotStarted before the
// first Start, and ErrAllHeld when the caller holds every buffer.
func (l *Loader) Next(ctx context.Context) (*Batch, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	r, closed := l.cur, l.closed
	l.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case r == nil:
		return nil, ErrNotStarted
	}
	select {
	case b, ok := <-r.ready:
		return l.take(r, b, ok)
	default:
	}
	if l.held.Load() >= l.nbuf {
		return nil, fmt.Errorf("%w (all %d)", ErrAllHeld, l.nbuf)
	}
	select {
	case b, ok := <-r.ready:
		return l.take(r, b, ok)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *Loader) take(r *run, b *Batch, ok bool) (*Batch, error) {
	if !ok {
		if r.err != nil {
			return nil, r.err
		}
		return nil, io.EOF
	}
	b.held = true
	l.held.Add(1)
	return b, nil
}

// Release returns b, which Next returned, to the Loader's pool; b and its
// slices must not be used afterwards. It never blocks. Releasing a batch
// twice, or one from another Loader, is a programming error and panics.
func (l *Loader) Release(b *Batch) {
	if b == nil || b.loader != l || !b.held {
		panic("data: Loader.Release: batch not held from this Loader (released twice?)")
	}
	b.held = false
	l.held.Add(-1)
	l.free <- b // never blocks: the pool has room for every buffer
}

// Close stops the prefetching goroutine and waits for it. Later Start and
// Next calls return ErrClosed; held batches may still be released. Close
// is idempotent and always returns nil.
func (l *Loader) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.cur != nil {
		l.stopLocked(ErrClosed)
	}
	return nil
}

// Batches iterates over ds in order, 0 to Len()−1, in batches of batch
// samples, the last one short: for evaluation, on the caller's goroutine.
// The yielded *Batch (Epoch 0) and its slices are reused by the next
// iteration; it must not be passed to a Loader's Release. Batches panics
// if batch < 1.
func Batches(ds Dataset, batch int) iter.Seq[*Batch] {
	if batch < 1 {
		panic(fmt.Sprintf("data: Batches: batch %d, want ≥ 1", batch))
	}
	return func(yield func(*Batch) bool) {
		c, h, w := ds.Shape()
		size := c * h * w
		n := ds.Len()
		b := newBatch(min(batch, n), size, nil)
		idx := make([]int, min(batch, n))
		for k, lo := 0, 0; lo < n; k, lo = k+1, lo+batch {
			idx = idx[:min(batch, n-lo)]
			for i := range idx {
				idx[i] = lo + i
			}
			b.fill(ds, size, idx)
			b.Index = k
			if !yield(b) {
				return
			}
		}
	}
}
