package rpc_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/internal/testcluster"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/rpc"
	"github.com/shoalml/shoal/wire"
)

// lane is one stream of a push-pull split over lanes, as a test sends it.
type lane struct {
	lane, lanes int
	step        int64
	worker      int64
	clock       int64
	attempt     uint64
	ranges      [][2]int64
	grads       []float32
	half        bool // send half the grads, then cancel
	push        bool // over Push instead of PushPull
	// joined, when not nil, is closed once the shard holds the lane (its
	// headers arrived).
	joined chan struct{}
	// session, when not nil, is the worker's (else the dial's AsWorkers
	// gives it).
	session []byte
}

// laneReply is what one lane got back.
type laneReply struct {
	res    *pb.PushResponse
	vals   map[int64]float32 // offset -> value
	clocks []int64
	err    error
}

func (l lane) header(pull bool) *pb.PushHeader {
	h := header(l.step, l.ranges...)
	h.WorkerId, h.Clock, h.Lane, h.Lanes, h.Pull, h.Attempt, h.Session = l.worker, l.clock, uint32(l.lane), uint32(l.lanes), pull, l.attempt, l.session
	return h
}

// sendLanes sends the lanes at once, each on its own stream (over one
// connection: the shard does not care which), and returns their replies.
func sendLanes(t *testing.T, ps pb.ParameterServerClient, pull bool, lanes ...lane) []laneReply {
	t.Helper()
	out := make([]laneReply, len(lanes))
	var wg sync.WaitGroup
	for i, l := range lanes {
		wg.Go(func() { out[i] = sendLane(t, ps, pull, l) })
	}
	wg.Wait()
	return out
}

func sendLane(t *testing.T, ps pb.ParameterServerClient, pull bool, l lane) laneReply {
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	piece := &pb.PushPiece{Header: l.header(pull), Grads: floats(l.grads...)}
	if l.push {
		stream, err := ps.Push(ctx)
		if err != nil {
			return laneReply{err: err}
		}
		_ = stream.Send(piece)
		res, err := stream.CloseAndRecv()
		return laneReply{res: res, err: err}
	}
	stream, err := ps.PushPull(ctx)
	if err != nil {
		return laneReply{err: err}
	}
	if l.half {
		piece.Grads = floats(l.grads[:len(l.grads)/2]...)
		_ = stream.Send(piece)
		_, _ = stream.Header() // the shard holds the lane
		cancel()
		_, err := stream.Recv()
		return laneReply{err: err}
	}
	if err := stream.Send(piece); err != nil {
		_, err = stream.Recv()
		return laneReply{err: err}
	}
	if l.joined != nil {
		_, _ = stream.Header()
		close(l.joined)
	}
	if err := stream.CloseSend(); err != nil {
		return laneReply{err: err}
	}
	r := laneReply{vals: map[int64]float32{}}
	for i := 0; ; i++ {
		p, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.OK && err.Error() != "EOF" {
				r.err = err
			}
			return r
		}
		if i == 0 {
			r.res = p.Push
		}
		v := make([]float32, len(p.Values)/4)
		require.NoError(t, wire.Float32.Decode(v, p.Values))
		for k, x := range v {
			r.vals[p.Offset+int64(k)] = x
		}
		if len(v) > 0 {
			r.clocks = append(r.clocks, p.Clock)
		}
	}
}

