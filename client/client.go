package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/consistency"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/pscall"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/wire"
)

// Tensor names one tensor of the servers' layout.
type Tensor struct {
	Name   string
	Shape  []int
	Offset int
}

// Info describes the servers a Client is connected to.
type Info struct {
	Tensors   []Tensor
	Plan      shard.Plan
	Mode      consistency.Mode
	Optimizer string
	// Workers, BackupWorkers and Staleness are the mode's parameters.
	Workers, BackupWorkers int
	Staleness              int64
	// Clocks holds each shard's clock when Dial asked.
	Clocks Clocks
}

// The arguments and results of the calls, defined once in package pscall
// for this client and for the training loop (worker.ParameterServers).
type (
	// Clocks holds one clock per shard: the version of the values a pull
	// returned, passed back with the push computed from them.
	Clocks = pscall.Clocks
	// PullArgs say whose pull it is and what it waits for.
	PullArgs = pscall.PullArgs
	// PushArgs is one gradient push.
	PushArgs = pscall.PushArgs
	// PushResult says what the shards did with a push.
	PushResult = pscall.PushResult
	// PushPullArgs is a push and, when Pull is set, the weights after it.
	PushPullArgs = pscall.PushPullArgs
	// PushPullResult says what the shards did with the push, and the
	// clocks of the values pulled.
	PushPullResult = pscall.PushPullResult
)

type options struct {
	transport   pb.Transport
	encoding    pb.Encoding
	callTimeout time.Duration
	maxAttempts int // 0: no cap, retryFor alone bounds the retries
	retryFor    time.Duration
	backoff     time.Duration
	maxBackoff  time.Duration
	keepalive   keepalive.ClientParameters
	dialOpts    []grpc.DialOption
	lanes       int
}

// Option configures a Client.
type Option func(*options)

// WithCallTimeout bounds each call (default 60s) unless the context's own
// deadline is earlier.
func WithCallTimeout(d time.Duration) Option { return func(o *options) { o.callTimeout = d } }

// WithPushEncoding sends pushed gradients as float16 or bfloat16 (half
// the bytes); servers add them in float32. Float16 turns values beyond
// 65504 into Inf, which servers refuse; bfloat16 keeps float32's range.
func WithPushEncoding(e pb.Encoding) Option { return func(o *options) { o.encoding = e } }

// WithRetryFor sets how long a call failing with Unavailable is tried
// again, with backoff, counted from its first try (default 60s: long
// enough for a server to restart from its checkpoint, or a network cut of
// under a minute to heal, for the call to go on where it was). A call
// still failing then returns its last error.
func WithRetryFor(d time.Duration) Option { return func(o *options) { o.retryFor = d } }

// WithKeepalive sets how long a connection may go without reading a byte
// before the client pings the server (gRPC allows no less than 10s), and
// how long it then waits for the answer before it closes the connection
// (defaults 10s and 10s). A network cut or a server host that vanished
// resets nothing: without the ping a call on such a connection waits for
// its whole timeout and fails with DeadlineExceeded, which is not tried
// again. With it the call fails with Unavailable after about time+timeout
// and is tried again on a new connection (WithRetryFor); shards recognise
// a retried push and apply it once. shoal ps accepts pings every 5s.
func WithKeepalive(time, timeout time.Duration) Option {
	return func(o *options) { o.keepalive = keepalive.ClientParameters{Time: time, Timeout: timeout} }
}

// WithRetry caps how many times a call failing with Unavailable is tried
// within WithRetryFor's time (default: no cap), and sets the first backoff
// (default 50ms, doubling to 2s, with jitter).
func WithRetry(attempts int, backoff time.Duration) Option {
	return func(o *options) { o.maxAttempts, o.backoff = attempts, backoff }
}

// MaxLanes bounds WithLanes (the servers refuse more: rpc.MaxLanes).
const MaxLanes = 16

// WithLanes splits each PushPull to a shard over up to k streams, each on
// a connection of its own, every stream carrying a consecutive run of the
// shard's chunks (at most one lane per chunk): several connections'
// readers and writers, and the server's handlers, then share the step's
// bytes. k 1 (the default) is one stream per shard. Push and Pull always
// use one stream.
func WithLanes(k int) Option { return func(o *options) { o.lanes = k } }

// WithTransport sizes the connections' flow-control windows and buffers
// (default shoalpb.DefaultTransport; the zero Transport is gRPC's own
// defaults).
func WithTransport(t pb.Transport) Option { return func(o *options) { o.transport = t } }

