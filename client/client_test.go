package client_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, c *testcluster.Cluster, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append([]client.Option{client.WithDialOptions(c.DialOption()), client.WithRetry(4, time.Millisecond)}, opts...)
	cl, err := client.Dial(ctxT(t), c.Addrs(), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	return cl
}

func TestPullPushAcrossShards(t *testing.T) {
	for _, tc := range []struct {
		name              string
		n, servers, chunk int
	}{
		{"one shard", 10, 1, 4},
		{"three shards", 29, 3, 4},
		{"more shards than chunks", 5, 4, 4},
		{"pieces larger than chunks", 700_000, 2, 300_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testcluster.Start(t, testcluster.Cores(t, tc.n, tc.servers, tc.chunk, 0.5)...)
			cl := dial(t, c)
			params := make([]float32, tc.n)
			clocks, err := cl.Pull(ctxT(t), params)
			require.NoError(t, err)
			assert.Len(t, clocks, tc.servers)
			for i, v := range params {
				require.Equal(t, float32(i), v, "index %d", i)
			}
			grads := make([]float32, tc.n)
			for i := range grads {
				grads[i] = 2
			}
			res, err := cl.Push(ctxT(t), client.PushArgs{WorkerID: 1, Step: 0, Clocks: clocks, Grads: grads})
			require.NoError(t, err)
			assert.Zero(t, res.Duplicates)
			_, err = cl.Pull(ctxT(t), params)
			require.NoError(t, err)
			for i, v := range params {
				require.Equal(t, float32(i)-1, v, "index %d", i)
			}
		})
	}
}

func TestRetryOnUnavailable(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 2, 4, 0.5)...)
	cl := dial(t, c)
	c.Shard(1).FailNext(codes.Unavailable, 2)
	params := make([]float32, 8)
	_, err := cl.Pull(ctxT(t), params)
	require.NoError(t, err)
	assert.Equal(t, []float32{0, 1, 2, 3, 4, 5, 6, 7}, params)
}

// TestDialRetriesUnavailable: a shard killed while it answers the
// handshake (it restarts from its checkpoint) fails the Info call with
// Unavailable; Dial tries it again, as any call, instead of failing the
// worker at its start.
func TestDialRetriesUnavailable(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 2, 4, 0.5)...)
	c.Shard(1).FailInfo(2)
	cl := dial(t, c)
	assert.Equal(t, 2, cl.Info().Plan.Servers)

	c.Shard(0).FailInfo(100)
	_, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()), client.WithRetry(3, time.Millisecond))
	require.Error(t, err, "a shard that stays unavailable fails Dial once the attempts are spent")
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Contains(t, err.Error(), "client: info from server "+c.Addrs()[0])
}

func TestRetriedPushIsAppliedOnce(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 2, 4, 0.5)...)
	cl := dial(t, c)
	_, err := cl.JoinWorker(ctxT(t), 7)
	require.NoError(t, err)
	// Shard 0 applies the push but the reply is lost; the client retries.
	c.Shard(0).LoseReplies(1)
	grads := []float32{2, 2, 2, 2, 2, 2, 2, 2}
	res, err := cl.Push(ctxT(t), client.PushArgs{WorkerID: 7, Step: 3, Grads: grads})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Duplicates, "the retry must be recognised as a duplicate")
	assert.Equal(t, int64(1), c.Shard(0).Core.Clock())
	assert.Equal(t, int64(1), c.Shard(1).Core.Clock())
	params := make([]float32, 8)
	_, err = cl.Pull(ctxT(t), params)
	require.NoError(t, err)
	assert.Equal(t, []float32{-1, 0, 1, 2, 3, 4, 5, 6}, params)
}

func TestGivesUpAfterAttempts(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	cl := dial(t, c)
	c.Shard(0).FailNext(codes.Unavailable, 100)
	_, err := cl.Pull(ctxT(t), make([]float32, 8))
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
}