// TestPushPullInLanes: a push-pull split over lanes is applied once, as
// the same push in one stream would be, and each lane gets its own
// ranges' values after it, or, without pull, the push's result.
func TestPushPullInLanes(t *testing.T) {
	g := []float32{2, 2, 2, 2, 2, 2, 2, 2}
	for _, tc := range []struct {
		name  string
		lanes [][][2]int64
	}{
		{"two lanes", [][][2]int64{{{0, 4}}, {{4, 4}}}},
		{"three uneven lanes", [][][2]int64{{{0, 2}}, {{2, 4}}, {{6, 2}}}},
		{"one chunk each", [][][2]int64{{{0, 2}}, {{2, 2}}, {{4, 2}}, {{6, 2}}}},
	} {
		for _, pull := range []bool{true, false} {
			for _, mode := range []string{"async", "sync"} {
				t.Run(tc.name+"/"+mode+map[bool]string{true: "/pull", false: "/no-pull"}[pull], func(t *testing.T) {
					cores := testcluster.Cores(t, 8, 1, 2, 0.5)
					worker := int64(1)
					if mode == "sync" {
						cores, worker = syncCores2(t), 0
					}
					c := testcluster.Start(t, cores...)
					ps := pb.NewParameterServerClient(dial(t, c, 0))
					var ls []lane
					for i, rs := range tc.lanes {
						l := lane{lane: i, lanes: len(tc.lanes), worker: worker, ranges: rs}
						for _, r := range rs {
							l.grads = append(l.grads, g[r[0]:r[0]+r[1]]...)
						}
						ls = append(ls, l)
					}
					want := []float32{-1, 0, 1, 2, 3, 4, 5, 6}
					replies := sendLanes(t, ps, pull, ls...)
					for i, r := range replies {
						require.NoError(t, r.err, "lane %d", i)
						require.NotNil(t, r.res, "lane %d: no push result", i)
						assert.Equal(t, int64(1), r.res.Clock, "lane %d", i)
						if !pull {
							assert.Empty(t, r.vals, "lane %d", i)
							continue
						}
						n := 0
						for _, rg := range tc.lanes[i] {
							for off := rg[0]; off < rg[0]+rg[1]; off++ {
								assert.Equal(t, want[off], r.vals[off], "lane %d, offset %d", i, off)
								n++
							}
						}
						assert.Len(t, r.vals, n, "lane %d sent values outside its ranges", i)
						for _, cl := range r.clocks {
							assert.Equal(t, int64(1), cl, "lane %d", i)
						}
					}
					assert.Equal(t, want, pullAll(t, ps))
					assert.Equal(t, int64(1), c.Shard(0).Core.Clock())
					assert.Equal(t, int64(1), c.Shard(0).Core.Stats().Pushes)
				})
			}
		}
	}
}

// syncCores2 is syncCores for one worker with chunks of 2 floats.
func syncCores2(t *testing.T) []*ps.Server { return syncCoresChunk(t, 1, 2) }

