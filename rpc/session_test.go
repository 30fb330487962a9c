package rpc_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/internal/testcluster"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/rpc"
	"github.com/shoalml/shoal/shard"
)

// rawDial is a connection to shard i that sends what it is given: no
// session is added (dial's AsWorkers adds the worker's).
func rawDial(t *testing.T, c *testcluster.Cluster, i int) pb.ParameterServerClient {
	t.Helper()
	conn, err := grpc.NewClient(c.Addrs()[i], c.DialOption(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return pb.NewParameterServerClient(conn)
}

// TestOnlyTheWorkersSessionSpeaksForIt: worker 1 joined through one
// connection; another, which reaches the shard as freely, pushes and
// pulls as worker 1 without its session, with one of its own making, with
// a malformed one, and binds it again: each is refused with a code and a
// message that say what was wrong (before the push's ranges are looked at
// or its floats stored), counted by reason in Info, and nothing changes;
// the worker's own push then applies. A worker id that never joined the
// shard is refused with the reason NO_SESSION, on which a client binds it.
func TestOnlyTheWorkersSessionSpeaksForIt(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	real, forger := rawDial(t, c, 0), rawDial(t, c, 0)
	joined, err := real.JoinWorker(ctxT(t), &pb.JoinWorkerRequest{WorkerId: 1, PlanVersion: shard.Version})
	require.NoError(t, err)
	require.Len(t, joined.Session, 16)
	before := pullAll(t, real)

	push := func(cl pb.ParameterServerClient, h *pb.PushHeader) error {
		_, err := pushRPCs[0].push(t, cl, []*pb.PushPiece{{Header: h, Grads: floats(1, 1, 1, 1, 1, 1, 1, 1)}})
		return err
	}
	as := func(worker int64, session []byte, ranges ...[2]int64) *pb.PushHeader {
		h := header(0, ranges...)
		h.WorkerId, h.Session = worker, session
		return h
	}
	whole := [2]int64{0, 8}
	for _, tc := range []struct {
		name string
		h    *pb.PushHeader
		code codes.Code
		want string
	}{
		{"no session", as(1, nil, whole), codes.PermissionDenied, "a call for worker 1 without a session: worker 1 joined shard 0"},
		{"a made-up session", as(1, bytes.Repeat([]byte{7}, 16), whole), codes.PermissionDenied, "not its current one on shard 0"},
		{"a malformed session", as(1, []byte{1, 2, 3}, whole), codes.InvalidArgument, "a session of 3 bytes: want 16"},
		{"a lying range and no session", as(1, nil, [2]int64{0, 1 << 40}), codes.PermissionDenied, "without a session"},
	} {
		err := push(forger, tc.h)
		assert.Equal(t, tc.code, status.Code(err), "%s: %v", tc.name, err)
		assert.Contains(t, status.Convert(err).Message(), tc.want, tc.name)
	}
	stream, err := forger.Pull(ctxT(t), &pb.PullRequest{WorkerId: 1, PlanVersion: shard.Version})
	require.NoError(t, err)
	_, err = stream.Recv()
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "a pull as worker 1: %v", err)
	_, err = forger.JoinWorker(ctxT(t), &pb.JoinWorkerRequest{WorkerId: 1, PlanVersion: shard.Version, Rebind: true})
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "a rebind of a worker that holds a session: %v", err)
	assert.Contains(t, status.Convert(err).Message(), "join (JoinWorker) to take the id over")

	err = push(forger, as(0, joined.Session, whole))
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "worker 0 never joined: %v", err)
	var reason string
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == pb.ErrorDomain {
			reason = info.Reason
		}
	}
	assert.Equal(t, pb.ReasonNoSession, reason)

	assert.Equal(t, before, pullAll(t, real), "no refused call changed anything")
	info, err := real.Info(ctxT(t), &pb.InfoRequest{})
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"session": 5}, info.Stats.RejectedBy)
	assert.Equal(t, map[string]int64{"session": 1}, info.Stats.RejectedPullsBy)

	require.NoError(t, push(real, as(1, joined.Session, whole)), "the worker's own push")
	assert.Equal(t, int64(1), c.Shard(0).Core.Clock())
}

// TestAForgedLaneDoesNotEndTheWorkersPush: a lane without the worker's
// session, for the worker's push-pull in progress, is refused on its
// header and touches nothing of the push it names. Before, a lane that
// named a push in progress ended it (a lane whose header the shard
// refused failed the others; a lane of another attempt replaced it).
func TestAForgedLaneDoesNotEndTheWorkersPush(t *testing.T) {
	c := testcluster.StartWith(t, []rpc.PSOption{rpc.WithLaneWait(10 * time.Second)}, testcluster.Cores(t, 8, 1, 2, 0.5)...)
	real, forger := rawDial(t, c, 0), rawDial(t, c, 0)
	joined, err := real.JoinWorker(ctxT(t), &pb.JoinWorkerRequest{WorkerId: 1, PlanVersion: shard.Version})
	require.NoError(t, err)
	g4 := []float32{2, 2, 2, 2}
	first := make(chan laneReply, 1)
	held := make(chan struct{})
	go func() {
		first <- sendLane(t, real, true, lane{lane: 0, lanes: 2, worker: 1, ranges: [][2]int64{{0, 4}}, grads: g4, joined: held, session: joined.Session})
	}()
	<-held
	for _, l := range []lane{
		{lane: 1, lanes: 2, worker: 1, ranges: [][2]int64{{4, 4}}, grads: g4},                                       // the push's other lane
		{lane: 0, lanes: 2, worker: 1, attempt: 9, ranges: [][2]int64{{0, 4}}, grads: g4},                           // another attempt
		{lane: 7, lanes: 2, worker: 1, ranges: [][2]int64{{4, 4}}, grads: g4},                                       // a bad lane
		{lane: 1, lanes: 2, worker: 1, ranges: [][2]int64{{4, 4}}, grads: g4, session: bytes.Repeat([]byte{1}, 16)}, // a made-up session
	} {
		r := sendLane(t, forger, true, l)
		assert.Equal(t, codes.PermissionDenied, status.Code(r.err), "%+v: %v", l, r.err)
	}
	r := sendLane(t, real, true, lane{lane: 1, lanes: 2, worker: 1, ranges: [][2]int64{{4, 4}}, grads: g4, session: joined.Session})
	require.NoError(t, r.err)
	require.NoError(t, (<-first).err)
	assert.Equal(t, []float32{-1, 0, 1, 2, 3, 4, 5, 6}, pullAll(t, real))
	assert.Equal(t, int64(1), c.Shard(0).Core.Clock())
	assert.Equal(t, int64(4), c.Shard(0).Core.Stats().RejectedBy["session"])
}