// A call failing with Unavailable is tried again until the retry time is
// spent, however many tries that takes: with none, it is tried once; with
// 50 ms, it stops after some tries and says so; with a minute, it outlasts
// a shard that fails ten calls in a row and succeeds.
func TestRetriesForTheRetryTime(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	params := make([]float32, 8)

	cl := dial(t, c, client.WithRetry(0, time.Millisecond), client.WithRetryFor(0))
	c.Shard(0).FailNext(codes.Unavailable, 100)
	_, err := cl.Pull(ctxT(t), params)
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Contains(t, err.Error(), "still unavailable after 1 tries")

	cl = dial(t, c, client.WithRetry(0, time.Millisecond), client.WithRetryFor(50*time.Millisecond))
	_, err = cl.Pull(ctxT(t), params)
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Contains(t, err.Error(), "still unavailable after")

	cl = dial(t, c, client.WithRetry(0, time.Millisecond), client.WithRetryFor(time.Minute))
	c.Shard(0).FailNext(codes.Unavailable, 10)
	_, err = cl.Pull(ctxT(t), params)
	require.NoError(t, err)

	_, err = client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()), client.WithRetryFor(-time.Second))
	require.Error(t, err, "a negative retry time")
	assert.Contains(t, err.Error(), "want attempts >= 0")
}

// cutDialer dials TCP and can cut the connections made so far as a network
// cut does: nothing is reset, writes vanish, reads wait until the
// connection is closed. Connections made after the cut work.
type cutDialer struct {
	mu    sync.Mutex
	conns []*cutConn
}

type cutConn struct {
	net.Conn
	cut  chan struct{} // closed at the cut
	gone chan struct{} // closed by Close
	once sync.Once
}

func (d *cutDialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cc := &cutConn{Conn: c, cut: make(chan struct{}), gone: make(chan struct{})}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.conns = append(d.conns, cc)
	return cc, nil
}

// cutAll cuts every connection made so far and says how many there were.
func (d *cutDialer) cutAll() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		close(c.cut)
	}
	return len(d.conns)
}

func (d *cutDialer) dials() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

func (c *cutConn) Read(b []byte) (int, error) {
	select {
	case <-c.cut:
		<-c.gone
		return 0, net.ErrClosed
	default:
	}
	// A read already waiting when the cut comes returns what arrives: the
	// cut comes between calls here, when nothing is in flight.
	return c.Conn.Read(b)
}

func (c *cutConn) Write(b []byte) (int, error) {
	select {
	case <-c.cut:
		return len(b), nil
	default:
		return c.Conn.Write(b)
	}
}

func (c *cutConn) Close() error {
	c.once.Do(func() { close(c.gone) })
	return c.Conn.Close()
}