// WithDialOptions adds gRPC dial options (credentials, a custom dialer…).
// Without credentials the connection is plaintext. Push reuses one buffer
// for the pieces it sends (gRPC encodes each message before Send returns),
// so a stats handler that reads messages after Send returns would see the
// buffer overwritten.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// Client is connected to every shard of one plan.
type Client struct {
	opts  options
	addrs []string
	conns []*grpc.ClientConn
	stubs []pb.ParameterServerClient
	// pushStubs are the shards over connections of their own: a push and
	// a pull in flight at once then do not share one TCP stream, where
	// the flow-control updates of one queue behind the data of the other.
	pushStubs []pb.ParameterServerClient
	// resolvers hold the address of each connection, two per shard (conns'
	// order), so that SetShardAddr can move a shard's connections.
	resolvers []*manual.Resolver
	// laneStubs are, per shard, the connections of a PushPull's lanes
	// after the first (which uses pushStubs), and laneResolvers their
	// addresses.
	laneStubs     [][]pb.ParameterServerClient
	laneResolvers [][]*manual.Resolver
	info          Info
	// push holds, per shard, its owned chunks merged where adjacent.
	push [][]shard.Range
	// lanes holds, per shard with more than one lane, each lane's ranges.
	lanes [][][]shard.Range
}

// Dial connects to the servers at addrs, which must be the shards of one
// plan in shard order, waits (bounded by ctx) until each answers Info and
// checks that they agree on the layout and plan. Each address is a
// HOST:PORT (checked at once), or a name with a scheme ("scheme://…")
// that a dialer given with WithDialOptions understands.
func Dial(ctx context.Context, addrs []string, opts ...Option) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("client: no server addresses")
	}
	o := options{lanes: 1, transport: pb.DefaultTransport, callTimeout: 60 * time.Second, retryFor: 60 * time.Second, backoff: 50 * time.Millisecond, maxBackoff: 2 * time.Second,
		keepalive: keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 10 * time.Second}}
	for _, f := range opts {
		f(&o)
	}
	if o.lanes < 1 || o.lanes > MaxLanes {
		return nil, fmt.Errorf("client: %d lanes per shard: want 1..%d", o.lanes, MaxLanes)
	}
	if o.keepalive.Time <= 0 || o.keepalive.Timeout <= 0 {
		return nil, fmt.Errorf("client: keepalive every %v with a timeout of %v: want both > 0", o.keepalive.Time, o.keepalive.Timeout)
	}
	if o.maxAttempts < 0 || o.retryFor < 0 || o.backoff <= 0 {
		return nil, fmt.Errorf("client: retry %d times for %v from a backoff of %v: want attempts >= 0 (0: no cap), a time >= 0 and a backoff > 0",
			o.maxAttempts, o.retryFor, o.backoff)
	}
	for i, a := range addrs {
		if err := checkAddr(a); err != nil {
			return nil, fmt.Errorf("client: server address %d of %d, %q: %w", i+1, len(addrs), a, err)
		}
	}
	c := &Client{opts: o, addrs: addrs}
	dialOpts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Reconnect to a restarted server within the retry budget (gRPC's
		// default backoff grows to two minutes).
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}, MinConnectTimeout: 5 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(wire.MaxMessageBytes)),
		// Find a connection that went silent (WithKeepalive).
		grpc.WithKeepaliveParams(o.keepalive),
	}, o.transport.DialOptions()...)
	dialOpts = append(dialOpts, o.dialOpts...)
	for _, a := range addrs {
		conn, err := c.connect(a, dialOpts)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("client: server %s: %w", a, err)
		}
		c.stubs = append(c.stubs, pb.NewParameterServerClient(conn))
		pconn, err := c.connect(a, dialOpts)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("client: server %s: %w", a, err)
		}
		c.pushStubs = append(c.pushStubs, pb.NewParameterServerClient(pconn))
	}
	if err := c.handshake(ctx); err != nil {
		c.Close()
		return nil, err
	}
	c.laneStubs, c.laneResolvers = make([][]pb.ParameterServerClient, len(addrs)), make([][]*manual.Resolver, len(addrs))
	for s, a := range addrs {
		if len(c.lanes[s]) < 2 {
			continue
		}
		for range len(c.lanes[s]) - 1 {
			conn, err := c.connect(a, dialOpts)
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("client: server %s: %w", a, err)
			}
			c.laneStubs[s] = append(c.laneStubs[s], pb.NewParameterServerClient(conn))
			c.laneResolvers[s] = append(c.laneResolvers[s], c.resolvers[len(c.resolvers)-1])
		}
	}
	return c, nil
}

