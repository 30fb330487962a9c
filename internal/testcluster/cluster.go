package testcluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/rpc"
)

// Cluster is a set of parameter-server shards on bufconn listeners.
type Cluster struct {
	shards []*Shard

	mu sync.Mutex
	// answered is closed (and replaced) whenever a shard answers a
	// stream call: see Changed.
	answered chan struct{}
	// binder holds AsWorkers' sessions.
	binder *binder
}

// Shard is one in-process server.
type Shard struct {
	Core *ps.Server
	Addr string
	lis  *bufconn.Listener
	g    *grpc.Server
	// served is closed when the server's goroutine has returned.
	served chan struct{}

	c          *Cluster
	mu         sync.Mutex
	failNext   int
	failCode   codes.Code
	failInfo   int // Info calls to fail with Unavailable (FailInfo)
	loseReply  int
	stall      int
	stallStart chan struct{}
	// losses are the pushes to lose, by worker and step (LosePush); lost
	// counts those lost.
	losses map[workerStep]Loss
	lost   int
}

// workerStep names one push.
type workerStep struct{ worker, step int64 }

// Start serves each core on its own bufconn listener and stops them all
// when the test ends.
func Start(t testing.TB, cores ...*ps.Server) *Cluster {
	t.Helper()
	return start(t, false, pb.DefaultTransport, cores)
}

// StartWith is Start with the services registered with opts.
func StartWith(t testing.TB, opts []rpc.PSOption, cores ...*ps.Server) *Cluster {
	t.Helper()
	return start(t, false, pb.DefaultTransport, cores, opts...)
}

// StartTCP serves each core on its own TCP listener on 127.0.0.1 (for
// benchmarks of the real transport); DialOption then adds nothing.
func StartTCP(t testing.TB, cores ...*ps.Server) *Cluster {
	t.Helper()
	return start(t, true, pb.DefaultTransport, cores)
}

// StartTCPWith is StartTCP with the servers' transport settings tr.
func StartTCPWith(t testing.TB, tr pb.Transport, cores ...*ps.Server) *Cluster {
	t.Helper()
	return start(t, true, tr, cores)
}

// Serve is Start for code without a testing.TB (examples): the caller
// stops the servers with Close.
func Serve(cores ...*ps.Server) (*Cluster, error) {
	return serve(false, pb.DefaultTransport, cores)
}

// ServeTCP is StartTCP for code without a testing.TB (examples): the
// shards' addresses are plain host:ports, and the caller stops the
// servers with Close.
func ServeTCP(cores ...*ps.Server) (*Cluster, error) {
	return serve(true, pb.DefaultTransport, cores)
}

func start(t testing.TB, tcp bool, tr pb.Transport, cores []*ps.Server, opts ...rpc.PSOption) *Cluster {
	t.Helper()
	c, err := serve(tcp, tr, cores, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func serve(tcp bool, tr pb.Transport, cores []*ps.Server, opts ...rpc.PSOption) (*Cluster, error) {
	c := &Cluster{answered: make(chan struct{})}
	for i, core := range cores {
		s := &Shard{Core: core, c: c, stallStart: make(chan struct{}, 16), served: make(chan struct{}), losses: map[workerStep]Loss{}}
		var lis net.Listener
		if tcp {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				c.Close()
				return nil, err
			}
			lis, s.Addr = l, l.Addr().String()
		} else {
			s.lis = bufconn.Listen(4 << 20)
			lis, s.Addr = s.lis, fmt.Sprintf("passthrough:///shard-%d", i)
		}
		g, h := rpc.NewGRPCServerWith(tr, grpc.ChainUnaryInterceptor(s.unary), grpc.ChainStreamInterceptor(s.stream))
		rpc.RegisterPS(g, h, core, nil, opts...)
		s.g = g
		go func() { defer close(s.served); _ = g.Serve(lis) }()
		c.shards = append(c.shards, s)
	}
	return c, nil
}

// Close stops every shard's server and waits for its goroutine.
func (c *Cluster) Close() {
	for _, s := range c.shards {
		s.g.Stop()
		<-s.served
	}
}

// Addrs are the targets of the shards, in shard order, for client.Dial
// with DialOption.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, s := range c.shards {
		a = append(a, s.Addr)
	}
	return a
}

// Shard returns shard i.
func (c *Cluster) Shard(i int) *Shard { return c.shards[i] }

// DialOption routes the shards' addresses to their bufconn listeners.
func (c *Cluster) DialOption() grpc.DialOption {
	if len(c.shards) > 0 && c.shards[0].lis == nil {
		return grpc.EmptyDialOption{}
	}
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		for _, s := range c.shards {
			if strings.HasSuffix(s.Addr, "/"+addr) || s.Addr == addr {
				return s.lis.DialContext(ctx)
			}
		}
		return nil, fmt.Errorf("testcluster: no shard at %q", addr)
	})
}

// FailNext makes the next n calls fail with code before doing anything.
func (s *Shard) FailNext(code codes.Code, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext, s.failCode = n, code
}

// FailInfo makes the next n Info calls (the handshake of client.Dial,
// which FailNext leaves alone) fail with Unavailable, as a shard killed
// while it answers does.
func (s *Shard) FailInfo(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failInfo = n
}

// LoseReplies makes the next n calls do their work and then fail with
// Unavailable, as if the reply had been lost on the way.
func (s *Shard) LoseReplies(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseReply = n
}

// Stall makes the next n calls block until the caller gives up; Stalled
// receives once per call that started stalling.
func (s *Shard) Stall(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stall = n
}

