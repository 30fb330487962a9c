package tensorcoll

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/collective/collnet"
	"github.com/shoalml/shoal/secure"
)

// Config describes one rank's Session. Start from DefaultConfig.
type Config struct {
	// Rank and Size place this process in the group; LocalRank and
	// LocalSize on its host (reported back to the caller, not used for
	// routing). Open replaces LocalRank and LocalSize with what the group
	// finds: the ranks with this rank's HostID, in rank order.
	Rank, Size, LocalRank, LocalSize int
	// HostID names this machine; default collnet.DefaultHostID().
	HostID string
	// Master is rank 0's rendezvous address, host:port; rank 0 listens
	// there. Unused when Size is 1.
	Master string
	// JobID keeps groups that share a master address apart; equal on
	// every rank.
	JobID string
	// SharedMemory lets ranks on one host talk through shared memory.
	SharedMemory bool
	// ConnectTimeout bounds forming the group (every rank must join the
	// rendezvous within it).
	ConnectTimeout time.Duration
	// CallTimeout, when > 0, bounds every collective: a peer that went
	// silent fails the call (and breaks the Session) instead of hanging it.
	CallTimeout time.Duration
	// SegmentBytes is collective.Config's pipelining segment.
	SegmentBytes int
	// SkipCheck turns off the descriptor exchange before each collective
	// (one small Allgather), trading the mismatch check for latency.
	SkipCheck bool
	// Security, with TLS, runs the rendezvous and every TCP link over
	// mutual TLS (collnet.Config.Security); nil: plaintext.
	Security *secure.Credentials
	// Logger receives setup and failure events; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns shared memory on, a 5-minute connect timeout, a
// 5-minute call timeout and collective's default segments.
func DefaultConfig() Config {
	return Config{SharedMemory: true, ConnectTimeout: 5 * time.Minute, CallTimeout: 5 * time.Minute,
		SegmentBytes: collective.DefaultConfig().SegmentBytes}
}

func (c Config) validate() error {
	if c.Size < 1 || c.Rank < 0 || c.Rank >= c.Size {
		return fmt.Errorf("tensorcoll: rank %d of size %d, want 0 <= rank < size", c.Rank, c.Size)
	}
	if c.LocalRank < 0 || (c.LocalSize > 0 && c.LocalRank >= c.LocalSize) {
		return fmt.Errorf("tensorcoll: local rank %d of local size %d, want 0 <= local rank < local size", c.LocalRank, c.LocalSize)
	}
	if c.ConnectTimeout < 0 || c.CallTimeout < 0 {
		return fmt.Errorf("tensorcoll: negative timeout (connect %v, call %v)", c.ConnectTimeout, c.CallTimeout)
	}
	return nil
}

// ErrBroken wraps the first failure in the errors of every request after a
// collective failed part-way: the group must be formed again.
var ErrBroken = errors.New("collectives broken by an earlier failure")

// ErrClosed is the error of requests submitted after Close, or pending
// when it was called.
var ErrClosed = errors.New("session closed")

// Session is one rank's place in a group. See the package doc.
type Session struct {
	cfg   Config
	tr    collective.Transport
	comms [3]*collective.Communicator // by collective.Compression

	ctx    context.Context // cancelled by Close: ends the running collective
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	queue  []*Op
	closed bool
	wake   chan struct{} // cap 1: queue grew, or closed

	// Owned by the run goroutine.
	broken error
	desc   []float32 // this rank's descriptor
	descs  []float32 // every rank's
	counts []int
}

// Open forms the group through collnet's rendezvous at cfg.Master and
// returns the Session; ctx bounds the connection (with
// cfg.ConnectTimeout).
func Open(ctx context.Context, cfg Config) (*Session, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.ConnectTimeout)
		defer cancel()
	}
	ncfg := collnet.DefaultConfig()
	if cfg.HostID == "" {
		cfg.HostID = collnet.DefaultHostID()
	}
	ncfg.Rank, ncfg.Size, ncfg.Master, ncfg.JobID, ncfg.SharedMemory, ncfg.HostID, ncfg.Logger = cfg.Rank, cfg.Size, cfg.Master, cfg.JobID, cfg.SharedMemory, cfg.HostID, cfg.Logger
	ncfg.Security = cfg.Security
	tr, err := collnet.Connect(ctx, ncfg)
	if err != nil {
		return nil, fmt.Errorf("tensorcoll: rank %d of %d joining through %s: %w", cfg.Rank, cfg.Size, cfg.Master, err)
	}
	s, err := newSession(tr, cfg)
	if err == nil {
		err = s.placeOnHosts(ctx)
	}
	if err != nil {
		if s != nil {
			s.cancel()
		}
		tr.Close()
		return nil, err
	}
	s.start()
	return s, nil
}