// TestLaneBadInput: a bad lane, or lanes that do not make one push, fail
// every lane with a code that says why, and the shard's values do not
// change.
func TestLaneBadInput(t *testing.T) {
	g4 := []float32{2, 2, 2, 2}
	nan := float32(math.NaN())
	for _, tc := range []struct {
		name  string
		lanes []lane
		code  codes.Code
		want  string
	}{
		{"lane past lanes", []lane{{lane: 2, lanes: 2, ranges: [][2]int64{{0, 4}}, grads: g4}}, codes.InvalidArgument, "want lane < lanes"},
		{"too many lanes", []lane{{lane: 0, lanes: rpc.MaxLanes + 1, ranges: [][2]int64{{0, 4}}, grads: g4}}, codes.InvalidArgument, "want lane < lanes <= 16"},
		{"a lane over Push", []lane{{lane: 0, lanes: 2, ranges: [][2]int64{{0, 4}}, grads: g4, push: true}}, codes.InvalidArgument, "a Push is one stream"},
		{"lane 1 of 1", []lane{{lane: 1, lanes: 1, ranges: [][2]int64{{0, 8}}, grads: []float32{2, 2, 2, 2, 2, 2, 2, 2}}}, codes.InvalidArgument, "want lane 0 of 0 or 1"},
		{"a lane that skips a chunk", []lane{
			{lane: 0, lanes: 2, ranges: [][2]int64{{0, 2}, {4, 2}}, grads: g4},
			{lane: 1, lanes: 2, ranges: [][2]int64{{2, 2}, {6, 2}}, grads: g4}}, codes.InvalidArgument, "skips owned chunks"},
		{"overlapping lanes", []lane{
			{lane: 0, lanes: 2, ranges: [][2]int64{{0, 4}}, grads: g4},
			{lane: 1, lanes: 2, ranges: [][2]int64{{2, 4}}, grads: g4}}, codes.InvalidArgument, "overlap"},
		{"lanes short of the share", []lane{
			{lane: 0, lanes: 2, ranges: [][2]int64{{0, 2}}, grads: g4[:2]},
			{lane: 1, lanes: 2, ranges: [][2]int64{{2, 2}}, grads: g4[:2]}}, codes.InvalidArgument, "carry 4 floats, the shard owns 8"},
		{"headers that disagree", []lane{
			{lane: 0, lanes: 2, ranges: [][2]int64{{0, 4}}, grads: g4},
			{lane: 1, lanes: 2, clock: 3, ranges: [][2]int64{{4, 4}}, grads: g4}}, codes.InvalidArgument, "want the same header on every lane"},
		{"nan in a lane", []lane{
			{lane: 0, lanes: 2, ranges: [][2]int64{{0, 4}}, grads: g4},
			{lane: 1, lanes: 2, ranges: [][2]int64{{4, 4}}, grads: []float32{2, nan, 2, 2}}}, codes.InvalidArgument, "is NaN"},
		{"huge value in the first lane", []lane{
			{lane: 0, lanes: 2, ranges: [][2]int64{{0, 4}}, grads: []float32{2, 3e38, 2, 2}},
			{lane: 1, lanes: 2, ranges: [][2]int64{{4, 4}}, grads: g4}}, codes.InvalidArgument, "reaches 3e+38 (at index 1)"},
		{"wrong length in a lane", []lane{
			{lane: 0, lanes: 2, ranges: [][2]int64{{0, 4}}, grads: g4},
			{lane: 1, lanes: 2, ranges: [][2]int64{{4, 4}}, grads: g4[:3]}}, codes.InvalidArgument, "carry 3 floats, the header's ranges hold 4"},
		{"unknown range in a lane", []lane{
			{lane: 0, lanes: 2, ranges: [][2]int64{{0, 4}}, grads: g4},
			{lane: 1, lanes: 2, ranges: [][2]int64{{8, 4}}, grads: g4}}, codes.InvalidArgument, "inside [0,8)"},
		{"a lane twice", []lane{
			{lane: 0, lanes: 2, ranges: [][2]int64{{0, 4}}, grads: g4},
			{lane: 0, lanes: 2, ranges: [][2]int64{{0, 4}}, grads: g4}}, codes.InvalidArgument, "arrived twice"},
		{"unknown worker", []lane{
			{lane: 0, lanes: 2, worker: -1, ranges: [][2]int64{{0, 4}}, grads: g4}}, codes.InvalidArgument, "expects workers"},
		{"half-sent lane", []lane{
			{lane: 0, lanes: 2, ranges: [][2]int64{{0, 4}}, grads: g4},
			{lane: 1, lanes: 2, ranges: [][2]int64{{4, 4}}, grads: g4, half: true}}, codes.Canceled, "lane 1 of 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 2, 0.5)...)
			ps := pb.NewParameterServerClient(dial(t, c, 0))
			before := pullAll(t, ps)
			for i := range tc.lanes {
				if tc.lanes[i].worker == 0 {
					tc.lanes[i].worker = 1
				}
			}
			replies := sendLanes(t, ps, true, tc.lanes...)
			for i, r := range replies {
				if tc.lanes[i].half {
					continue // its own stream was canceled by the client
				}
				require.Error(t, r.err, "lane %d", i)
				assert.Equal(t, tc.code, status.Code(r.err), "lane %d: %v", i, r.err)
				assert.Contains(t, status.Convert(r.err).Message(), tc.want, "lane %d", i)
			}
			assert.Equal(t, before, pullAll(t, ps), "a refused push changed the values")
			assert.Equal(t, int64(0), c.Shard(0).Core.Clock())
			// The shard takes the next whole push.
			ok := sendLanes(t, ps, true,
				lane{lane: 0, lanes: 2, worker: 1, step: 1, ranges: [][2]int64{{0, 4}}, grads: g4},
				lane{lane: 1, lanes: 2, worker: 1, step: 1, ranges: [][2]int64{{4, 4}}, grads: g4})
			for i, r := range ok {
				require.NoError(t, r.err, "lane %d", i)
			}
			assert.Equal(t, []float32{-1, 0, 1, 2, 3, 4, 5, 6}, pullAll(t, ps))
		})
	}
}