func (c *Client) handshake(ctx context.Context) error {
	infos := make([]*pb.InfoResponse, len(c.stubs))
	for i, s := range c.stubs {
		// WaitForReady: a server that is still starting is waited for, up
		// to ctx's deadline, instead of failing at once. A server killed
		// while it answers (it restarts from its checkpoint) fails the call
		// with Unavailable; that is tried again as any call is.
		err := c.retry(ctx, "client: info from server "+c.addrs[i], func(ctx context.Context) (err error) {
			infos[i], err = s.Info(ctx, &pb.InfoRequest{}, grpc.WaitForReady(true))
			return err
		})
		if err != nil {
			return err
		}
	}
	first := infos[0]
	if first.Plan == nil {
		return fmt.Errorf("client: server %s sent no partition plan", c.addrs[0])
	}
	if first.Plan.Version != shard.Version {
		return fmt.Errorf("client: server %s uses plan version %d, this client %d", c.addrs[0], first.Plan.Version, shard.Version)
	}
	plan := shard.Plan{VectorLen: int(first.Plan.VectorLength), Servers: int(first.Plan.Servers), ChunkFloats: int(first.Plan.ChunkFloats)}
	if err := plan.Validate(); err != nil {
		return fmt.Errorf("client: server %s: %w", c.addrs[0], err)
	}
	if plan.Servers != len(c.addrs) {
		return fmt.Errorf("client: server %s is part of a plan of %d servers, but %d addresses were given", c.addrs[0], plan.Servers, len(c.addrs))
	}
	for i, in := range infos {
		if int(in.Shard) != i {
			return fmt.Errorf("client: server %s says it is shard %d, but it is listed as shard %d", c.addrs[i], in.Shard, i)
		}
		p := in.GetPlan()
		if p.GetVersion() != first.Plan.Version || p.GetVectorLength() != first.Plan.VectorLength || p.GetServers() != first.Plan.Servers || p.GetChunkFloats() != first.Plan.ChunkFloats {
			return fmt.Errorf("client: server %s has plan %v, server %s has %v", c.addrs[i], p, c.addrs[0], first.Plan)
		}
		if in.Mode != first.Mode || in.Workers != first.Workers || in.BackupWorkers != first.BackupWorkers || in.Staleness != first.Staleness {
			return fmt.Errorf("client: server %s runs mode %s (workers %d, backup %d, staleness %d), server %s mode %s (workers %d, backup %d, staleness %d)",
				c.addrs[i], in.Mode, in.Workers, in.BackupWorkers, in.Staleness, c.addrs[0], first.Mode, first.Workers, first.BackupWorkers, first.Staleness)
		}
		c.info.Clocks = append(c.info.Clocks, in.Clock)
	}
	mode, err := consistency.Parse(first.Mode)
	if err != nil {
		return fmt.Errorf("client: server %s: %w", c.addrs[0], err)
	}
	c.info.Plan, c.info.Mode, c.info.Optimizer = plan, mode, first.Optimizer
	c.info.Workers, c.info.BackupWorkers, c.info.Staleness = int(first.Workers), int(first.BackupWorkers), first.Staleness
	for _, t := range first.Layout {
		tt := Tensor{Name: t.Name, Offset: int(t.Offset)}
		for _, d := range t.Shape {
			tt.Shape = append(tt.Shape, int(d))
		}
		c.info.Tensors = append(c.info.Tensors, tt)
	}
	for s := range plan.Servers {
		var merged []shard.Range
		for _, r := range plan.Ranges(s) {
			if n := len(merged); n > 0 && merged[n-1].End() == r.Off {
				merged[n-1].Len += r.Len
				continue
			}
			merged = append(merged, r)
		}
		c.push = append(c.push, merged)
		c.lanes = append(c.lanes, splitLanes(plan.Ranges(s), c.opts.lanes))
	}
	return nil
}

// splitLanes splits a shard's chunks into at most k lanes of consecutive
// chunks (as many chunks each, give or take one), each lane's chunks
// merged where adjacent. Fewer than two lanes: nil.
func splitLanes(chunks []shard.Range, k int) [][]shard.Range {
	k = min(k, len(chunks))
	if k < 2 {
		return nil
	}
	lanes := make([][]shard.Range, k)
	at := 0
	for l := range k {
		n := len(chunks) / k
		if l < len(chunks)%k {
			n++
		}
		for _, r := range chunks[at : at+n] {
			if m := len(lanes[l]); m > 0 && lanes[l][m-1].End() == r.Off {
				lanes[l][m-1].Len += r.Len
				continue
			}
			lanes[l] = append(lanes[l], r)
		}
		at += n
	}
	return lanes
}