// A call on a connection that went silent (a network cut: no reset, no
// byte back) is tried again on a new connection once the keepalive ping
// goes unanswered, instead of waiting out its call timeout and failing
// with DeadlineExceeded, which is not tried again. A worker cut off from
// its shard for 20 s once failed that way in the cluster test.
func TestACallOnASilentConnectionIsTriedOnANewOne(t *testing.T) {
	c := testcluster.StartTCP(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	var d cutDialer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The call timeout is longer than gRPC's shortest ping interval (10 s)
	// and the ping's 1 s timeout: with the keepalive the call is tried
	// again well inside it; without, it fails with DeadlineExceeded.
	cl, err := client.Dial(ctx, c.Addrs(), client.WithDialOptions(grpc.WithContextDialer(d.dial)),
		client.WithKeepalive(10*time.Second, time.Second), client.WithCallTimeout(40*time.Second), client.WithRetry(0, time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	before := d.cutAll()
	params := make([]float32, 8)
	_, err = cl.Pull(ctx, params)
	require.NoError(t, err, "a pull on a cut connection")
	assert.Equal(t, []float32{0, 1, 2, 3, 4, 5, 6, 7}, params)
	assert.Greater(t, d.dials(), before, "the pull was answered on a new connection")

	_, err = client.Dial(ctx, c.Addrs(), client.WithKeepalive(0, time.Second))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "keepalive every 0s with a timeout of 1s: want both > 0")
}

func TestNoRetryOnInvalidArgument(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	cl := dial(t, c)
	c.Shard(0).FailNext(codes.InvalidArgument, 1)
	_, err := cl.Pull(ctxT(t), make([]float32, 8))
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
}

func TestCallDeadline(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	cl := dial(t, c, client.WithCallTimeout(200*time.Millisecond))
	c.Shard(0).Stall(1)
	_, err := cl.Pull(ctxT(t), make([]float32, 8))
	require.Error(t, err)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
}

func TestBadBuffers(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	cl := dial(t, c)
	_, err := cl.Pull(ctxT(t), make([]float32, 7))
	assert.ErrorContains(t, err, "pull into 7 floats, the vector has 8")
	_, err = cl.Push(ctxT(t), client.PushArgs{Grads: make([]float32, 9)})
	assert.ErrorContains(t, err, "push of 9 floats, the vector has 8")
	_, err = cl.Push(ctxT(t), client.PushArgs{Grads: make([]float32, 8), Clocks: client.Clocks{1, 2}})
	assert.ErrorContains(t, err, "2 clocks")
}

// A mistyped address fails Dial at once, naming it, instead of after the
// retries a server that is still starting gets (a minute by default).
func TestDialRefusesMalformedAddresses(t *testing.T) {
	for _, tc := range []struct {
		addrs []string
		want  string
	}{
		{[]string{""}, `server address 1 of 1, "": missing port in address; want HOST:PORT`},
		{[]string{"127.0.0.1:7070", "ps1"}, `server address 2 of 2, "ps1": address ps1: missing port in address; want HOST:PORT`},
		{[]string{"127.0.0.1:99999"}, `port "99999": want 1..65535`},
		{[]string{"127.0.0.1:0"}, `port "0": want 1..65535`},
		{[]string{"127.0.0.1:x7"}, `port "x7": want 1..65535`},
	} {
		_, err := client.Dial(t.Context(), tc.addrs)
		require.ErrorContains(t, err, tc.want)
	}
}

func TestDialChecksShards(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 2, 4, 0.5)...)
	addrs := c.Addrs()
	for _, tc := range []struct {
		name  string
		addrs []string
		want  string
	}{
		{"wrong order", []string{addrs[1], addrs[0]}, "says it is shard 1, but it is listed as shard 0"},
		{"missing shard", addrs[:1], "plan of 2 servers, but 1 addresses"},
		{"no addresses", nil, "no server addresses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.Dial(ctxT(t), tc.addrs, client.WithDialOptions(c.DialOption()))
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestCompressedPush(t *testing.T) {
	third := float32(1) / 3
	for _, tc := range []struct {
		name string
		enc  pb.Encoding
		want float32 // what the server adds, after the wire's rounding
	}{
		{"float32", pb.Encoding_FLOAT32, third},
		{"float16", pb.Encoding_FLOAT16, 0.333251953125},
		{"bfloat16", pb.Encoding_BFLOAT16, 0.333984375},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testcluster.Start(t, testcluster.Cores(t, 700_000, 2, 300_000, 1)...)
			cl := dial(t, c, client.WithPushEncoding(tc.enc))
			grads := make([]float32, 700_000)
			for i := range grads {
				grads[i] = third
			}
			_, err := cl.Push(ctxT(t), client.PushArgs{WorkerID: 1, Grads: grads})
			require.NoError(t, err)
			params := make([]float32, len(grads))
			_, err = cl.Pull(ctxT(t), params)
			require.NoError(t, err)
			for _, i := range []int{0, 1, 299_999, 300_000, 699_999} {
				assert.Equal(t, float32(i)-tc.want, params[i], "index %d", i)
			}
		})
	}
}

func TestFloat16OverflowIsRefused(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 1)...)
	cl := dial(t, c, client.WithPushEncoding(pb.Encoding_FLOAT16))
	grads := []float32{1, 1, 70000, 1, 1, 1, 1, 1}
	_, err := cl.Push(ctxT(t), client.PushArgs{WorkerID: 1, Grads: grads})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Contains(t, err.Error(), "index 2 is +Inf")
	assert.Equal(t, int64(0), c.Shard(0).Core.Clock())
}

