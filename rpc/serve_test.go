package rpc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/shoalml/shoal/internal/testcluster"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/rpc"
)

// serveSync serves a sync shard of two workers with rpc.Serve over
// bufconn; it returns a client, the cancel that starts the drain, and
// Serve's result.
func serveSync(t *testing.T, drain time.Duration) (*grpc.ClientConn, context.CancelFunc, <-chan error) {
	return serveCore(t, syncCores(t, 2)[0], drain)
}

// serveCore is serveSync for any shard and gRPC server options.
func serveCore(t testing.TB, core *ps.Server, drain time.Duration, opts ...grpc.ServerOption) (*grpc.ClientConn, context.CancelFunc, <-chan error) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	g, health := rpc.NewGRPCServer(opts...)
	rpc.RegisterPS(g, health, core, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- rpc.Serve(ctx, g, health, lis, drain) }()
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()), testcluster.AsWorkers())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn, cancel, done
}

// waitingPushPull starts worker 0's push of step 0 with a pull of step 1,
// which waits at the barrier for worker 1; it returns once the server has
// the push (its headers are out).
func waitingPushPull(t *testing.T, cl pb.ParameterServerClient) pb.ParameterServer_PushPullClient {
	t.Helper()
	stream, err := cl.PushPull(ctxT(t))
	require.NoError(t, err)
	h := header(0, [2]int64{0, 8})
	h.WorkerId, h.Pull, h.PullStep = 0, true, 1
	require.NoError(t, stream.Send(&pb.PushPiece{Header: h, Grads: floats(2, 2, 2, 2, 2, 2, 2, 2)}))
	require.NoError(t, stream.CloseSend())
	_, err = stream.Header()
	require.NoError(t, err)
	return stream
}