// connect opens a connection to addr through a resolver of its own.
func (c *Client) connect(addr string, opts []grpc.DialOption) (*grpc.ClientConn, error) {
	r := manual.NewBuilderWithScheme("shoal-shard")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: addr}}})
	conn, err := grpc.NewClient(r.Scheme()+":///"+addr, append(opts, grpc.WithResolvers(r))...)
	if err != nil {
		return nil, err
	}
	c.conns, c.resolvers = append(c.conns, conn), append(c.resolvers, r)
	return conn, nil
}

// checkAddr checks that addr is a HOST:PORT a connection can be made to,
// so that a mistyped address fails at once rather than after the retries
// that a server still starting gets.
func checkAddr(addr string) error {
	if strings.Contains(addr, "://") {
		return nil // for the caller's dialer
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w; want HOST:PORT", err)
	}
	if p, err := net.LookupPort("tcp", port); err != nil || p == 0 {
		return fmt.Errorf("port %q: want 1..65535", port)
	}
	return nil
}

// SetShardAddr moves shard's connections to addr: a shard restarted
// elsewhere (membership says where). Calls in flight to the old address
// fail as they would have, and their retries go to addr; the shard must
// serve the same plan (the next call's checks refuse another).
func (c *Client) SetShardAddr(shard int, addr string) error {
	if shard < 0 || shard >= len(c.stubs) {
		return fmt.Errorf("client: shard %d: want 0..%d", shard, len(c.stubs)-1)
	}
	if err := checkAddr(addr); err != nil {
		return fmt.Errorf("client: shard %d at %q: %w", shard, addr, err)
	}
	for _, r := range append(c.resolvers[2*shard:2*shard+2:2*shard+2], c.laneResolvers[shard]...) {
		r.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: addr}}})
	}
	return nil
}

// Stall is what one shard's waiting pulls wait for (ps.Stall).
type Stall struct {
	Shard   int
	Step    int64
	Workers []int64
	Since   time.Time
	Pulls   int
}

// Stalls asks every shard what its pulls wait for, over the connections
// the pulls do not use, and returns the shards where some wait. A shard
// that does not answer within ctx is left out and its error joined to
// the result's.
func (c *Client) Stalls(ctx context.Context) ([]Stall, error) {
	var out []Stall
	var errs []error
	for i, s := range c.pushStubs {
		resp, err := s.Info(ctx, &pb.InfoRequest{})
		if err != nil {
			errs = append(errs, fmt.Errorf("shard %d at %s: %w", i, c.addrs[i], err))
			continue
		}
		if st := resp.GetStall(); st != nil {
			out = append(out, Stall{Shard: i, Step: st.GetStep(), Workers: st.GetWorkers(), Since: time.Unix(0, st.GetSinceUnixNanos()), Pulls: int(st.GetPulls())})
		}
	}
	return out, errors.Join(errs...)
}

// Lanes returns, per shard, how many streams a PushPull to it is split
// over: WithLanes, or fewer where the shard owns fewer chunks.
func (c *Client) Lanes() []int {
	out := make([]int, len(c.lanes))
	for s, l := range c.lanes {
		out[s] = max(len(l), 1)
	}
	return out
}

// Info returns what the servers said at Dial.
func (c *Client) Info() Info { return c.info }

// Close closes the connections.
func (c *Client) Close() error {
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}