// TestPushPullAcrossShards: one push-pull sends every shard its part and
// brings back the whole vector after the push; a shard whose reply was
// lost applied the push once, and the retry only pulls.
func TestPushPullAcrossShards(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 10, 3, 4, 0.5)...)
	cl := dial(t, c)
	_, err := cl.JoinWorker(ctxT(t), 7)
	require.NoError(t, err)
	c.Shard(1).LoseReplies(1)
	grads := []float32{2, 2, 2, 2, 2, 2, 2, 2, 2, 2}
	params := make([]float32, 10)
	res, err := cl.PushPull(ctxT(t), client.PushPullArgs{
		PushArgs: client.PushArgs{WorkerID: 7, Step: 3, Grads: grads},
		Pull:     true, Dst: params,
	})
	require.NoError(t, err)
	assert.Equal(t, []float32{-1, 0, 1, 2, 3, 4, 5, 6, 7, 8}, params)
	assert.Equal(t, 1, res.Duplicates, "shard 1's retry is recognised as a duplicate")
	assert.Equal(t, client.Clocks{1, 1, 1}, res.PullClocks)
	for s := range 3 {
		assert.Equal(t, int64(1), c.Shard(s).Core.Clock(), "shard %d applied the push once", s)
	}

	// Without pull, Dst is left alone.
	res, err = cl.PushPull(ctxT(t), client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: 7, Step: 4, Grads: grads}})
	require.NoError(t, err)
	assert.Nil(t, res.PullClocks)
	assert.Equal(t, client.Clocks{2, 2, 2}, res.Clocks)

	_, err = cl.PushPull(ctxT(t), client.PushPullArgs{PushArgs: client.PushArgs{Grads: grads}, Pull: true, Dst: make([]float32, 9)})
	assert.ErrorContains(t, err, "pull into 9 floats, the vector has 10")
}

// syncShards starts 2 sync shards of a vector of 8 zeros for workers.
func syncShards(t *testing.T, workers int) *testcluster.Cluster {
	var l nn.Layout
	l.Add("w", 8)
	cfg := ps.DefaultConfig()
	cfg.Mode, cfg.Workers = consistency.Sync, workers
	return testcluster.Start(t, testcluster.CoresWith(t, cfg, l, make([]float32, 8), 2, 4)...)
}

// TestJoinWorkerAgreesOnOneStep: worker 2's push of step 0 reached shard 0
// and not yet shard 1, so the shards first name different steps for a
// returning worker 1; JoinWorker asks again until both admit it at the
// same step, where neither waits for it earlier.
func TestJoinWorkerAgreesOnOneStep(t *testing.T) {
	c := syncShards(t, 3)
	cores := []*ps.Server{c.Shard(0).Core, c.Shard(1).Core}
	for _, core := range cores {
		require.True(t, core.WorkerGone(1))
	}
	// Workers 0 and 2 push with sessions bound for them on each shard
	// (Rebind admits nothing: the test sets the membership up itself).
	sessions := make([]map[int64]ps.Session, len(cores))
	for i, core := range cores {
		sessions[i] = map[int64]ps.Session{}
		for _, w := range []int64{0, 2} {
			var err error
			sessions[i][w], err = core.Rebind(w)
			require.NoError(t, err)
		}
	}
	_, err := cores[0].Push(ctxT(t), ps.Push{WorkerID: 2, Session: sessions[0][2], Ranges: cores[0].Ranges(), Grads: make([]float32, cores[0].Floats())})
	require.NoError(t, err)

	step, err := dial(t, c).JoinWorker(ctxT(t), 1)
	require.NoError(t, err)
	assert.Equal(t, int64(1), step)
	// Step 0 completes on both shards without worker 1.
	pushes := map[int][]int64{0: {0}, 1: {2, 0}}
	for i, core := range cores {
		for _, w := range pushes[i] {
			_, err := core.Push(ctxT(t), ps.Push{WorkerID: w, Session: sessions[i][w], Ranges: core.Ranges(), Grads: make([]float32, core.Floats())})
			require.NoError(t, err)
		}
		assert.Equal(t, int64(1), core.Clock(), "shard %d", i)
	}
}

