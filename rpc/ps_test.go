package rpc_test

import (
	"context"
	"errors"
	"io"
	"math"
	"slices"
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

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/nn"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func dial(t *testing.T, c *testcluster.Cluster, i int) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(c.Addrs()[i], c.DialOption(), c.AsWorkers(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pullAll reads every value shard 0 owns, as a reader that is no worker.
func pullAll(t *testing.T, ps pb.ParameterServerClient) []float32 {
	t.Helper()
	stream, err := ps.Pull(ctxT(t), &pb.PullRequest{WorkerId: -1})
	require.NoError(t, err)
	_, vals := recvPieces(t, stream.Recv)
	return vals
}

// recvPieces reads a stream of pull pieces to its end and returns them
// and their values, concatenated.
func recvPieces(t *testing.T, recv func() (*pb.PullPiece, error)) ([]*pb.PullPiece, []float32) {
	t.Helper()
	var pieces []*pb.PullPiece
	var vals []float32
	for {
		p, err := recv()
		if errors.Is(err, io.EOF) {
			return pieces, vals
		}
		require.NoError(t, err)
		pieces = append(pieces, p)
		v := make([]float32, len(p.Values)/4)
		require.NoError(t, wire.Float32.Decode(v, p.Values))
		vals = append(vals, v...)
	}
}

func floats(v ...float32) []byte { return wire.Float32.Append(nil, v) }

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
		// reason is what Stats.RejectedBy counts the refusal under, once,
		// wherever it was refused (rpc or ps); "" where nothing is counted
		// (an oversize piece is refused by gRPC itself, before Shoal's
		// code sees it).
		reason string
	}{
		{"empty stream", nil, codes.InvalidArgument, "ended before its header", "wire"},
		{"no header", []*pb.PushPiece{{Grads: floats(1, 2, 3, 4)}}, codes.InvalidArgument, "no header", "wire"},
		{"no ranges", []*pb.PushPiece{{Header: header(0)}}, codes.InvalidArgument, "names no ranges", "shape"},
		{"too few floats", []*pb.PushPiece{{Header: header(0, [2]int64{0, 8}), Grads: floats(1, 1, 1, 1, 1, 1, 1)}}, codes.InvalidArgument, "carry 7 floats, the header's ranges hold 8", "shape"},
		{"too many floats", []*pb.PushPiece{{Header: header(0, [2]int64{0, 4}), Grads: floats(1, 1, 1, 1, 1)}}, codes.InvalidArgument, "more than the 4 floats", "shape"},
		{"bytes not floats", []*pb.PushPiece{{Header: header(0, [2]int64{0, 4}), Grads: []byte{1, 2, 3}}}, codes.InvalidArgument, "not a whole number of FLOAT32 values", "shape"},
		{"unknown range", []*pb.PushPiece{{Header: header(0, [2]int64{8, 4}), Grads: floats(1, 1, 1, 1)}}, codes.InvalidArgument, "inside [0,8)", "shape"},
		{"huge range", []*pb.PushPiece{{Header: header(0, [2]int64{0, math.MaxInt64})}}, codes.InvalidArgument, "range", "shape"},
		{"negative length", []*pb.PushPiece{{Header: header(0, [2]int64{0, -4})}}, codes.InvalidArgument, "length > 0", "shape"},
		{"nan", []*pb.PushPiece{{Header: header(0, [2]int64{0, 8}), Grads: floats(1, 1, nan, 1)}, {Grads: floats(1, 1, 1, 1)}}, codes.InvalidArgument, "index 2 is NaN", "non-finite"},
		{"inf in second piece", []*pb.PushPiece{{Header: header(0, [2]int64{0, 8}), Grads: floats(1, 1, 1, 1)}, {Grads: floats(1, inf, 1, 1)}}, codes.InvalidArgument, "index 5 is +Inf", "non-finite"},
		{"huge in second piece", []*pb.PushPiece{{Header: header(0, [2]int64{0, 8}), Grads: floats(1, 1, 1, 1)}, {Grads: floats(1, 3e38, 1, 1)}}, codes.InvalidArgument, "reaches 3e+38 (at index 5)", "magnitude"},
		{"second header", []*pb.PushPiece{{Header: header(0, [2]int64{0, 8}), Grads: floats(1, 1, 1, 1)}, {Header: header(0, [2]int64{0, 8})}}, codes.InvalidArgument, "second header", "wire"},
		{"wrong plan version", []*pb.PushPiece{{Header: &pb.PushHeader{PlanVersion: shard.Version + 1, Ranges: []*pb.Range{{Offset: 0, Length: 8}}}}}, codes.FailedPrecondition, "plan version", "plan"},
		{"oversize piece", []*pb.PushPiece{{Header: header(0, [2]int64{0, 8}), Grads: make([]byte, 2<<20)}}, codes.ResourceExhausted, "larger than max", ""},
	} {
		for _, rpc := range pushRPCs {
			t.Run(rpc.name+"/"+tc.name, func(t *testing.T) {
				c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
				ps := pb.NewParameterServerClient(dial(t, c, 0))
				before := pullAll(t, ps)
				_, err := rpc.push(t, ps, tc.pieces)
				require.Error(t, err)
				assert.Equal(t, tc.code, status.Code(err), "%v", err)
				assert.Contains(t, status.Convert(err).Message(), tc.want)
				assert.Equal(t, before, pullAll(t, ps), "a rejected push changed the values")
				assert.Equal(t, int64(0), c.Shard(0).Core.Clock())
				st := c.Shard(0).Core.Stats()
				if tc.reason == "" {
					assert.Zero(t, st.Rejected)
				} else {
					assert.Equal(t, map[string]int64{tc.reason: 1}, st.RejectedBy, "counted once, by reason")
				}
			})
		}
	}
}