// TestServeDrains: once its context ends, Serve lets the calls in flight
// finish (here a pull waiting at the barrier, and the push that opens it,
// half sent when the drain starts) and then returns nil.
func TestServeDrains(t *testing.T) {
	conn, cancel, done := serveSync(t, time.Minute)
	cl := pb.NewParameterServerClient(conn)
	waiting := waitingPushPull(t, cl)
	push, err := cl.Push(ctxT(t))
	require.NoError(t, err)
	h := header(0, [2]int64{0, 8})
	h.WorkerId = 1
	require.NoError(t, push.Send(&pb.PushPiece{Header: h, Grads: floats(4, 4, 4, 4)}))
	health, err := healthpb.NewHealthClient(conn).Check(ctxT(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, health.Status)

	cancel()
	require.NoError(t, push.Send(&pb.PushPiece{Grads: floats(4, 4, 4, 4)}))
	_, err = push.CloseAndRecv()
	require.NoError(t, err, "a call in flight finishes during the drain")
	first, err := waiting.Recv()
	require.NoError(t, err)
	assert.Equal(t, int64(1), first.Clock, "the pull got the step's values")
	require.NoError(t, <-done)
}

// TestServeStopsAfterTheDrainTime: a call that does not finish within the
// drain time is ended, and Serve returns.
func TestServeStopsAfterTheDrainTime(t *testing.T) {
	conn, cancel, done := serveSync(t, time.Millisecond)
	waiting := waitingPushPull(t, pb.NewParameterServerClient(conn))
	cancel()
	require.NoError(t, <-done)
	_, err := waiting.Recv()
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
}

// TestServeReportsAFailedListener: a listener that fails ends Serve with
// its error before the context does.
func TestServeReportsAFailedListener(t *testing.T) {
	lis := bufconn.Listen(1 << 10)
	require.NoError(t, lis.Close())
	g, health := rpc.NewGRPCServer()
	err := rpc.Serve(ctxT(t), g, health, lis, time.Minute)
	assert.ErrorContains(t, err, "serving on bufconn")
}

// idleServer serves core with the stream idle limit.
func idleServer(t *testing.T, core *ps.Server, idle time.Duration) pb.ParameterServerClient {
	t.Helper()
	conn, _, _ := serveCore(t, core, time.Second, grpc.ChainStreamInterceptor(rpc.StreamIdleTimeout(idle)))
	return pb.NewParameterServerClient(conn)
}

// TestIdleStreamsAreEnded: a push stream that sends nothing, or only its
// header, no longer stays open until the client gives up: the server ends
// it with DeadlineExceeded once it has waited the idle limit, and the
// shard is unchanged. How long each took is logged.
func TestIdleStreamsAreEnded(t *testing.T) {
	const idle = 300 * time.Millisecond
	for _, tc := range []struct {
		name  string
		first *pb.PushPiece // nil: send nothing
	}{
		{"nothing sent", nil},
		{"only the header", &pb.PushPiece{Header: header(0, [2]int64{0, 8})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cores := testcluster.Cores(t, 8, 1, 4, 0.5)
			ps := idleServer(t, cores[0], idle)
			stream, err := ps.Push(ctxT(t))
			require.NoError(t, err)
			start := time.Now()
			if tc.first != nil {
				require.NoError(t, stream.Send(tc.first))
			}
			var resp pb.PushResponse
			err = stream.RecvMsg(&resp) // without closing: the server must end it
			took := time.Since(start)
			require.Error(t, err)
			assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
			assert.ErrorContains(t, err, "stream idle limit")
			assert.GreaterOrEqual(t, took, idle)
			assert.Equal(t, int64(0), cores[0].Clock(), "nothing applied")
			t.Logf("%s: ended by the server %v after the stream opened (limit %v)", tc.name, took.Round(time.Millisecond), idle)
		})
	}
}

// TestAWaitForOtherWorkersIsNotIdle: a sync push-pull that waits at the
// barrier for another worker longer than the idle limit is not ended: the
// limit counts only time spent waiting on the client itself.
func TestAWaitForOtherWorkersIsNotIdle(t *testing.T) {
	const idle = 200 * time.Millisecond
	cores := syncCores(t, 2)
	client := idleServer(t, cores[0], idle)
	push := func(worker int64) error {
		stream, err := client.PushPull(ctxT(t))
		if err != nil {
			return err
		}
		h := header(0, [2]int64{0, 8})
		h.WorkerId, h.Pull, h.PullStep = worker, true, 1
		if err := stream.Send(&pb.PushPiece{Header: h, Grads: floats(1, 1, 1, 1, 1, 1, 1, 1)}); err != nil {
			return err
		}
		if err := stream.CloseSend(); err != nil {
			return err
		}
		for {
			if _, err := stream.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
	}
	late := make(chan error, 1)
	start := time.Now()
	// Worker 1 pushes after three idle limits; worker 0 waits for it.
	timer := time.AfterFunc(3*idle, func() { late <- push(1) })
	defer timer.Stop()
	require.NoError(t, push(0), "worker 0's push-pull, held at the barrier")
	assert.GreaterOrEqual(t, time.Since(start), 3*idle)
	require.NoError(t, <-late)
	assert.Equal(t, int64(1), cores[0].Clock())
}

// TestATricklingStreamIsEnded: a push that sends one float at a time,
// each within the idle limit, is ended once it has been open longer than
// the stream limit, and nothing is applied.
func TestATricklingStreamIsEnded(t *testing.T) {
	const idle, total = 300 * time.Millisecond, 600 * time.Millisecond
	cores := testcluster.Cores(t, 8, 1, 4, 0.5)
	conn, _, _ := serveCore(t, cores[0], time.Second, grpc.ChainStreamInterceptor(rpc.StreamTimeouts(idle, total)))
	stream, err := pb.NewParameterServerClient(conn).Push(ctxT(t))
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, stream.Send(&pb.PushPiece{Header: header(0, [2]int64{0, 8}), Grads: floats(1)}))
	tick := time.NewTicker(idle / 2)
	defer tick.Stop()
	ended := make(chan error, 1)
	go func() {
		var resp pb.PushResponse
		ended <- stream.RecvMsg(&resp)
	}()
	var err2 error
	for sent := 1; err2 == nil; {
		select {
		case err2 = <-ended:
		case <-tick.C:
			if sent < 8 {
				if stream.Send(&pb.PushPiece{Grads: floats(1)}) == nil {
					sent++
				}
			}
		}
	}
	took := time.Since(start)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err2), "%v", err2)
	assert.ErrorContains(t, err2, "open longer than 600ms (the stream limit")
	assert.GreaterOrEqual(t, took, total)
	assert.Equal(t, int64(0), cores[0].Clock(), "nothing applied")
	t.Logf("ended by the server %v after the stream opened (limit %v)", took.Round(time.Millisecond), total)
}

// capped serves nothing on a listener capped at conns connections: it
// returns the listener and the server's side of each connection as it is
// accepted.
func capped(t *testing.T, conns int) (net.Listener, <-chan net.Conn) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	lis := rpc.Limits{Conns: conns}.Listener(inner, nil)
	accepted := make(chan net.Conn, 8)
	var all []net.Conn // every one accepted, closed at the end
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			all = append(all, c)
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
		for _, c := range all {
			c.Close()
		}
	})
	return lis, accepted
}

// next is the next connection the server accepted, within 10 s.
func next(t *testing.T, accepted <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-accepted:
		return c
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the server accepted no connection within 10 s")
		return nil
	}
}

// dialT dials addr, closing the connection at the test's end.
func dialT(t *testing.T, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer says whether the server closed c: a read ends with
// io.EOF (within 10 s), rather than waiting (for 100 ms).
func closedByServer(t *testing.T, c net.Conn, closed bool) {
	t.Helper()
	wait := 100 * time.Millisecond
	if closed {
		wait = 10 * time.Second
	}
	require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
	_, err := c.Read(make([]byte, 1))
	if closed {
		assert.ErrorIs(t, err, io.EOF, "the server closed it")
	} else {
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "the server kept it")
	}
}