// TestNotMemberAfterTheShardsDroppedTheWorker: once membership took worker
// 1 out of a sync job's live set, its push fails with an error NotMember
// recognises through the client's wrapping and the join of the shards'
// errors; other failures are not taken for it; and after JoinWorker the
// worker pushes again at the step named.
func TestNotMemberAfterTheShardsDroppedTheWorker(t *testing.T) {
	c := syncShards(t, 2)
	cl := dial(t, c)
	for s := range 2 {
		require.True(t, c.Shard(s).Core.WorkerGone(1))
	}
	_, err := cl.Push(ctxT(t), client.PushArgs{WorkerID: 1, Step: 0, Grads: make([]float32, 8)})
	require.Error(t, err)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.True(t, client.NotMember(err), "not recognised: %v", err)
	assert.Contains(t, err.Error(), "has not joined again")

	_, err = cl.Push(ctxT(t), client.PushArgs{WorkerID: 5, Step: 0, Grads: make([]float32, 8)})
	require.Error(t, err, "worker 5 of 2")
	assert.False(t, client.NotMember(err), "an invalid worker id is another failure: %v", err)
	assert.False(t, client.NotMember(status.Error(codes.FailedPrecondition, "worker not in the live set")), "the text alone is not the detail")

	step, err := cl.JoinWorker(ctxT(t), 1)
	require.NoError(t, err)
	_, err = cl.Push(ctxT(t), client.PushArgs{WorkerID: 1, Step: step, Grads: make([]float32, 8)})
	require.NoError(t, err)
}

// TestPushPullInLanes: a push-pull split over lanes (several streams and
// connections per shard) leaves the same values and clocks as one stream,
// for any lane count, more lanes than a shard has chunks included; a
// lane whose reply was lost makes the whole push-pull try again, and the
// shard applied the push once.
func TestPushPullInLanes(t *testing.T) {
	const n = 29
	grads := make([]float32, n)
	want := make([]float32, n)
	for i := range grads {
		grads[i], want[i] = 2, float32(i)-1
	}
	for _, servers := range []int{1, 3} {
		for _, lanes := range []int{1, 2, 3, 5} {
			t.Run(fmt.Sprintf("servers=%d/lanes=%d", servers, lanes), func(t *testing.T) {
				c := testcluster.Start(t, testcluster.Cores(t, n, servers, 2, 0.5)...)
				cl := dial(t, c, client.WithLanes(lanes))
				for s, k := range cl.Lanes() { // 29 floats in chunks of 2: 15 chunks
					assert.Equal(t, min(lanes, len(c.Shard(s).Core.Ranges())), k, "shard %d", s)
				}
				_, err := cl.JoinWorker(ctxT(t), 7)
				require.NoError(t, err)
				c.Shard(0).LoseReplies(1)
				params := make([]float32, n)
				res, err := cl.PushPull(ctxT(t), client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: 7, Step: 3, Grads: grads}, Pull: true, Dst: params})
				require.NoError(t, err)
				assert.Equal(t, want, params)
				assert.Equal(t, 1, res.Duplicates, "shard 0's retry is recognised as a duplicate")
				for s := range servers {
					assert.Equal(t, int64(1), res.PullClocks[s], "shard %d", s)
					assert.Equal(t, int64(1), c.Shard(s).Core.Clock(), "shard %d applied the push once", s)
				}
				res, err = cl.PushPull(ctxT(t), client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: 7, Step: 4, Grads: grads}})
				require.NoError(t, err)
				assert.Equal(t, 0, res.Duplicates)
				for s := range servers {
					assert.Equal(t, int64(2), res.Clocks[s], "shard %d", s)
				}
			})
		}
	}
	c := testcluster.Start(t, testcluster.Cores(t, n, 1, 2, 0.5)...)
	for _, k := range []int{0, client.MaxLanes + 1} {
		_, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()), client.WithLanes(k))
		assert.ErrorContains(t, err, fmt.Sprintf("%d lanes per shard: want 1..16", k))
	}
}