// retry runs call until it succeeds, fails with a code other than
// Unavailable, has been retried for the retry time (or as many times as
// WithRetry caps), or ctx ends. Each attempt gets its own deadline.
func (c *Client) retry(ctx context.Context, what string, call func(ctx context.Context) error) error {
	backoff := c.opts.backoff
	first := time.Now()
	var err error
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, c.opts.callTimeout)
		err = call(cctx)
		cancel()
		if err == nil || status.Code(err) != codes.Unavailable || attempt == c.opts.maxAttempts {
			break
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if time.Since(first)+wait > c.opts.retryFor {
			err = fmt.Errorf("still unavailable after %d tries in %v: %w", attempt, time.Since(first).Round(time.Millisecond), err)
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, c.opts.maxBackoff)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// JoinWorker tells every shard that worker starts (or starts again after
// it died) and returns the step it begins at, the same on every shard
// (ps.Server.Join says how each mode chooses it). Shards may first name
// different steps (a push that reached one and not yet another): it asks
// again, not before the latest named, until they agree. In sync mode the
// worker's first pull then waits for that step.
func (c *Client) JoinWorker(ctx context.Context, worker int64) (int64, error) {
	steps := make([]int64, len(c.stubs))
	var at int64
	for round := 1; ; round++ {
		err := c.fanOut(func(s int) error {
			return c.retry(ctx, fmt.Sprintf("client: join worker %d at server %s", worker, c.addrs[s]), func(ctx context.Context) error {
				resp, err := c.stubs[s].JoinWorker(ctx, &pb.JoinWorkerRequest{WorkerId: worker, PlanVersion: shard.Version, NotBefore: at})
				if err == nil {
					steps[s] = resp.Step
				}
				return err
			})
		})
		if err != nil {
			return 0, err
		}
		if slices.Min(steps) == slices.Max(steps) {
			return steps[0], nil
		}
		if round == maxJoinRounds {
			return 0, fmt.Errorf("client: join worker %d: after %d rounds the shards still name different steps %v", worker, round, steps)
		}
		at = slices.Max(steps)
	}
}

// NotMember reports whether err says that a shard took this worker out
// of its live set (sync and SSP): membership declared it dead, for example
// while it was cut off from the network, and the steps went on without
// it. Such a worker is alive, and joins again: JoinWorker, then on from
// the step it names. It looks through wrapped and joined errors, since
// any one shard's answer is enough.
func NotMember(err error) bool {
	if err == nil {
		return false
	}
	if s, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		for _, d := range s.GRPCStatus().Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == pb.ErrorDomain && info.Reason == pb.ReasonNotMember {
				return true
			}
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return NotMember(u.Unwrap())
	case interface{ Unwrap() []error }:
		return slices.ContainsFunc(u.Unwrap(), NotMember)
	}
	return false
}

// maxJoinRounds bounds JoinWorker's rounds: each moves the step forward,
// and shards move on only as steps complete, so two or three suffice.
const maxJoinRounds = 16

