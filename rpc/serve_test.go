package rpc_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/rpc"
)

// serveSync serves a sync shard of two workers with rpc.Serve over
// bufconn; it returns a client, the cancel that starts the drain, and
// Serve's result.
func serveSync(t *testing.T, drain time.Duration) (*grpc.ClientConn, context.CancelFunc, <-chan error) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	g, health := rpc.NewGRPCServer()
	rpc.RegisterPS(g, health, syncCores(t, 2)[0], nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- rpc.Serve(ctx, g, health, lis, drain) }()
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
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