// TestSetShardAddrMovesEveryLane: a shard served elsewhere (restarted on
// another address) is reached there by every connection the client holds
// to it, its lanes' too: a push-pull in lanes after the move goes through.
func TestSetShardAddrMovesEveryLane(t *testing.T) {
	cores := testcluster.Cores(t, 29, 1, 2, 0.5)
	old := testcluster.StartTCP(t, cores...)
	cl, err := client.Dial(ctxT(t), old.Addrs(), client.WithLanes(3), client.WithRetry(0, 5*time.Millisecond), client.WithRetryFor(20*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	grads := make([]float32, 29)
	for i := range grads {
		grads[i] = 2
	}
	params := make([]float32, 29)
	_, err = cl.PushPull(ctxT(t), client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: 1, Step: 0, Grads: grads}, Pull: true, Dst: params})
	require.NoError(t, err)
	moved := testcluster.StartTCP(t, cores...)
	old.Close()
	require.NoError(t, cl.SetShardAddr(0, moved.Addrs()[0]))
	res, err := cl.PushPull(ctxT(t), client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: 1, Step: 1, Grads: grads}, Pull: true, Dst: params})
	require.NoError(t, err)
	assert.Equal(t, client.Clocks{2}, res.PullClocks)
	for i, v := range params {
		require.Equal(t, float32(i)-2, v, "index %d", i)
	}
}

// TestPushPullWithTheParallelStep: a shard that updates its chunks in
// parallel, and reads each for the reply from the goroutine that updated
// it, answers an async push-pull, in one stream or in lanes, with the
// values and result of a serial shard, bit for bit, the push result in the
// first piece whichever chunk it came with.
func TestPushPullWithTheParallelStep(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	const n = 200_003 // 13 chunks of about 15,400 floats
	var l nn.Layout
	l.Add("w", n)
	initial := make([]float32, n)
	for i := range initial {
		initial[i] = float32(i%200-100) * 1e-3
	}
	for _, lanes := range []int{1, 3} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			cls := make([]*client.Client, 2)
			for i, par := range []bool{false, true} {
				cfg := ps.DefaultConfig()
				cfg.Optimizer = optim.Config{Algorithm: "momentum", LR: 0.05, Momentum: 0.9}
				cfg.ParallelStep = par
				c := testcluster.Start(t, testcluster.CoresWith(t, cfg, l, initial, 1, 1<<14)...)
				cls[i] = dial(t, c, client.WithLanes(lanes))
			}
			rng := rand.New(rand.NewPCG(1, 2))
			grads := make([]float32, n)
			params := [][]float32{make([]float32, n), make([]float32, n)}
			clocks := client.Clocks{0}
			for step := range int64(4) {
				for i := range grads {
					grads[i] = float32(rng.NormFloat64()) * 1e-2
				}
				var res [2]client.PushPullResult
				for i, cl := range cls {
					var err error
					res[i], err = cl.PushPull(ctxT(t), client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: 1, Step: step, Clocks: clocks, Grads: grads}, Pull: true, Dst: params[i]})
					require.NoError(t, err, "parallel step %v", i == 1)
				}
				assert.Equal(t, res[0], res[1], "step %d: the push-pull's result", step)
				assert.Equal(t, client.Clocks{step + 1}, res[1].PullClocks, "step %d", step)
				clocks = res[1].PullClocks
				for k := range params[0] {
					if math.Float32bits(params[0][k]) != math.Float32bits(params[1][k]) {
						t.Fatalf("step %d, float %d: the parallel step's reply %v, the serial one's %v", step, k, params[1][k], params[0][k])
					}
				}
			}
			assert.NotEqual(t, initial, params[1], "the pushes changed nothing")
		})
	}
}

