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
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/rpc"
)

// Cluster is a set of parameter-server shards on bufconn listeners.
type Cluster struct {
	shards []*Shard
}

// Shard is one in-process server.
type Shard struct {
	Core *ps.Server
	Addr string
	lis  *bufconn.Listener
	g    *grpc.Server
	// served is closed when the server's goroutine has returned.
	served chan struct{}

	mu         sync.Mutex
	failNext   int
	failCode   codes.Code
	loseReply  int
	stall      int
	stallStart chan struct{}
}

// Start serves each core on its own bufconn listener and stops them all
// when the test ends.
func Start(t testing.TB, cores ...*ps.Server) *Cluster {
	t.Helper()
	return start(t, false, pb.DefaultTransport, cores)
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

func start(t testing.TB, tcp bool, tr pb.Transport, cores []*ps.Server) *Cluster {
	t.Helper()
	c, err := serve(tcp, tr, cores)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func serve(tcp bool, tr pb.Transport, cores []*ps.Server) (*Cluster, error) {
	c := &Cluster{}
	for i, core := range cores {
		s := &Shard{Core: core, stallStart: make(chan struct{}, 16), served: make(chan struct{})}
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
		rpc.RegisterPS(g, h, core, nil)
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
	if lose {
		// Run the handler on a stream whose reply is swallowed.
		if err := h(srv, &lostReply{ServerStream: ss}); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "testcluster: reply lost")
	}
	return h(srv, ss)
}

// lostReply drops the messages a handler sends.
type lostReply struct{ grpc.ServerStream }

func (l *lostReply) SendMsg(any) error { return nil }