// pushRPCs are the two ways to push: Push, and PushPull (here with a
// pull after the push). Each sends the pieces, closes its side and returns
// the push's result or the call's error.
var pushRPCs = []struct {
	name string
	push func(t *testing.T, ps pb.ParameterServerClient, pieces []*pb.PushPiece) (*pb.PushResponse, error)
}{
	{"Push", func(t *testing.T, ps pb.ParameterServerClient, pieces []*pb.PushPiece) (*pb.PushResponse, error) {
		stream, err := ps.Push(ctxT(t))
		require.NoError(t, err)
		for _, p := range pieces {
			if stream.Send(p) != nil {
				break // the server already answered; CloseAndRecv has it
			}
		}
		return stream.CloseAndRecv()
	}},
	{"PushPull", func(t *testing.T, ps pb.ParameterServerClient, pieces []*pb.PushPiece) (*pb.PushResponse, error) {
		stream, err := ps.PushPull(ctxT(t))
		require.NoError(t, err)
		for i, p := range pieces {
			if i == 0 && p.Header != nil {
				p.Header.Pull = true
			}
			if stream.Send(p) != nil {
				break // the server already answered; Recv has it
			}
		}
		require.NoError(t, stream.CloseSend())
		first, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		recvPieces(t, stream.Recv) // the values after the push
		return first.Push, nil
	}},
}

// syncCores is one sync shard of an 8-float vector (chunks of 4) for the
// given number of workers, plain SGD at lr 0.5, values 0..7.
func syncCores(t *testing.T, workers int) []*ps.Server { return syncCoresChunk(t, workers, 4) }

// syncCoresChunk is syncCores with chunks of chunk floats.
func syncCoresChunk(t *testing.T, workers, chunk int) []*ps.Server {
	var l nn.Layout
	l.Add("w", 8)
	cfg := ps.DefaultConfig()
	cfg.Mode, cfg.Workers = consistency.Sync, workers
	cfg.Optimizer.Algorithm, cfg.Optimizer.LR = "sgd", 0.5
	return testcluster.CoresWith(t, cfg, l, []float32{0, 1, 2, 3, 4, 5, 6, 7}, 1, chunk)
}