// TestRepliesAreOneViewWhilePushesGoOn: workers push-pulling one async or
// SSP shard at once each get back one consistent view (every value after
// the same pushes), although the shard sends replies and pulls from its
// own values without a copy and goes on updating meanwhile
// (copy-on-write): all
// weights start equal and every gradient is the same, so a view is a
// vector of one value, and a reply that mixed versions would hold two.
func TestRepliesAreOneViewWhilePushesGoOn(t *testing.T) {
	const n, workers, steps = 60_000, 4, 25
	var l nn.Layout
	l.Add("w", n)
	for _, tc := range []struct {
		mode  consistency.Mode
		lanes int
		par   bool
	}{{consistency.Async, 1, false}, {consistency.Async, 3, false}, {consistency.Async, 3, true}, {consistency.SSP, 1, false}, {consistency.SSP, 3, true}} {
		t.Run(fmt.Sprintf("%v/lanes=%d/parallel-step=%v", tc.mode, tc.lanes, tc.par), func(t *testing.T) {
			cfg := ps.DefaultConfig()
			cfg.Mode, cfg.Workers, cfg.Staleness = tc.mode, workers, steps // SSP: pulls never wait, pushes go on meanwhile
			cfg.Optimizer = optim.Config{Algorithm: "momentum", LR: 0.01, Momentum: 0.9}
			cfg.ParallelStep = tc.par
			c := testcluster.Start(t, testcluster.CoresWith(t, cfg, l, make([]float32, n), 1, 4096)...)
			grads := make([]float32, n)
			for i := range grads {
				grads[i] = 1
			}
			var wg sync.WaitGroup
			errs := make([]error, workers)
			for w := range workers {
				cl := dial(t, c, client.WithLanes(tc.lanes))
				wg.Go(func() {
					dst := make([]float32, n)
					clocks := client.Clocks{0}
					for step := range int64(steps) {
						res, err := cl.PushPull(ctxT(t), client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: int64(w), Step: step, Clocks: clocks, Grads: grads}, Pull: true, Dst: dst})
						if err != nil {
							errs[w] = err
							return
						}
						clocks = res.PullClocks
						for i, v := range dst {
							if math.Float32bits(v) != math.Float32bits(dst[0]) {
								errs[w] = fmt.Errorf("worker %d, step %d, clock %d: float %d is %v, float 0 %v: a reply of two versions", w, step, clocks[0], i, v, dst[0])
								return
							}
						}
					}
				})
			}
			wg.Wait()
			for _, err := range errs {
				require.NoError(t, err)
			}
			assert.Equal(t, int64(workers*steps), c.Shard(0).Core.Clock())
		})
	}
}

func TestAutoLanesTurnOnWithTheCores(t *testing.T) {
	for _, c := range []struct{ cpus, lanes int }{{1, 1}, {2, 1}, {7, 1}, {8, 4}, {16, 4}, {128, 4}} {
		assert.Equal(t, c.lanes, client.AutoLanes(c.cpus), "lanes on %d CPUs", c.cpus)
	}
}

// TestASpanOffTheChunksIsRefused: a push's span must run from one chunk
// boundary to another within the vector, or the client sends nothing; a
// span of whole chunks to a shard that takes no fragments is refused
// there; either way the weights stay as they were.
func TestASpanOffTheChunksIsRefused(t *testing.T) {
	c := testcluster.Start(t, testcluster.Cores(t, 8, 1, 4, 0.5)...)
	cl := dial(t, c)
	for _, sp := range []client.Span{{Off: 1, End: 4}, {Off: 0, End: 9}, {Off: 4, End: 4}, {Off: -4, End: 4}} {
		_, err := cl.Push(ctxT(t), client.PushArgs{Grads: make([]float32, 8), Span: sp})
		assert.ErrorContains(t, err, fmt.Sprintf("push of the span [%d,%d): want a non-empty part of the vector's 8 floats from one chunk boundary to another", sp.Off, sp.End))
	}
	grads := make([]float32, 8)
	for i := range grads {
		grads[i] = 1
	}
	_, err := cl.Push(ctxT(t), client.PushArgs{WorkerID: 1, Grads: grads, Span: client.Span{Off: 0, End: 4}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "push covers 4 floats, the shard owns 8: push every owned chunk (this shard takes no fragments)")
	params := make([]float32, 8)
	_, err = cl.Pull(ctxT(t), params)
	require.NoError(t, err)
	for i, v := range params {
		require.Equal(t, float32(i), v, "index %d", i)
	}
}