// TestLanesOfAWrongStep: lanes of a sync step the shard already applied
// are refused as Aborted, lanes from beyond the next step as
// InvalidArgument, and nothing changes.
func TestLanesOfAWrongStep(t *testing.T) {
	c := testcluster.Start(t, syncCores2(t)...)
	ps := pb.NewParameterServerClient(dial(t, c, 0))
	g4 := []float32{2, 2, 2, 2}
	two := func(step, clock int64) []laneReply {
		return sendLanes(t, ps, true,
			lane{lane: 0, lanes: 2, step: step, clock: clock, ranges: [][2]int64{{0, 4}}, grads: g4},
			lane{lane: 1, lanes: 2, step: step, clock: clock, ranges: [][2]int64{{4, 4}}, grads: g4})
	}
	for _, r := range two(0, 0) {
		require.NoError(t, r.err)
	}
	after := pullAll(t, ps)
	for _, tc := range []struct {
		name        string
		step, clock int64
		code        codes.Code
		want        string
	}{
		{"stale", 1, 0, codes.Aborted, "already applied it"},
		{"future", 1, 5, codes.InvalidArgument, "at most one step ahead"},
	} {
		for i, r := range two(tc.step, tc.clock) {
			assert.Equal(t, tc.code, status.Code(r.err), "%s, lane %d: %v", tc.name, i, r.err)
			assert.Contains(t, status.Convert(r.err).Message(), tc.want, "%s, lane %d", tc.name, i)
		}
		assert.Equal(t, after, pullAll(t, ps), tc.name)
		assert.Equal(t, int64(1), c.Shard(0).Core.Clock(), tc.name)
	}
}

// TestAMissingLaneEndsThePush: lanes that arrived wait for the others no
// longer than the lane wait, then fail unapplied; the worker's next push
// goes through.
func TestAMissingLaneEndsThePush(t *testing.T) {
	c := testcluster.StartWith(t, []rpc.PSOption{rpc.WithLaneWait(50 * time.Millisecond)}, testcluster.Cores(t, 8, 1, 2, 0.5)...)
	ps := pb.NewParameterServerClient(dial(t, c, 0))
	g4 := []float32{2, 2, 2, 2}
	r := sendLanes(t, ps, true, lane{lane: 0, lanes: 2, worker: 1, ranges: [][2]int64{{0, 4}}, grads: g4})
	assert.Equal(t, codes.DeadlineExceeded, status.Code(r[0].err), "%v", r[0].err)
	assert.Contains(t, status.Convert(r[0].err).Message(), "1 of its 2 lanes arrived within 50ms")
	assert.Equal(t, []float32{0, 1, 2, 3, 4, 5, 6, 7}, pullAll(t, ps))
	for _, r := range sendLanes(t, ps, true,
		lane{lane: 0, lanes: 2, worker: 1, step: 1, ranges: [][2]int64{{0, 4}}, grads: g4},
		lane{lane: 1, lanes: 2, worker: 1, step: 1, ranges: [][2]int64{{4, 4}}, grads: g4}) {
		require.NoError(t, r.err)
	}
	assert.Equal(t, []float32{-1, 0, 1, 2, 3, 4, 5, 6}, pullAll(t, ps))
}