// TestPushOfAWrongStep: a sync shard refuses a push for a step it already
// applied (Aborted) and one from beyond the next step (InvalidArgument),
// through either RPC, and its values stay as they were.
func TestPushOfAWrongStep(t *testing.T) {
	for _, rpc := range pushRPCs {
		t.Run(rpc.name, func(t *testing.T) {
			c := testcluster.Start(t, syncCores(t, 1)...)
			ps := pb.NewParameterServerClient(dial(t, c, 0))
			ok := header(0, [2]int64{0, 8})
			ok.WorkerId = 0
			_, err := rpc.push(t, ps, []*pb.PushPiece{{Header: ok, Grads: floats(2, 2, 2, 2, 2, 2, 2, 2)}})
			require.NoError(t, err)
			after := pullAll(t, ps)
			require.Equal(t, []float32{-1, 0, 1, 2, 3, 4, 5, 6}, after)
			for _, tc := range []struct {
				name  string
				step  int64 // the worker's step counter
				clock int64 // the step the push is for
				code  codes.Code
				want  string
			}{
				{"stale", 1, 0, codes.Aborted, "already applied it"},
				{"future", 1, 5, codes.InvalidArgument, "at most one step ahead"},
				{"negative", 1, -3, codes.Aborted, "already applied it"},
			} {
				h := header(tc.step, [2]int64{0, 8})
				h.WorkerId, h.Clock = 0, tc.clock
				_, err := rpc.push(t, ps, []*pb.PushPiece{{Header: h, Grads: floats(2, 2, 2, 2, 2, 2, 2, 2)}})
				assert.Equal(t, tc.code, status.Code(err), "%s: %v", tc.name, err)
				assert.Contains(t, status.Convert(err).Message(), tc.want, tc.name)
				assert.Equal(t, after, pullAll(t, ps), "%s: a rejected push changed the values", tc.name)
				assert.Equal(t, int64(1), c.Shard(0).Core.Clock(), tc.name)
			}
		})
	}
}

// TestHalfSentPush: a push whose client sends its header and half its
// gradient, then goes away, changes nothing, through either RPC; a whole
// push after it is applied once.
func TestHalfSentPush(t *testing.T) {
	for _, name := range []string{"Push", "PushPull"} {
		t.Run(name, func(t *testing.T) {
			c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
			ps := pb.NewParameterServerClient(dial(t, c, 0))
			ctx, cancel := context.WithCancel(ctxT(t))
			var send func(*pb.PushPiece) error
			if name == "Push" {
				stream, err := ps.Push(ctx)
				require.NoError(t, err)
				send = stream.Send
			} else {
				stream, err := ps.PushPull(ctx)
				require.NoError(t, err)
				send = stream.Send
			}
			h := header(0, [2]int64{0, 8})
			h.Pull = true
			require.NoError(t, send(&pb.PushPiece{Header: h, Grads: floats(2, 2, 2, 2)}))
			cancel()
			_, err := pushRPCs[1].push(t, ps, []*pb.PushPiece{{Header: header(1, [2]int64{0, 8}), Grads: floats(2, 2, 2, 2, 2, 2, 2, 2)}})
			require.NoError(t, err)
			assert.Equal(t, []float32{-1, 0, 1, 2, 3, 4, 5, 6}, pullAll(t, ps), "only the whole push was applied")
			assert.Equal(t, int64(1), c.Shard(0).Core.Clock())
		})
	}
}