// Stalled receives a value whenever a call starts stalling.
func (s *Shard) Stalled() <-chan struct{} { return s.stallStart }

// Loss is where LosePush loses a push.
type Loss uint8

const (
	// LoseRequest: the push fails with Unavailable before the shard sees
	// it; nothing is applied.
	LoseRequest Loss = iota + 1
	// LoseReply: the shard applies the push (and, for a push-pull, waits
	// and reads as usual), then the call fails with Unavailable as if the
	// reply had been lost.
	LoseReply
)

// LosePush makes the shard lose worker's push of step once, as l says:
// the client tries again, and the shard's (worker, step) deduplication
// makes the retry apply it exactly once. It applies to Push and PushPull
// calls, and to the first of them that carries that worker and step.
func (s *Shard) LosePush(worker, step int64, l Loss) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.losses[workerStep{worker, step}] = l
}

// Lost is how many pushes LosePush lost so far.
func (s *Shard) Lost() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// takeLoss returns, and forgets, how to lose worker's push of step (0:
// deliver it).
func (s *Shard) takeLoss(worker, step int64) Loss {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := workerStep{worker, step}
	l, ok := s.losses[k]
	if ok {
		delete(s.losses, k)
		s.lost++
	}
	return l
}

// Changed returns a channel that is closed the next time a shard answers
// a streaming call (sends its header or first message): a push that it
// applied, a pull whose wait is over. A test that waits for a state of
// the cores checks it again each time (Await).
func (c *Cluster) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answered
}

func (c *Cluster) notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.answered)
	c.answered = make(chan struct{})
}

// Await blocks until cond holds, checking it now and whenever a shard
// answers a streaming call, or until ctx ends: then it returns ctx's
// error. cond reads the cores (their locks order it after the answers).
func (c *Cluster) Await(ctx context.Context, cond func() bool) error {
	for {
		changed := c.Changed()
		if cond() {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// fault decides what to do with the next call: whether to stall, whether
// to lose the reply, and an error to return at once.
func (s *Shard) fault() (stall, lose bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.failNext > 0:
		s.failNext--
		return false, false, status.Error(s.failCode, "testcluster: injected failure")
	case s.stall > 0:
		s.stall--
		return true, false, nil
	case s.loseReply > 0:
		s.loseReply--
		return false, true, nil
	}
	return false, false, nil
}

func (s *Shard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if strings.HasSuffix(info.FullMethod, "/Info") {
		s.mu.Lock()
		fail := s.failInfo > 0
		if fail {
			s.failInfo--
		}
		s.mu.Unlock()
		if fail {
			return nil, status.Error(codes.Unavailable, "testcluster: injected failure of Info")
		}
		return h(ctx, req)
	}
	stall, lose, err := s.fault()
	if err != nil {
		return nil, err
	}
	if stall {
		s.stallStart <- struct{}{}
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	resp, err := h(ctx, req)
	if lose && err == nil {
		return nil, status.Error(codes.Unavailable, "testcluster: reply lost")
	}
	return resp, err
}

func (s *Shard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	stall, lose, err := s.fault()
	if err != nil {
		return err
	}
	if stall {
		s.stallStart <- struct{}{}
		<-ss.Context().Done()
		return status.FromContextError(ss.Context().Err()).Err()
	}
	w := &watched{ServerStream: ss, s: s, lose: lose}
	err = h(srv, w)
	if err == nil && w.lose {
		// The handler did its work; the reply is lost on the way.
		return status.Error(codes.Unavailable, "testcluster: reply lost")
	}
	return err
}

// watched is a stream as a handler sees it. It tells the cluster when the
// handler first sends anything (for a push, once it is applied), loses a
// push that LosePush names, and swallows what the handler sends when the
// reply is to be lost. The handler's goroutine receives and sends (gRPC
// allows one sender at a time), so the fields need no lock.
type watched struct {
	grpc.ServerStream
	s *Shard
	// lose: swallow the replies and fail the call with Unavailable once
	// the handler is done. received counts the messages received.
	lose     bool
	received int
	answered sync.Once
}

// RecvMsg receives a message and, for the first piece of a push, looks
// its worker and step up in the shard's losses.
func (w *watched) RecvMsg(m any) error {
	if err := w.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	w.received++
	in, ok := m.(*pb.TensorIn)
	if !ok || w.received > 1 {
		return nil
	}
	piece, ok := in.Msg.(*pb.PushPiece)
	if !ok || piece.Header == nil {
		return nil
	}
	switch w.s.takeLoss(piece.Header.WorkerId, piece.Header.Step) {
	case LoseRequest:
		return status.Errorf(codes.Unavailable, "testcluster: push of worker %d step %d lost before the shard saw it", piece.Header.WorkerId, piece.Header.Step)
	case LoseReply:
		w.lose = true
	}
	return nil
}

// SendHeader sends the header, unless the reply is lost.
func (w *watched) SendHeader(md metadata.MD) error {
	w.answered.Do(w.s.c.notify)
	if w.lose {
		return nil
	}
	return w.ServerStream.SendHeader(md)
}

// SendMsg sends m, unless the reply is lost: then it frees the payload
// the codec would have freed.
func (w *watched) SendMsg(m any) error {
	w.answered.Do(w.s.c.notify)
	if w.lose {
		if out, ok := m.(*pb.TensorOut); ok && out.Payload != nil {
			out.Payload.Free()
		}
		return nil
	}
	return w.ServerStream.SendMsg(m)
}
