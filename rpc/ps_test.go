package rpc_test

import (
	"context"
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/nn"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func dial(t *testing.T, c *testcluster.Cluster, i int) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(c.Addrs()[i], c.DialOption(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pullAll reads every value shard 0 owns.
func pullAll(t *testing.T, ps pb.ParameterServerClient) []float32 {
	t.Helper()
	stream, err := ps.Pull(ctxT(t), &pb.PullRequest{})
	require.NoError(t, err)
	var out []float32
	for {
		p, err := stream.Recv()
		if err != nil {
			break
		}
		vals := make([]float32, len(p.Values)/4)
		require.NoError(t, pb.DecodeFloats(vals, p.Values))
		out = append(out, vals...)
	}
	return out
}

func floats(v ...float32) []byte { return pb.AppendFloats(nil, v) }

func header(step int64, ranges ...[2]int64) *pb.PushHeader {
	h := &pb.PushHeader{WorkerId: 1, Step: step, PlanVersion: shard.Version}
	for _, r := range ranges {
		h.Ranges = append(h.Ranges, &pb.Range{Offset: r[0], Length: r[1]})
	}
	return h
}

// TestPushBadInput sends every kind of bad push and checks the code and
// that a following pull returns unchanged values.
func TestPushBadInput(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		name   string
		pieces []*pb.PushPiece
		code   codes.Code
		want   string
	}{
		{"empty stream", nil, codes.InvalidArgument, "ended before its header"},
		{"no header", []*pb.PushPiece{{Grads: floats(1, 2, 3, 4)}}, codes.InvalidArgument, "no header"},
		{"no ranges", []*pb.PushPiece{{Header: header(0)}}, codes.InvalidArgument, "names no ranges"},
		{"too few floats", []*pb.PushPiece{{Header: header(0, [2]int64{0, 8}), Grads: floats(1, 1, 1, 1, 1, 1, 1)}}, codes.InvalidArgument, "carry 7 floats, the header's ranges hold 8"},
		{"too many floats", []*pb.PushPiece{{Header: header(0, [2]int64{0, 4}), Grads: floats(1, 1, 1, 1, 1)}}, codes.InvalidArgument, "more than the 4 floats"},
		{"bytes not floats", []*pb.PushPiece{{Header: header(0, [2]int64{0, 4}), Grads: []byte{1, 2, 3}}}, codes.InvalidArgument, "not a whole number of FLOAT32 values"},
		{"unknown range", []*pb.PushPiece{{Header: header(0, [2]int64{8, 4}), Grads: floats(1, 1, 1, 1)}}, codes.InvalidArgument, "inside [0,8)"},
		{"huge range", []*pb.PushPiece{{Header: header(0, [2]int64{0, math.MaxInt64})}}, codes.InvalidArgument, "range"},
		{"negative length", []*pb.PushPiece{{Header: header(0, [2]int64{0, -4})}}, codes.InvalidArgument, "length > 0"},
		{"nan", []*pb.PushPiece{{Header: header(0, [2]int64{0, 8}), Grads: floats(1, 1, nan, 1)}, {Grads: floats(1, 1, 1, 1)}}, codes.InvalidArgument, "index 2 is NaN"},
		{"inf in second piece", []*pb.PushPiece{{Header: header(0, [2]int64{0, 8}), Grads: floats(1, 1, 1, 1)}, {Grads: floats(1, inf, 1, 1)}}, codes.InvalidArgument, "index 5 is +Inf"},
		{"second header", []*pb.PushPiece{{Header: header(0, [2]int64{0, 8}), Grads: floats(1, 1, 1, 1)}, {Header: header(0, [2]int64{0, 8})}}, codes.InvalidArgument, "second header"},
		{"wrong plan version", []*pb.PushPiece{{Header: &pb.PushHeader{PlanVersion: shard.Version + 1, Ranges: []*pb.Range{{Offset: 0, Length: 8}}}}}, codes.FailedPrecondition, "plan version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
			ps := pb.NewParameterServerClient(dial(t, c, 0))
			before := pullAll(t, ps)
			stream, err := ps.Push(ctxT(t))
			require.NoError(t, err)
			for _, p := range tc.pieces {
				if stream.Send(p) != nil {
					break // the server already answered; CloseAndRecv has it
				}
			}
			_, err = stream.CloseAndRecv()
			require.Error(t, err)
			assert.Equal(t, tc.code, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), tc.want)
			assert.Equal(t, before, pullAll(t, ps), "a rejected push changed the values")
			assert.Equal(t, int64(0), c.Shard(0).Core.Clock())
		})
	}
}