// TestPushPull: the reply's first piece carries the push's result, the
// values after the push follow; without pull the push's result is all.
func TestPushPull(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	ps := pb.NewParameterServerClient(dial(t, c, 0))
	for _, pull := range []bool{true, false} {
		stream, err := ps.PushPull(ctxT(t))
		require.NoError(t, err)
		h := header(map[bool]int64{true: 0, false: 1}[pull], [2]int64{0, 8})
		h.Pull = pull
		require.NoError(t, stream.Send(&pb.PushPiece{Header: h, Grads: floats(2, 2, 2, 2)}))
		require.NoError(t, stream.Send(&pb.PushPiece{Grads: floats(2, 2, 2, 2)}))
		require.NoError(t, stream.CloseSend())
		pieces, got := recvPieces(t, stream.Recv)
		require.NotEmpty(t, pieces)
		require.NotNil(t, pieces[0].Push, "pull %v: the first piece carries the push's result", pull)
		if pull {
			assert.Equal(t, int64(1), pieces[0].Push.Clock)
			assert.Equal(t, []float32{-1, 0, 1, 2, 3, 4, 5, 6}, got)
			assert.Equal(t, int64(1), pieces[0].Clock)
		} else {
			assert.Equal(t, int64(2), pieces[0].Push.Clock)
			assert.Len(t, pieces, 1)
			assert.Empty(t, got)
		}
	}
}

// TestPushPullWaitsForTheSlowest: in SSP mode (bound 1) a worker's
// push-pull for a step more than the bound ahead of the slowest worker
// answers once the slowest has pushed, with the values after that push.
func TestPushPullWaitsForTheSlowest(t *testing.T) {
	var l nn.Layout
	l.Add("w", 8)
	cfg := ps.DefaultConfig()
	cfg.Mode, cfg.Workers, cfg.Staleness = consistency.SSP, 2, 1
	cfg.Optimizer.Algorithm, cfg.Optimizer.LR = "sgd", 0.5
	c := testcluster.Start(t, testcluster.CoresWith(t, cfg, l, make([]float32, 8), 1, 4)...)
	ps := pb.NewParameterServerClient(dial(t, c, 0))
	push := func(worker, step int64) *pb.PushPiece {
		h := header(step, [2]int64{0, 8})
		h.WorkerId, h.Pull, h.PullStep = worker, true, step+1
		return &pb.PushPiece{Header: h, Grads: floats(2, 2, 2, 2, 2, 2, 2, 2)}
	}
	_, err := pushRPCs[1].push(t, ps, []*pb.PushPiece{push(0, 0)}) // step 1 is within the bound
	require.NoError(t, err)

	stream, err := ps.PushPull(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, stream.Send(push(0, 1))) // step 2 is 2 ahead of worker 1
	require.NoError(t, stream.CloseSend())
	_, err = stream.Header() // the push is in and the pull waits
	require.NoError(t, err)
	_, err = pushRPCs[1].push(t, ps, []*pb.PushPiece{push(1, 0)})
	require.NoError(t, err)
	first, err := stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, int64(3), first.Clock, "the values after worker 1's push too")
	vals := make([]float32, len(first.Values)/4)
	require.NoError(t, wire.Float32.Decode(vals, first.Values))
	// Three pushes of 2, each scaled by 1/2 workers, lr 0.5: -1.5.
	assert.Equal(t, float32(-1.5), vals[0])
}