// placeOnHosts sets LocalRank and LocalSize from every rank's HostID.
func (s *Session) placeOnHosts(ctx context.Context) error {
	h := fnv.New64a()
	h.Write([]byte(s.cfg.HostID))
	id := h.Sum64()
	mine := []float32{math.Float32frombits(uint32(id)), math.Float32frombits(uint32(id >> 32))}
	all := make([]float32, 2*s.cfg.Size)
	counts := make([]int, s.cfg.Size)
	for i := range counts {
		counts[i] = 2
	}
	if err := s.comms[collective.None].Allgather(ctx, mine, all, counts); err != nil {
		return fmt.Errorf("tensorcoll: rank %d of %d: exchanging host ids: %w", s.cfg.Rank, s.cfg.Size, err)
	}
	s.cfg.LocalRank, s.cfg.LocalSize = 0, 0
	for r := range s.cfg.Size {
		if uint64(math.Float32bits(all[2*r]))|uint64(math.Float32bits(all[2*r+1]))<<32 == id {
			if r < s.cfg.Rank {
				s.cfg.LocalRank++
			}
			s.cfg.LocalSize++
		}
	}
	return nil
}

// New returns a Session over tr, which it owns from then on (Close closes
// it). cfg's Rank and Size must be tr's.
func New(tr collective.Transport, cfg Config) (*Session, error) {
	s, err := newSession(tr, cfg)
	if err != nil {
		return nil, err
	}
	s.start()
	return s, nil
}