func TestPushThenPull(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	ps := pb.NewParameterServerClient(dial(t, c, 0))
	stream, err := ps.Push(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, stream.Send(&pb.PushPiece{Header: header(0, [2]int64{0, 8}), Grads: floats(2, 2, 2, 2)}))
	require.NoError(t, stream.Send(&pb.PushPiece{Grads: floats(2, 2, 2, 2)}))
	resp, err := stream.CloseAndRecv()
	require.NoError(t, err)
	assert.Equal(t, int64(1), resp.Clock)
	assert.Equal(t, []float32{-1, 0, 1, 2, 3, 4, 5, 6}, pullAll(t, ps))
}

func TestPullIsStreamedInPieces(t *testing.T) {
	const n = 600_000 // 2.4 MB: three pieces of at most 1 MiB
	c := testcluster.Start(t, testcluster.Cores(t, n, 1, n, 0.1)...)
	ps := pb.NewParameterServerClient(dial(t, c, 0))
	stream, err := ps.Pull(ctxT(t), &pb.PullRequest{})
	require.NoError(t, err)
	pieces, next := 0, int64(0)
	for {
		p, err := stream.Recv()
		if err != nil {
			break
		}
		assert.LessOrEqual(t, len(p.Values), pb.MaxPieceBytes)
		assert.Equal(t, next, p.Offset)
		vals := make([]float32, len(p.Values)/4)
		require.NoError(t, pb.DecodeFloats(vals, p.Values))
		assert.Equal(t, float32(p.Offset), vals[0])
		next += int64(len(vals))
		pieces++
	}
	assert.Equal(t, int64(n), next)
	assert.Equal(t, 3, pieces)
}

func TestPullOfUnownedRange(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	ps := pb.NewParameterServerClient(dial(t, c, 0))
	stream, err := ps.Pull(ctxT(t), &pb.PullRequest{Ranges: []*pb.Range{{Offset: 6, Length: 4}}})
	require.NoError(t, err)
	_, err = stream.Recv()
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
}

func TestMessageOverSizeLimit(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	ps := pb.NewParameterServerClient(dial(t, c, 0))
	stream, err := ps.Push(ctxT(t))
	require.NoError(t, err)
	_ = stream.Send(&pb.PushPiece{Header: header(0, [2]int64{0, 8}), Grads: make([]byte, 2<<20)})
	_, err = stream.CloseAndRecv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Equal(t, int64(0), c.Shard(0).Core.Clock())
}

func TestInfo(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 10, 2, 4, 0.5)...)
	info, err := pb.NewParameterServerClient(dial(t, c, 1)).Info(ctxT(t), &pb.InfoRequest{})
	require.NoError(t, err)
	assert.Equal(t, int32(1), info.Shard)
	assert.Equal(t, "async", info.Mode)
	assert.Equal(t, int64(10), info.Plan.VectorLength)
	require.Len(t, info.Layout, 1)
	assert.Equal(t, "w", info.Layout[0].Name)
	require.Len(t, info.Ranges, 1)
	assert.Equal(t, int64(4), info.Ranges[0].Offset)
}

func TestHealthAndReflection(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	conn := dial(t, c, 0)
	for _, svc := range []string{"", pb.ParameterServer_ServiceDesc.ServiceName} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctxT(t), &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.Status, "service %q", svc)
	}
	rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}))
	resp, err := rs.Recv()
	require.NoError(t, err)
	require.NoError(t, rs.CloseSend())
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	assert.Contains(t, names, "shoal.v1.ParameterServer")
	assert.Contains(t, names, "grpc.health.v1.Health")
}