// TestPushPullWaitsAtTheBarrier: in sync mode a worker's push-pull answers
// only once every worker pushed the step, with the values after it.
func TestPushPullWaitsAtTheBarrier(t *testing.T) {
	c := testcluster.Start(t, syncCores(t, 2)...)
	ps := pb.NewParameterServerClient(dial(t, c, 0))
	stream := waitingPushPull(t, ps) // worker 0's push is in and its pull waits
	h1 := header(0, [2]int64{0, 8})
	h1.WorkerId = 1
	_, err := pushRPCs[0].push(t, ps, []*pb.PushPiece{{Header: h1, Grads: floats(4, 4, 4, 4, 4, 4, 4, 4)}})
	require.NoError(t, err)
	first, err := stream.Recv()
	require.NoError(t, err)
	require.NotNil(t, first.Push)
	assert.Equal(t, int64(1), first.Clock, "the values after the step")
	vals := make([]float32, len(first.Values)/4)
	require.NoError(t, wire.Float32.Decode(vals, first.Values))
	// Mean gradient 3, lr 0.5: every value moved by -1.5.
	assert.Equal(t, []float32{-1.5, -0.5, 0.5, 1.5}, vals[:4])
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
		assert.LessOrEqual(t, len(p.Values), wire.MaxPieceBytes)
		assert.Equal(t, next, p.Offset)
		vals := make([]float32, len(p.Values)/4)
		require.NoError(t, wire.Float32.Decode(vals, p.Values))
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

// TestPullOfAnUnownedRangeIsRefusedFirst: a pull naming a range the shard
// does not own is refused before anything else: before a sync pull waits
// for its step (it waited out the deadline, then said DeadlineExceeded),
// and before the owned ranges named ahead of it are sent.
func TestPullOfAnUnownedRangeIsRefusedFirst(t *testing.T) {
	t.Run("before the wait", func(t *testing.T) {
		c := testcluster.Start(t, syncCores(t, 2)...)
		ps := pb.NewParameterServerClient(dial(t, c, 0))
		// Step 1 waits for two pushes that never come: only the deadline
		// would end it.
		ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
		defer cancel()
		stream, err := ps.Pull(ctx, &pb.PullRequest{WorkerId: 0, Step: 1, Ranges: []*pb.Range{{Offset: 100, Length: 4}}})
		require.NoError(t, err)
		_, err = stream.Recv()
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		assert.ErrorContains(t, err, "want a non-empty range inside [0,8)")
	})
	t.Run("before the owned ranges", func(t *testing.T) {
		c := testcluster.Start(t, testcluster.Cores(t, 8, 2, 4, 0.5)...) // shard 0 owns [0,4)
		ps := pb.NewParameterServerClient(dial(t, c, 0))
		stream, err := ps.Pull(ctxT(t), &pb.PullRequest{Ranges: []*pb.Range{{Offset: 0, Length: 4}, {Offset: 4, Length: 4}}})
		require.NoError(t, err)
		p, err := stream.Recv()
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "first message %v, error %v", p, err)
		assert.ErrorContains(t, err, "chunk 1 is owned by shard 1, this is shard 0")
	})
}