// newSession is New without starting the Session's goroutine.
func newSession(tr collective.Transport, cfg Config) (*Session, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if tr.Rank() != cfg.Rank || tr.Size() != cfg.Size {
		return nil, fmt.Errorf("tensorcoll: transport is rank %d of %d, config says %d of %d", tr.Rank(), tr.Size(), cfg.Rank, cfg.Size)
	}
	s := &Session{cfg: cfg, tr: tr, wake: make(chan struct{}, 1),
		desc: make([]float32, descriptorBytes/4), descs: make([]float32, cfg.Size*descriptorBytes/4), counts: make([]int, cfg.Size)}
	for c := range s.comms {
		ccfg := collective.DefaultConfig()
		if cfg.SegmentBytes > 0 {
			ccfg.SegmentBytes = cfg.SegmentBytes
		}
		ccfg.Compression = collective.Compression(c)
		comm, err := collective.New(tr, ccfg)
		if err != nil {
			return nil, err
		}
		s.comms[c] = comm
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// start starts the goroutine that runs the requests.
func (s *Session) start() { s.wg.Go(s.loop) }

// Rank is this process's rank.
func (s *Session) Rank() int { return s.cfg.Rank }

// Size is the number of ranks.
func (s *Session) Size() int { return s.cfg.Size }

// Config is the Session's configuration.
func (s *Session) Config() Config { return s.cfg }

// Op is a submitted request.
type Op struct {
	req    Request
	done   chan struct{}
	err    error
	result []byte
	rows   []int
}

// Done is closed when the op has finished.
func (o *Op) Done() <-chan struct{} { return o.done }

// Wait blocks until the op has finished, or ctx ends, and returns its
// error.
func (o *Op) Wait(ctx context.Context) error {
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Result is an Allgather's output, valid once the op is done: every
// rank's rows, in rank order, and how many rows each rank gave. The
// caller owns it.
func (o *Op) Result() (data []byte, rows []int) { return o.result, o.rows }

// Submit queues req and returns its Op; it does not block. Requests run
// in submission order. An invalid request is refused here, before any
// rank is involved.
func (s *Session) Submit(req Request) (*Op, error) {
	if err := req.validate(s.cfg.Size); err != nil {
		return nil, err
	}
	op := &Op{req: req, done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("%v %q: %w", req.Kind, req.Name, ErrClosed)
	}
	s.queue = append(s.queue, op)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return op, nil
}

// Do submits req and waits for it.
func (s *Session) Do(ctx context.Context, req Request) (*Op, error) {
	op, err := s.Submit(req)
	if err != nil {
		return nil, err
	}
	return op, op.Wait(ctx)
}

// Close fails the pending requests with ErrClosed, ends the running one,
// stops the Session's goroutine and closes the transport.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	s.wg.Wait()
	return s.tr.Close()
}

// loop runs the queued requests one at a time until Close.
func (s *Session) loop() {
	for {
		s.mu.Lock()
		var op *Op
		if len(s.queue) > 0 {
			op = s.queue[0]
			s.queue[0] = nil
			s.queue = s.queue[1:]
		}
		closed := s.closed
		s.mu.Unlock()
		switch {
		case op != nil && closed:
			op.err = fmt.Errorf("%v %q: %w", op.req.Kind, op.req.Name, ErrClosed)
			close(op.done)
			continue
		case op != nil:
			op.err = s.run(op)
			close(op.done)
			continue
		case closed:
			return
		}
		<-s.wake
	}
}

// run executes op; on a failure part-way it breaks the Session.
func (s *Session) run(op *Op) error {
	r := &op.req
	if s.broken != nil {
		return fmt.Errorf("%v %q: %w: %w", r.Kind, r.Name, ErrBroken, s.broken)
	}
	ctx := s.ctx
	if s.cfg.CallTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.CallTimeout)
		defer cancel()
	}
	if !s.cfg.SkipCheck || r.Kind == KindAllgather {
		ds, err := s.exchange(ctx, r)
		if err != nil {
			return s.fail(fmt.Errorf("%v %q: exchanging descriptors: %w", r.Kind, r.Name, err))
		}
		if err := checkDescriptors(ds); err != nil {
			return fmt.Errorf("%v %q: %w", r.Kind, r.Name, err)
		}
		for i, d := range ds {
			s.counts[i] = int(d.Bytes)
		}
	}
	var err error
	switch r.Kind {
	case KindBarrier:
		err = s.comms[collective.None].Barrier(ctx)
	case KindBroadcast:
		err = s.broadcast(ctx, r)
	case KindAllgather:
		op.result, op.rows, err = s.allgather(ctx, r, s.counts)
	case KindAllreduce:
		err = s.allreduce(ctx, r)
	}
	if err != nil {
		return s.fail(fmt.Errorf("%v %q: %w", r.Kind, r.Name, err))
	}
	return nil
}

// fail records err as the Session's first failure, reports it to rank 0's
// record, and closes the transport so the ranks along the ring see it.
func (s *Session) fail(err error) error {
	err = collnet.FirstFailure(s.tr, err)
	s.broken = err
	s.tr.Close()
	if s.cfg.Logger != nil {
		s.cfg.Logger.Error("collective failed; session broken", "component", "tensorcoll", "rank", s.cfg.Rank, "err", err)
	}
	return err
}

// exchange gathers every rank's descriptor of its request.
func (s *Session) exchange(ctx context.Context, r *Request) ([]Descriptor, error) {
	describe(r).put(floatBytes(s.desc))
	n := len(s.desc)
	for i := range s.counts {
		s.counts[i] = n
	}
	if err := s.comms[collective.None].Allgather(ctx, s.desc, s.descs, s.counts); err != nil {
		return nil, err
	}
	all := floatBytes(s.descs)
	ds := make([]Descriptor, s.cfg.Size)
	for i := range ds {
		d, err := parseDescriptor(all[i*descriptorBytes : (i+1)*descriptorBytes])
		if err != nil {
			return nil, fmt.Errorf("rank %d's descriptor: %w", i, err)
		}
		ds[i] = d
	}
	return ds, nil
}