// TestALaneSentAgainReplacesThePush: a lane that arrives again (a retry
// after a broken attempt) ends the unfinished push it would have joined,
// and the new attempt's lanes are applied once.
func TestALaneSentAgainReplacesThePush(t *testing.T) {
	c := testcluster.StartWith(t, []rpc.PSOption{rpc.WithLaneWait(10 * time.Second)}, testcluster.Cores(t, 8, 1, 2, 0.5)...)
	ps := pb.NewParameterServerClient(dial(t, c, 0))
	g4 := []float32{2, 2, 2, 2}
	first := make(chan laneReply, 1)
	joined := make(chan struct{})
	go func() {
		first <- sendLane(t, ps, true, lane{lane: 0, lanes: 2, worker: 1, ranges: [][2]int64{{0, 4}}, grads: g4, joined: joined})
	}()
	<-joined
	for _, r := range sendLanes(t, ps, true,
		lane{lane: 0, lanes: 2, worker: 1, attempt: 2, ranges: [][2]int64{{0, 4}}, grads: g4},
		lane{lane: 1, lanes: 2, worker: 1, attempt: 2, ranges: [][2]int64{{4, 4}}, grads: g4}) {
		require.NoError(t, r.err)
	}
	r := <-first
	assert.Equal(t, codes.Aborted, status.Code(r.err), "%v", r.err)
	assert.Contains(t, status.Convert(r.err).Message(), "replaced by lane")
	assert.Equal(t, []float32{-1, 0, 1, 2, 3, 4, 5, 6}, pullAll(t, ps))
	assert.Equal(t, int64(1), c.Shard(0).Core.Clock())
}

// TestLanesThatStopReadingEndCleanly: lanes whose client stops reading
// their reply, and then goes away, end the shard's sends with an error
// that frees what was queued once (a second free of the piece gRPC had
// already taken panicked the shard), and the shard serves on.
func TestLanesThatStopReadingEndCleanly(t *testing.T) {
	const n, chunk = 1 << 20, 1 << 16 // 16 chunks of 256 KiB; each lane's reply 8 of them
	c := testcluster.Start(t, testcluster.Cores(t, n, 1, chunk, 1e-3)...)
	// Static 64 KiB windows (no BDP growth): a reply the client does not
	// read stops the shard's sender after a piece or two.
	conn, err := grpc.NewClient(c.Addrs()[0], c.DialOption(), c.AsWorkers(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	require.NoError(t, err)
	defer conn.Close()
	ps := pb.NewParameterServerClient(conn)
	ctx, cancel := context.WithCancel(ctxT(t))
	grads := make([]float32, n/2)
	streams := make([]pb.ParameterServer_PushPullClient, 2)
	for l := range streams {
		streams[l], err = ps.PushPull(ctx)
		require.NoError(t, err)
		lane := lane{lane: l, lanes: 2, worker: 1, ranges: [][2]int64{{int64(l * n / 2), n / 2}}}
		for at := 0; at < n/2; at += n / 8 {
			piece := &pb.PushPiece{Grads: floats(grads[at : at+n/8]...)}
			if at == 0 {
				piece.Header = lane.header(true)
			}
			require.NoError(t, streams[l].Send(piece))
		}
		require.NoError(t, streams[l].CloseSend())
	}
	for l, stream := range streams {
		p, err := stream.Recv() // the push is applied and the reply under way
		require.NoError(t, err, "lane %d", l)
		require.NotNil(t, p.Push, "lane %d", l)
	}
	cancel() // neither lane reads the rest of its reply
	cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()), client.WithLanes(2))
	require.NoError(t, err)
	defer cl.Close()
	// Worker 1 again, through a client of its own (a restarted worker).
	start, err := cl.JoinWorker(ctxT(t), 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), start)
	dst := make([]float32, n)
	_, err = cl.PushPull(ctxT(t), client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: 1, Step: 1, Grads: make([]float32, n)}, Pull: true, Dst: dst})
	require.NoError(t, err, "the next push-pull")
	assert.Equal(t, int64(2), c.Shard(0).Core.Clock())
}