// TestPullOfOverlappingRangesIsRefused: a small request that names the
// whole vector 2,000 times would make the shard send it 2,000 times; a
// pull's ranges must be increasing and disjoint, so a reply is never
// larger than the shard. Nothing is sent before the refusal.
func TestPullOfOverlappingRangesIsRefused(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	ps := pb.NewParameterServerClient(dial(t, c, 0))
	for name, ranges := range map[string][]*pb.Range{
		"the whole vector 2,000 times": slices.Repeat([]*pb.Range{{Offset: 0, Length: 8}}, 2000),
		"overlapping":                  {{Offset: 0, Length: 4}, {Offset: 2, Length: 4}},
		"decreasing":                   {{Offset: 4, Length: 4}, {Offset: 0, Length: 4}},
	} {
		stream, err := ps.Pull(ctxT(t), &pb.PullRequest{Ranges: ranges})
		require.NoError(t, err)
		_, err = stream.Recv()
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", name, err)
		assert.ErrorContains(t, err, "name each float at most once, in increasing order", name)
	}
	// Increasing, disjoint ranges are read.
	stream, err := ps.Pull(ctxT(t), &pb.PullRequest{Ranges: []*pb.Range{{Offset: 1, Length: 2}, {Offset: 5, Length: 3}}})
	require.NoError(t, err)
	var got []float32
	for {
		p, err := stream.Recv()
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		vals := make([]float32, len(p.Values)/4)
		require.NoError(t, wire.Float32.Decode(vals, p.Values))
		got = append(got, vals...)
	}
	assert.Equal(t, []float32{1, 2, 5, 6, 7}, got)
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
	// Three pushes computed from clock 0: stalenesses 0, 1 and 2.
	core := c.Shard(1).Core
	sess, err := core.Rebind(0)
	require.NoError(t, err)
	for step := range int64(3) {
		_, err := core.Push(ctxT(t), ps.Push{WorkerID: 0, Session: sess, Step: step, Ranges: core.Ranges(), Grads: make([]float32, core.Floats())})
		require.NoError(t, err)
	}
	info, err := pb.NewParameterServerClient(dial(t, c, 1)).Info(ctxT(t), &pb.InfoRequest{})
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 1, 1}, info.Stats.StalenessHistogram)
	assert.Equal(t, int32(1), info.Shard)
	assert.Equal(t, "async", info.Mode)
	assert.Equal(t, int64(10), info.Plan.VectorLength)
	require.Len(t, info.Layout, 1)
	assert.Equal(t, "w", info.Layout[0].Name)
	// 10 floats in chunks of at most 4 over 2 shards: four chunks of 3, 3,
	// 2 and 2 floats; shard 1 owns the second and the fourth.
	require.Len(t, info.Ranges, 2)
	assert.Equal(t, int64(3), info.Ranges[0].Offset)
	assert.Equal(t, int64(3), info.Ranges[0].Length)
	assert.Equal(t, int64(8), info.Ranges[1].Offset)
	assert.Equal(t, int64(2), info.Ranges[1].Length)
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
	cfg.Mode, cfg.Workers = consistency.Sync, 2
	c := testcluster.Start(t, testcluster.CoresWith(t, cfg, l, make([]float32, 8), 1, 4)...)
	return c, pb.NewParameterServerClient(dial(t, c, 0))
}

func sendPush(ctx context.Context, t *testing.T, cl pb.ParameterServerClient, worker, step, clock int64) error {
	return sendPushAs(ctx, t, cl, worker, step, clock, nil)
}

// sendPushAs is sendPush with the worker's session (nil: AsWorkers's).
func sendPushAs(ctx context.Context, t *testing.T, cl pb.ParameterServerClient, worker, step, clock int64, session []byte) error {
	stream, err := cl.Push(ctx)
	require.NoError(t, err)
	h := header(step, [2]int64{0, 8})
	h.WorkerId, h.Clock, h.Session = worker, clock, session
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
	pieces, _ := recvPieces(t, stream.Recv)
	elapsed := time.Since(start)
	require.NotEmpty(t, pieces)
	held := time.Duration(pieces[0].HeldMicros) * time.Microsecond
	assert.Positive(t, held)
	assert.LessOrEqual(t, held, elapsed)
}

func TestJoinWorkerAndTheLiveSet(t *testing.T) {
	c, cl := syncCluster(t)
	core := c.Shard(0).Core
	resp, err := cl.JoinWorker(ctxT(t), &pb.JoinWorkerRequest{WorkerId: 1, PlanVersion: shard.Version})
	require.NoError(t, err)
	assert.Equal(t, int64(0), resp.Step)
	assert.Len(t, resp.Session, ps.SessionBytes, "the join binds worker 1 to this caller")

	require.NoError(t, sendPush(ctxT(t), t, cl, 0, 0, 0))
	require.True(t, core.WorkerGone(1))
	info, err := cl.Info(ctxT(t), &pb.InfoRequest{})
	require.NoError(t, err)
	assert.Equal(t, []int64{0}, info.LiveWorkers)
	assert.Equal(t, int64(1), info.Stats.ShortSteps, "step 0 went on without worker 1")

	before := pullAll(t, cl)
	err = sendPushAs(ctxT(t), t, cl, 1, 1, 1, resp.Session)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "worker 1 died or left")
	assert.Equal(t, before, pullAll(t, cl), "a push from a worker that left changes nothing")

	resp, err = cl.JoinWorker(ctxT(t), &pb.JoinWorkerRequest{WorkerId: 1, PlanVersion: shard.Version})
	require.NoError(t, err)
	assert.Equal(t, int64(1), resp.Step, "it comes back at the current step")
	assert.Equal(t, int64(1), resp.Clock)
	assert.Equal(t, []int64{0, 1}, core.LiveWorkers())

	for _, tc := range []struct {
		name string
		req  *pb.JoinWorkerRequest
		code codes.Code
		want string
	}{
		{"unknown worker", &pb.JoinWorkerRequest{WorkerId: 7}, codes.InvalidArgument, "worker 7"},
		{"wrong plan", &pb.JoinWorkerRequest{WorkerId: 0, PlanVersion: 99}, codes.FailedPrecondition, "plan version 99"},
		{"negative step", &pb.JoinWorkerRequest{WorkerId: 0, NotBefore: -1}, codes.InvalidArgument, "not before step -1"},
		{"step from the far future", &pb.JoinWorkerRequest{WorkerId: 0, NotBefore: math.MaxInt64}, codes.InvalidArgument, "want 0.."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cl.JoinWorker(ctxT(t), tc.req)
			assert.Equal(t, tc.code, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), tc.want)
			assert.Equal(t, []int64{0, 1}, core.LiveWorkers(), "a refused join changes nothing")
		})
	}
}