// fanOut runs f for every shard concurrently and joins the errors.
func (c *Client) fanOut(f func(s int) error) error {
	if len(c.stubs) == 1 {
		return f(0)
	}
	errs := make([]error, len(c.stubs))
	var wg sync.WaitGroup
	for s := range c.stubs {
		wg.Go(func() { errs[s] = f(s) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Pull reads the whole vector into dst (len Plan.VectorLen) as it is now
// and returns the clock of each shard.
func (c *Client) Pull(ctx context.Context, dst []float32) (Clocks, error) {
	return c.PullFor(ctx, PullArgs{WorkerID: -1}, dst)
}

// PullFor reads the weights args.WorkerID needs into dst (len
// Plan.VectorLen), waiting as args.Steps say, and returns each shard's
// clock.
func (c *Client) PullFor(ctx context.Context, args PullArgs, dst []float32) (Clocks, error) {
	if len(dst) != c.info.Plan.VectorLen {
		return nil, fmt.Errorf("client: pull into %d floats, the vector has %d", len(dst), c.info.Plan.VectorLen)
	}
	if args.Steps != nil && len(args.Steps) != len(c.stubs) {
		return nil, fmt.Errorf("client: pull with %d steps, want one per shard (%d)", len(args.Steps), len(c.stubs))
	}
	clocks := make(Clocks, len(c.stubs))
	held := make([]time.Duration, len(c.stubs))
	err := c.fanOut(func(s int) error {
		req := &pb.PullRequest{PlanVersion: shard.Version, WorkerId: args.WorkerID}
		if args.Steps != nil {
			req.Step = args.Steps[s]
		}
		return c.retry(ctx, "pull from "+c.addrs[s], func(ctx context.Context) error {
			var err error
			clocks[s], err = c.pullShard(ctx, s, req, dst, &held[s])
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	if args.Waited != nil {
		*args.Waited = 0
		for _, h := range held {
			*args.Waited = max(*args.Waited, h)
		}
	}
	return clocks, nil
}

func (c *Client) pullShard(ctx context.Context, s int, req *pb.PullRequest, dst []float32, held *time.Duration) (int64, error) {
	stream, err := c.stubs[s].Pull(ctx, req)
	if err != nil {
		return 0, err
	}
	clock, _, err := c.recvValues(stream, s, dst, held, false)
	return clock, err
}

// Field numbers of the tensor payloads (see ps.proto).
const (
	pullValuesField = 2 // PullPiece.values
	pushGradsField  = 2 // PushPiece.grads
)

// recvValues reads the pieces of a pull from shard s straight into dst,
// checking that they are the shard's whole share. It returns the clock of
// the values and, for a PushPull (pushed), the push's result that the
// first piece carries. dst nil: no values are expected.
func (c *Client) recvValues(stream grpc.ClientStream, s int, dst []float32, held *time.Duration, pushed bool) (int64, *pb.PushResponse, error) {
	return c.recvRanges(stream, s, nil, dst, held, pushed)
}

// recvRanges is recvValues for a lane of a push-pull: the values of
// ranges alone (nil: the shard's whole share). A reply must be one view:
// every piece at one clock, each inside one of the ranges (or one owned
// chunk), no float twice, every float once. A piece is checked before it
// is written, so a lying shard cannot write into another shard's part of
// dst; on an error, its own part is left partly written.
func (c *Client) recvRanges(stream grpc.ClientStream, s int, ranges []shard.Range, dst []float32, held *time.Duration, pushed bool) (int64, *pb.PushResponse, error) {
	plan := c.info.Plan
	want := 0
	if dst != nil {
		want = plan.Floats(s)
		if ranges != nil {
			want = 0
			for _, r := range ranges {
				want += r.Len
			}
		}
	}
	inRanges := func(off, k int) bool {
		if ranges == nil {
			// Chunks next to each other belong to different shards,
			// unless there is one.
			first, last := plan.ChunkAt(off), plan.ChunkAt(off+k-1)
			return plan.Owner(first) == s && (first == last || plan.Servers == 1)
		}
		for _, r := range ranges {
			if off >= r.Off && off+k <= r.End() {
				return true
			}
		}
		return false
	}
	// Where the values went: a piece per MaxPieceBytes of each owned chunk,
	// room for them all made once.
	pieces := make([]shard.Range, 0, plan.NumChunks()/plan.Servers+want/(wire.MaxPieceBytes/4)+1)
	var clock int64
	var res *pb.PushResponse
	for i := 0; ; i++ {
		p := &pb.PullPiece{}
		bad := ""
		in := &pb.TensorIn{Msg: p, Field: pullValuesField, Place: func(n int) pb.Sink {
			off, k := int(p.Offset), n/4
			switch {
			case n == 0:
				return pb.Sink{} // an empty piece (a push-pull's reply without values)
			case dst == nil:
				bad = fmt.Sprintf("server sent %d bytes of values; none were asked for", n)
			case n%4 != 0 || p.Offset < 0 || off > len(dst)-k || k == 0 || !inRanges(off, k):
				bad = fmt.Sprintf("server sent a piece at offset %d of %d bytes, outside its chunks of a vector of %d floats", p.Offset, n, len(dst))
			default:
				return pb.Sink{Floats: dst[off : off+k]}
			}
			return pb.Sink{}
		}}
		err := stream.RecvMsg(in)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, nil, err
		}
		if bad != "" {
			return 0, nil, status.Error(codes.Internal, bad)
		}
		if i == 0 {
			if held != nil {
				*held = time.Duration(p.HeldMicros) * time.Microsecond
			}
			res, clock = p.Push, p.Clock
		} else if p.Clock != clock {
			return 0, nil, status.Errorf(codes.Internal, "server sent values at clocks %d and %d in one reply; want one view of its share", clock, p.Clock)
		}
		if in.Len > 0 {
			pieces = append(pieces, shard.Range{Off: int(p.Offset), Len: in.Len / 4})
		}
	}
	if pushed && res == nil {
		return 0, nil, status.Error(codes.Internal, "server's reply to a push-pull carries no push result")
	}
	// Each piece lies in the share: with none twice, the share is whole
	// when their floats add up to it.
	slices.SortFunc(pieces, func(a, b shard.Range) int { return cmp.Compare(a.Off, b.Off) })
	got := 0
	for i, r := range pieces {
		if i > 0 && r.Off < pieces[i-1].End() {
			return 0, nil, status.Errorf(codes.Internal, "server sent floats [%d,%d) twice", r.Off, min(r.End(), pieces[i-1].End()))
		}
		got += r.Len
	}
	if got != want {
		return 0, nil, status.Errorf(codes.Internal, "server sent %d floats, it owns %d", got, want)
	}
	return clock, res, nil
}

// Push sends each shard its part of args.Grads.
func (c *Client) Push(ctx context.Context, args PushArgs) (PushResult, error) {
	if err := c.checkPush(args); err != nil {
		return PushResult{}, err
	}
	replies := make([]*pb.PushResponse, len(c.stubs))
	err := c.fanOut(func(s int) error {
		if args.Skips(s) {
			return nil
		}
		return c.retry(ctx, "push to "+c.addrs[s], func(ctx context.Context) error {
			var err error
			replies[s], err = c.pushShard(ctx, s, args)
			return err
		})
	})
	return pushResult(replies), err
}

// checkPush checks a push's lengths against the plan.
func (c *Client) checkPush(args PushArgs) error {
	if len(args.Grads) != c.info.Plan.VectorLen {
		return fmt.Errorf("client: push of %d floats, the vector has %d", len(args.Grads), c.info.Plan.VectorLen)
	}
	if args.Clocks != nil && len(args.Clocks) != len(c.stubs) {
		return fmt.Errorf("client: push with %d clocks, want one per shard (%d)", len(args.Clocks), len(c.stubs))
	}
	if args.Skip != nil && len(args.Skip) != len(c.stubs) {
		return fmt.Errorf("client: push skipping %d shards' worth, want one flag per shard (%d)", len(args.Skip), len(c.stubs))
	}
	return nil
}

// pushResult sums up the shards' replies to a push (nil: no reply).
func pushResult(replies []*pb.PushResponse) PushResult {
	res := PushResult{Clocks: make(Clocks, len(replies)), Staleness: make([]int64, len(replies))}
	for s, r := range replies {
		if r == nil {
			continue
		}
		res.Clocks[s], res.Staleness[s] = r.Clock, r.Staleness
		if r.Duplicate {
			res.Duplicates++
		}
		if r.Dropped {
			res.Dropped++
		}
	}
	return res
}

func (c *Client) pushShard(ctx context.Context, s int, args PushArgs) (*pb.PushResponse, error) {
	stream, err := c.pushStubs[s].Push(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.sendGrads(stream, c.push[s], c.header(s, args), args.Grads); err != nil {
		return nil, err
	}
	return stream.CloseAndRecv()
}

// header opens shard s's part of a push.
func (c *Client) header(s int, args PushArgs) *pb.PushHeader {
	h := &pb.PushHeader{WorkerId: args.WorkerID, Step: args.Step, PlanVersion: shard.Version, Encoding: c.opts.encoding}
	if args.Clocks != nil {
		h.Clock = args.Clocks[s]
	}
	for _, r := range c.push[s] {
		h.Ranges = append(h.Ranges, &pb.Range{Offset: int64(r.Off), Length: int64(r.Len)})
	}
	return h
}

// sendGrads sends the ranges of the gradient grads in pieces, the first
// with h. Each piece is encoded once, into a pooled buffer that the
// transport frees once it has written it, so the caller may change grads
// as soon as this returns.
func (c *Client) sendGrads(stream grpc.ClientStream, ranges []shard.Range, h *pb.PushHeader, grads []float32) error {
	// An encoding this build does not know goes as float32 under its own
	// name, and the server refuses it (the server says which it knows).
	enc, _ := c.opts.encoding.Wire()
	size := enc.Size()
	pieceFloats := wire.MaxPieceBytes / size
	pool := pb.Pool
	msg := &pb.PushPiece{Header: h}
	for _, r := range ranges {
		for off := r.Off; off < r.End(); off += pieceFloats {
			end := min(off+pieceFloats, r.End())
			buf := pool.Get(size * (end - off))
			enc.Put(*buf, grads[off:end])
			if err := stream.SendMsg(&pb.TensorOut{Msg: msg, Field: pushGradsField, Payload: mem.NewBuffer(buf, pool)}); err != nil {
				// The real error comes with the reply.
				if errors.Is(err, io.EOF) {
					if rerr := stream.RecvMsg(new(pb.PullPiece)); rerr != nil && !errors.Is(rerr, io.EOF) {
						return rerr
					}
					return status.Error(codes.Internal, "the server ended the push before it was sent, without an error")
				}
				return err
			}
			msg = &pb.PushPiece{}
		}
	}
	return nil
}

// PushPull sends each shard its part of args.Grads and, with args.Pull,
// reads the shard's values after the push into args.Dst, one round trip
// per shard. A call that fails with Unavailable is tried again; servers
// apply each (WorkerID, Step) at most once, so a retry after a lost reply
// only pulls.
func (c *Client) PushPull(ctx context.Context, args PushPullArgs) (PushPullResult, error) {
	if err := c.checkPush(args.PushArgs); err != nil {
		return PushPullResult{}, err
	}
	n := c.info.Plan.VectorLen
	switch {
	case args.Pull && len(args.Dst) != n:
		return PushPullResult{}, fmt.Errorf("client: pull into %d floats, the vector has %d", len(args.Dst), n)
	case args.Pull && args.Steps != nil && len(args.Steps) != len(c.stubs):
		return PushPullResult{}, fmt.Errorf("client: pull with %d steps, want one per shard (%d)", len(args.Steps), len(c.stubs))
	}
	var res PushPullResult
	if args.Pull {
		res.PullClocks = make(Clocks, len(c.stubs))
	}
	replies := make([]*pb.PushResponse, len(c.stubs))
	held := make([]time.Duration, len(c.stubs))
	err := c.fanOut(func(s int) error {
		if args.Skips(s) {
			return nil
		}
		h := c.header(s, args.PushArgs)
		h.Pull = args.Pull
		if args.Pull && args.Steps != nil {
			h.PullStep = args.Steps[s]
		}
		var dst []float32
		if args.Pull {
			dst = args.Dst
		}
		return c.retry(ctx, "push-pull with "+c.addrs[s], func(ctx context.Context) error {
			var clock int64
			var err error
			if c.lanes[s] != nil {
				clock, replies[s], err = c.pushPullLanes(ctx, s, h, args.Grads, dst, &held[s])
			} else {
				clock, replies[s], err = c.pushPullStream(ctx, c.pushStubs[s], s, nil, h, args.Grads, dst, &held[s])
			}
			if err == nil && args.Pull {
				res.PullClocks[s] = clock
			}
			return err
		})
	})
	if err != nil {
		return PushPullResult{}, err
	}
	res.PushResult = pushResult(replies)
	if args.Waited != nil {
		*args.Waited = 0
		for _, h := range held {
			*args.Waited = max(*args.Waited, h)
		}
	}
	return res, nil
}

// pushPullStream is one attempt at a push-pull of shard s's ranges (nil:
// its whole share) over one stream of stub, with header h.
func (c *Client) pushPullStream(ctx context.Context, stub pb.ParameterServerClient, s int, ranges []shard.Range, h *pb.PushHeader, grads, dst []float32, held *time.Duration) (int64, *pb.PushResponse, error) {
	stream, err := stub.PushPull(ctx)
	if err != nil {
		return 0, nil, err
	}
	send := ranges
	if send == nil {
		send = c.push[s]
	}
	if err := c.sendGrads(stream, send, h, grads); err != nil {
		return 0, nil, err
	}
	if err := stream.CloseSend(); err != nil {
		return 0, nil, err
	}
	return c.recvRanges(stream, s, ranges, dst, held, true)
}

// pushPullLanes is one attempt at shard s's part of a PushPull over its
// lanes, all at once, each on its own connection. The first lane to fail
// ends the others; the shard applies the push only if every lane arrives.
func (c *Client) pushPullLanes(ctx context.Context, s int, h *pb.PushHeader, grads, dst []float32, held *time.Duration) (int64, *pb.PushResponse, error) {
	lanes := c.lanes[s]
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	attempt := rand.Uint64()
	errs := make([]error, len(lanes))
	clocks := make([]int64, len(lanes))
	replies := make([]*pb.PushResponse, len(lanes))
	helds := make([]time.Duration, len(lanes))
	var wg sync.WaitGroup
	for l, ranges := range lanes {
		wg.Go(func() {
			hl := &pb.PushHeader{WorkerId: h.WorkerId, Step: h.Step, Clock: h.Clock, PlanVersion: h.PlanVersion, Encoding: h.Encoding,
				Pull: h.Pull, PullStep: h.PullStep, Lane: uint32(l), Lanes: uint32(len(lanes)), Attempt: attempt}
			for _, r := range ranges {
				hl.Ranges = append(hl.Ranges, &pb.Range{Offset: int64(r.Off), Length: int64(r.Len)})
			}
			stub := c.pushStubs[s]
			if l > 0 {
				stub = c.laneStubs[s][l-1]
			}
			clocks[l], replies[l], errs[l] = c.pushPullStream(ctx, stub, s, ranges, hl, grads, dst, &helds[l])
			if errs[l] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	// The error that says why: a lane's own before one that only
	// reports being ended with the others.
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if first == nil || status.Code(first) == codes.Canceled && status.Code(err) != codes.Canceled {
			first = err
		}
	}
	if first != nil {
		return 0, nil, first
	}
	for l := range lanes {
		*held = max(*held, helds[l])
		if clocks[l] != clocks[0] {
			return 0, nil, status.Errorf(codes.Internal, "server %s sent lane 0 values at clock %d and lane %d at clock %d: want one view", c.addrs[s], clocks[0], l, clocks[l])
		}
	}
	return clocks[0], replies[0], nil
}