// TestTheConnectionCap: with every connection held past its handshake
// (the server cleared its deadline, as gRPC's does once the handshake is
// done), one past the cap is closed at once; once one closes, a new one
// is taken.
func TestTheConnectionCap(t *testing.T) {
	lis, accepted := capped(t, 2)
	addr := lis.Addr().String()
	dialT(t, addr)
	dialT(t, addr)
	first, second := next(t, accepted), next(t, accepted)
	require.NoError(t, first.SetDeadline(time.Time{}))
	require.NoError(t, second.SetDeadline(time.Time{}))
	closedByServer(t, dialT(t, addr), true)
	require.NoError(t, first.Close())
	c := dialT(t, addr)
	fourth := next(t, accepted)
	assert.Equal(t, c.LocalAddr().String(), fourth.RemoteAddr().String(), "a place freed is taken")
}

// TestANewConnectionTakesThePlaceOfOneInItsHandshake: at the cap, a new
// connection takes the place of the oldest silent one still in its
// handshake (which is closed), never of one past its handshake, nor of one
// that sent bytes while a silent one is held; so silent connections,
// however fast they are reopened, cannot keep a client out
// (TestAWorkerTrainsThroughAConnectionFlood).
func TestANewConnectionTakesThePlaceOfOneInItsHandshake(t *testing.T) {
	lis, accepted := capped(t, 3)
	addr := lis.Addr().String()
	a := dialT(t, addr)
	next(t, accepted)
	talks := dialT(t, addr)
	_, err := talks.Write([]byte{1})
	require.NoError(t, err)
	_, err = io.ReadFull(next(t, accepted), make([]byte, 1)) // the server read its byte
	require.NoError(t, err)
	b := dialT(t, addr)
	require.NoError(t, next(t, accepted).SetDeadline(time.Time{}), "b is past its handshake")

	c := dialT(t, addr)
	third := next(t, accepted)
	assert.Equal(t, c.LocalAddr().String(), third.RemoteAddr().String(), "c is taken")
	closedByServer(t, a, true) // the oldest silent one in its handshake
	d := dialT(t, addr)
	next(t, accepted)
	closedByServer(t, c, true) // now the oldest silent one, younger than talks
	closedByServer(t, talks, false)
	closedByServer(t, b, false)
	closedByServer(t, d, false)
}

// TestSilentConnectionsDoNotLockTheClientsOut: connections that never
// start a handshake are closed after Limits.Handshake and give their place
// back, so a client that comes after a cap's worth of them is served
// (with gRPC's own 120 s they held the shard for two minutes).
func TestSilentConnectionsDoNotLockTheClientsOut(t *testing.T) {
	l := rpc.Limits{StreamsPerConn: 8, Conns: 2, ConnIdle: time.Minute, Handshake: 300 * time.Millisecond}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	lis := l.Listener(inner, nil)
	g, health := rpc.NewGRPCServer(l.ServerOptions()...)
	rpc.RegisterPS(g, health, testcluster.Cores(t, 8, 1, 4, 0.5)[0], nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rpc.Serve(ctx, g, health, lis, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })

	var silent []net.Conn
	for range l.Conns {
		c, err := net.Dial("tcp", lis.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		silent = append(silent, c)
	}
	for _, c := range silent {
		// The server closes it at the handshake's deadline: reading ends.
		require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
		_, err = io.ReadAll(c)
		require.NoError(t, err, "the silent connection was not closed within 20 s")
	}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	_, err = pb.NewParameterServerClient(conn).Info(ctxT(t), &pb.InfoRequest{})
	require.NoError(t, err, "a real client after the silent ones")
}

// TestAnIdleConnectionIsClosed: a connection with no stream open for the
// idle limit is closed by the server (the client sees it leave READY),
// and the client's next call reconnects.
func TestAnIdleConnectionIsClosed(t *testing.T) {
	l := rpc.Limits{StreamsPerConn: 8, Conns: 8, ConnIdle: 200 * time.Millisecond}
	core := testcluster.Cores(t, 8, 1, 4, 0.5)[0]
	conn, _, _ := serveCore(t, core, time.Second, l.ServerOptions()...)
	ps := pb.NewParameterServerClient(conn)
	_, err := ps.Info(ctxT(t), &pb.InfoRequest{})
	require.NoError(t, err)
	ctx := ctxT(t)
	for conn.GetState() == connectivity.Ready {
		require.True(t, conn.WaitForStateChange(ctx, connectivity.Ready), "the idle connection was not closed before the deadline")
	}
	_, err = ps.Info(ctxT(t), &pb.InfoRequest{})
	require.NoError(t, err, "a call after the close reconnects")
}