// TestAWrongPlanVersionIsCounted: a pull with a plan version other than
// the shard's, as a worker or as a reader, and each lane of a push-pull
// that carries one, are refused (FailedPrecondition) and counted under
// "plan" (Stats.RejectedPullsBy, RejectedBy: the
// shoal_ps_rejected_*_total metrics), where before only gRPC's own
// counters showed them (issue 44). TestPushBadInput checks Push and
// PushPull.
func TestAWrongPlanVersionIsCounted(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 2, 0.5)...)
	cl := pb.NewParameterServerClient(dial(t, c, 0))
	for _, worker := range []int64{1, -1} {
		stream, err := cl.Pull(ctxT(t), &pb.PullRequest{WorkerId: worker, PlanVersion: shard.Version + 1})
		require.NoError(t, err)
		_, err = stream.Recv()
		assert.Equal(t, codes.FailedPrecondition, status.Code(err), "pull as %d: %v", worker, err)
		assert.ErrorContains(t, err, "plan version")
	}
	for l := range 2 {
		h := header(0, [2]int64{int64(4 * l), 4})
		h.Lane, h.Lanes, h.PlanVersion = uint32(l), 2, shard.Version+1
		stream, err := cl.PushPull(ctxT(t))
		require.NoError(t, err)
		require.NoError(t, stream.Send(&pb.PushPiece{Header: h, Grads: floats(1, 1, 1, 1)}))
		_, err = stream.Recv()
		assert.Equal(t, codes.FailedPrecondition, status.Code(err), "lane %d: %v", l, err)
	}
	st := c.Shard(0).Core.Stats()
	assert.Equal(t, map[string]int64{ps.RejectedPlan: 2}, st.RejectedPullsBy, "each pull counted")
	assert.Equal(t, map[string]int64{ps.RejectedPlan: 2}, st.RejectedBy, "each lane's stream counted, as a session's refusal is")
	assert.Equal(t, int64(0), c.Shard(0).Core.Clock())
}

// Info's stats count a refused push under its reason.
func TestInfoCountsRefusalsByReason(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	ps := pb.NewParameterServerClient(dial(t, c, 0))
	nan := float32(math.NaN())
	_, err := pushRPCs[0].push(t, ps, []*pb.PushPiece{{Header: header(0, [2]int64{0, 8}), Grads: floats(1, 1, nan, 1, 1, 1, 1, 1)}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	info, err := ps.Info(ctxT(t), &pb.InfoRequest{})
	require.NoError(t, err)
	assert.Equal(t, int64(1), info.Stats.Rejected)
	assert.Equal(t, map[string]int64{"non-finite": 1}, info.Stats.RejectedBy)
}