// syncCluster is one sync shard of 8 floats expecting 2 workers.
func syncCluster(t *testing.T) (*testcluster.Cluster, pb.ParameterServerClient) {
	var l nn.Layout
	l.Add("w", 8)
	cfg := ps.DefaultConfig()
	cfg.Mode, cfg.Workers = ps.ModeSync, 2
	c := testcluster.Start(t, testcluster.CoresWith(t, cfg, l, make([]float32, 8), 1, 4)...)
	return c, pb.NewParameterServerClient(dial(t, c, 0))
}

func sendPush(ctx context.Context, t *testing.T, cl pb.ParameterServerClient, worker, step, clock int64) error {
	stream, err := cl.Push(ctx)
	require.NoError(t, err)
	h := header(step, [2]int64{0, 8})
	h.WorkerId, h.Clock = worker, clock
	_ = stream.Send(&pb.PushPiece{Header: h, Grads: floats(1, 1, 1, 1, 1, 1, 1, 1)})
	_, err = stream.CloseAndRecv()
	return err
}

func TestSyncPushCodes(t *testing.T) {
	c, cl := syncCluster(t)
	require.NoError(t, sendPush(ctxT(t), t, cl, 0, 0, 0))
	require.NoError(t, sendPush(ctxT(t), t, cl, 1, 0, 0))
	require.Equal(t, int64(1), c.Shard(0).Core.Clock())
	before := pullAll(t, cl)
	for _, tc := range []struct {
		name          string
		worker, clock int64
		code          codes.Code
		want          string
	}{
		{"step from the far future", 0, 1_000_000, codes.InvalidArgument, "at most one step ahead"},
		{"stale step", 0, 0, codes.Aborted, "already applied it"},
		{"unknown worker", 9, 1, codes.InvalidArgument, "worker 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sendPush(ctxT(t), t, cl, tc.worker, 10, tc.clock)
			assert.Equal(t, tc.code, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), tc.want)
			assert.Equal(t, before, pullAll(t, cl))
			assert.Equal(t, int64(1), c.Shard(0).Core.Clock())
		})
	}
}

func TestSyncPullNamesTheMissingWorker(t *testing.T) {
	_, cl := syncCluster(t)
	require.NoError(t, sendPush(ctxT(t), t, cl, 0, 0, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	stream, err := cl.Pull(ctx, &pb.PullRequest{WorkerId: 0, Step: 1})
	require.NoError(t, err)
	_, err = stream.Recv()
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "waiting for worker(s) 1")
}

func TestPushEncodings(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    func(*pb.PushHeader)
		data []byte
		want string
	}{
		{"odd float16 bytes", func(h *pb.PushHeader) { h.Encoding = pb.Encoding_FLOAT16 }, []byte{1, 2, 3}, "whole number of FLOAT16 values"},
		{"unknown encoding", func(h *pb.PushHeader) { h.Encoding = 9 }, nil, "unknown encoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
			ps := pb.NewParameterServerClient(dial(t, c, 0))
			stream, err := ps.Push(ctxT(t))
			require.NoError(t, err)
			h := header(0, [2]int64{0, 8})
			tc.h(h)
			_ = stream.Send(&pb.PushPiece{Header: h, Grads: tc.data})
			_, err = stream.CloseAndRecv()
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), tc.want)
			assert.Equal(t, int64(0), c.Shard(0).Core.Clock())
		})
	}
}

// TestPullSaysHowLongItWasHeld: a sync pull waiting for another worker's
// push says, on its first piece, how long the shard held it: more than
// nothing, and no longer than the caller waited.
func TestPullSaysHowLongItWasHeld(t *testing.T) {
	_, cl := syncCluster(t)
	require.NoError(t, sendPush(ctxT(t), t, cl, 0, 0, 0))
	start := time.Now()
	stream, err := cl.Pull(ctxT(t), &pb.PullRequest{WorkerId: 0, Step: 1})
	require.NoError(t, err)
	_, err = stream.Header() // the shard has the pull and is about to wait
	require.NoError(t, err)
	require.NoError(t, sendPush(ctxT(t), t, cl, 1, 0, 0)) // releases it
	var pieces []*pb.PullPiece
	for {
		p, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		pieces = append(pieces, p)
	}
	elapsed := time.Since(start)
	require.NotEmpty(t, pieces)
	held := time.Duration(pieces[0].HeldMicros) * time.Microsecond
	assert.Positive(t, held)
	assert.LessOrEqual(t, held, elapsed)
}
