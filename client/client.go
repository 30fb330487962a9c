package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
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
	// Workers, BackupWorkers and Staleness are the mode's parameters;
	// LocalSteps the H of low-communication training (0: none).
	Workers, BackupWorkers int
	Staleness              int64
	LocalSteps             int
	// Fragments the F of streaming fragments (0 or 1: whole pushes).
	Fragments int
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
	// Span is the part of the vector a push covers (PushArgs.Span).
	Span = pscall.Span
	// PushResult says what the shards did with a push.
	PushResult = pscall.PushResult
	// PushPullArgs is a push and, when Pull is set, the weights after it.
	PushPullArgs = pscall.PushPullArgs
	// PushPullResult says what the shards did with the push, and the
	// clocks of the values pulled.
	PushPullResult = pscall.PushPullResult
)

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
	// smu guards sessions: per worker id joined through this Client, its
	// session on each shard (session.go).
	smu      sync.Mutex
	sessions map[int64]*workerSession
	// bmu serialises the joins asWorker makes, so that concurrent calls
	// that find a shard without their session join it once.
	bmu sync.Mutex
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
	c := &Client{opts: o, addrs: addrs, sessions: map[int64]*workerSession{}}
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
	for i := range c.stubs {
		var err error
		if infos[i], err = c.info0(ctx, i); err != nil {
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
		if in.Mode != first.Mode || in.Workers != first.Workers || in.BackupWorkers != first.BackupWorkers || in.Staleness != first.Staleness || in.LocalSteps != first.LocalSteps || in.Fragments != first.Fragments {
			return fmt.Errorf("client: server %s runs mode %s (workers %d, backup %d, staleness %d, local steps %d, fragments %d), server %s mode %s (workers %d, backup %d, staleness %d, local steps %d, fragments %d)",
				c.addrs[i], in.Mode, in.Workers, in.BackupWorkers, in.Staleness, in.LocalSteps, in.Fragments, c.addrs[0], first.Mode, first.Workers, first.BackupWorkers, first.Staleness, first.LocalSteps, first.Fragments)
		}
		c.info.Clocks = append(c.info.Clocks, in.Clock)
	}
	mode, err := consistency.Parse(first.Mode)
	if err != nil {
		return fmt.Errorf("client: server %s: %w", c.addrs[0], err)
	}
	c.info.Plan, c.info.Mode, c.info.Optimizer = plan, mode, first.Optimizer
	c.info.Workers, c.info.BackupWorkers, c.info.Staleness = int(first.Workers), int(first.BackupWorkers), first.Staleness
	c.info.LocalSteps, c.info.Fragments = int(first.LocalSteps), int(first.Fragments)
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

// info0 asks server i for its Info until it answers, a call fails with
// anything but Unavailable, WithRetry's attempts are spent, or ctx ends (without a deadline, after the
// retry time). The calls fail fast, so each failure carries the reason
// the connection could not be made (refused, no such host, a TLS
// mismatch), which WithConnectNotice hears while the client goes on
// trying and the final error repeats. A server still starting, or killed
// while it answers and restarting from its checkpoint, is waited for.
func (c *Client) info0(ctx context.Context, i int) (*pb.InfoResponse, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.retryFor)
		defer cancel()
	}
	addr, backoff, start := c.addrs[i], c.opts.backoff, time.Now()
	var told string
	var toldAt time.Time
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, c.opts.callTimeout)
		in, err := c.stubs[i].Info(cctx, &pb.InfoRequest{})
		cancel()
		switch {
		case err == nil:
			return in, nil
		case status.Code(err) != codes.Unavailable || attempt == c.opts.maxAttempts:
			return nil, fmt.Errorf("client: info from server %s: %w%s", addr, err, ConnectHint(err))
		}
		if f := c.opts.notice; f != nil && time.Since(start) >= c.opts.noticeAfter {
			if why := status.Convert(err).Message(); why != told || time.Since(toldAt) >= 15*time.Second {
				f(addr, fmt.Errorf("%s%s", why, ConnectHint(err)))
				told, toldAt = why, time.Now()
			}
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("client: server %s not reachable after %v: %w (last error: %w%s)", addr, time.Since(start).Round(time.Millisecond), ctx.Err(), err, ConnectHint(err))
		case <-t.C:
		}
		backoff = min(2*backoff, c.opts.maxBackoff)
	}
}

// ConnectHint is what a connection error suggests about the two ends'
// security, with a leading " (", or "".
func ConnectHint(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "server preface"):
		return " (the server closed the connection before speaking gRPC: it may serve TLS, which this client does not speak; give --tls-cert, --tls-key and --tls-ca)"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return " (the server does not serve TLS: start it with --tls-cert, --tls-key and --tls-ca, or connect without them)"
	case strings.Contains(msg, "certificate"):
		return " (the server's certificate was refused: it must be signed by --tls-ca and name the address dialed)"
	}
	return ""
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
