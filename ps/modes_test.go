package ps

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
)

// newModeServer returns the single shard of 4 floats (initial 0,1,2,3)
// in the given mode, plain SGD at lr 1: async at the full rate (the mode's
// mechanics; update_test.go tests the rules), SSP at its default 1/N.
func newModeServer(t *testing.T, mode consistency.Mode, workers, backup int, staleness int64) *Server {
	t.Helper()
	var l nn.Layout
	l.Add("w", 4)
	plan, err := shard.New(4, 1, 16)
	require.NoError(t, err)
	ocfg := optim.DefaultConfig()
	ocfg.LR = 1
	var upd UpdateConfig
	if mode == consistency.Async {
		upd.Rule = UpdateFull
	}
	s, err := New(Config{Mode: mode, Plan: plan, Layout: l, Optimizer: ocfg, Workers: workers, BackupWorkers: backup, Staleness: staleness, Update: upd}, []float32{0, 1, 2, 3})
	require.NoError(t, err)
	return s
}

var whole = []shard.Range{{Off: 0, Len: 4}}

func fill(v float32) []float32 { return []float32{v, v, v, v} }

// push sends worker w's gradient g for step, computed at clock.
func push(t *testing.T, s *Server, w, step, clock int64, g float32) PushResult {
	t.Helper()
	res, err := s.Push(context.Background(), signed(s, Push{WorkerID: w, Step: step, Clock: clock, Ranges: whole, Grads: fill(g)}))
	require.NoError(t, err)
	return res
}

func values(t *testing.T, s *Server) []float32 { return readAll(t, s) }

// canceled is a context that is already over: a wait that is needed
// fails at once, a wait that is not needed succeeds.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestSyncAveragesAndAppliesOnce(t *testing.T) {
	s := newModeServer(t, consistency.Sync, 3, 0, 0)
	push(t, s, 0, 0, 0, 1)
	push(t, s, 1, 0, 0, 2)
	assert.Equal(t, int64(0), s.Clock(), "two of three pushes must not apply the step")
	assert.Equal(t, []float32{0, 1, 2, 3}, values(t, s))
	err := s.WaitToRead(canceled(), 2, 1)
	require.ErrorIs(t, err, ErrWaitTimeout)
	assert.Contains(t, err.Error(), "waiting for worker(s) 2")

	// A pull for step 1 waiting in another goroutine is released by the
	// last push.
	released := make(chan error, 1)
	go func() { released <- s.WaitToRead(context.Background(), 0, 1) }()
	push(t, s, 2, 0, 0, 3)
	require.NoError(t, <-released)
	assert.Equal(t, int64(1), s.Clock())
	assert.Equal(t, []float32{-2, -1, 0, 1}, values(t, s), "the mean gradient 2 applied once")
}

func TestSyncBadPushes(t *testing.T) {
	s := newModeServer(t, consistency.Sync, 2, 0, 0)
	push(t, s, 0, 0, 0, 1)
	push(t, s, 1, 0, 0, 1)
	before := values(t, s)
	for _, tc := range []struct {
		name  string
		push  Push
		isErr error
		want  string
	}{
		{"stale step", Push{WorkerID: 0, Step: 5, Clock: 0}, ErrStale, "already applied it and is at step 1"},
		{"far future", Push{WorkerID: 0, Step: 5, Clock: 100}, ErrInvalidArgument, "at most one step ahead"},
		{"unknown worker", Push{WorkerID: 7, Step: 5, Clock: 1}, ErrInvalidArgument, "worker 7: this shard expects workers 0..1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.push.Ranges, tc.push.Grads = whole, fill(1)
			_, err := s.Push(context.Background(), signed(s, tc.push))
			require.ErrorIs(t, err, tc.isErr)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, before, values(t, s))
			assert.Equal(t, int64(1), s.Clock())
		})
	}
	// A second push for the same step from the same worker.
	push(t, s, 0, 6, 1, 1)
	_, err := s.Push(context.Background(), signed(s, Push{WorkerID: 0, Step: 7, Clock: 1, Ranges: whole, Grads: fill(1)}))
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.Contains(t, err.Error(), "already pushed step 1")
}

func TestSyncFuturePushWaits(t *testing.T) {
	s := newModeServer(t, consistency.Sync, 2, 0, 0)
	push(t, s, 0, 0, 0, 1)
	_, err := s.Push(canceled(), signed(s, Push{WorkerID: 0, Step: 1, Clock: 1, Ranges: whole, Grads: fill(1)}))
	require.ErrorIs(t, err, ErrWaitTimeout)
	assert.Contains(t, err.Error(), "waiting for worker(s) 1")

	done := make(chan PushResult, 1)
	go func() {
		res, _ := s.Push(context.Background(), signed(s, Push{WorkerID: 0, Step: 1, Clock: 1, Ranges: whole, Grads: fill(1)}))
		done <- res
	}()
	push(t, s, 1, 0, 0, 1)
	res := <-done
	assert.False(t, res.Duplicate)
	assert.Equal(t, int64(1), res.Clock, "step 1 still waits for worker 1")
}

// TestSyncPushSentTwiceWhileItWaits: a push for the next step waits for
// the current one; the same push sent again meanwhile (a retry) waits
// beside it. When the step ends, one goes in and the other is a
// duplicate; before, the second was refused as InvalidArgument ("already
// pushed"), which a client does not retry, and the worker failed.
func TestSyncPushSentTwiceWhileItWaits(t *testing.T) {
	s := newModeServer(t, consistency.Sync, 2, 0, 0)
	push(t, s, 0, 0, 0, 1)
	type reply struct {
		res PushResult
		err error
	}
	replies := make(chan reply, 2)
	for range 2 {
		go func() {
			res, err := s.Push(context.Background(), signed(s, Push{WorkerID: 0, Step: 1, Clock: 1, Ranges: whole, Grads: fill(1)}))
			replies <- reply{res, err}
		}()
	}
	for st, _ := s.Stall(); st.Pulls < 2; st, _ = s.Stall() {
		runtime.Gosched() // until both wait for step 0 to end
	}
	push(t, s, 1, 0, 0, 1)
	a, b := <-replies, <-replies
	require.NoError(t, a.err)
	require.NoError(t, b.err)
	assert.True(t, a.res.Duplicate != b.res.Duplicate, "one goes in, the other is a duplicate: %+v, %+v", a.res, b.res)
	push(t, s, 1, 1, 1, 1)
	assert.Equal(t, int64(2), s.Clock(), "step 1 took worker 0's push once, and worker 1's")
}

// TestWaitSaysWhyItEnded: a wait that ends before what it waits for is an
// ErrWaitTimeout that also wraps the reason, so a caller that canceled
// sees context.Canceled and one whose deadline (or MaxWait) passed sees
// context.DeadlineExceeded.
func TestWaitSaysWhyItEnded(t *testing.T) {
	expired, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		maxWait time.Duration
		want    error
	}{
		{name: "canceled", ctx: canceled(), want: context.Canceled},
		{name: "deadline passed", ctx: expired, want: context.DeadlineExceeded},
		{name: "max wait passed", ctx: context.Background(), maxWait: time.Nanosecond, want: context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, w := range []struct {
				name string
				wait func(ctx context.Context, sync, ssp *Server) error
			}{
				{"sync pull", func(ctx context.Context, sync, _ *Server) error { return sync.WaitToRead(ctx, 0, 1) }},
				{"sync push for the next step", func(ctx context.Context, sync, _ *Server) error {
					_, err := sync.Push(ctx, signed(sync, Push{WorkerID: 0, Step: 1, Clock: 1, Ranges: whole, Grads: fill(1)}))
					return err
				}},
				{"ssp pull", func(ctx context.Context, _, ssp *Server) error { return ssp.WaitToRead(ctx, 0, 2) }},
			} {
				t.Run(w.name, func(t *testing.T) {
					// Both wait for worker 1, which never pushes.
					sync := newModeServer(t, consistency.Sync, 2, 0, 0)
					push(t, sync, 0, 0, 0, 1)
					ssp := newModeServer(t, consistency.SSP, 2, 0, 1)
					push(t, ssp, 0, 0, 0, 1)
					push(t, ssp, 0, 1, 1, 1)
					if tc.maxWait > 0 {
						sync.cfg.MaxWait, ssp.cfg.MaxWait = tc.maxWait, tc.maxWait
					}
					err := w.wait(tc.ctx, sync, ssp)
					assert.ErrorIs(t, err, ErrWaitTimeout)
					assert.ErrorIs(t, err, tc.want)
				})
			}
		})
	}
}

func TestSyncRetryIsDuplicate(t *testing.T) {
	s := newModeServer(t, consistency.Sync, 2, 0, 0)
	push(t, s, 0, 0, 0, 1)
	res := push(t, s, 0, 0, 0, 1) // the same push again: a retry
	assert.True(t, res.Duplicate)
	push(t, s, 1, 0, 0, 3)
	assert.Equal(t, []float32{-2, -1, 0, 1}, values(t, s), "mean of 1 and 3, the retry not counted")
}

func TestBackupWorkers(t *testing.T) {
	s := newModeServer(t, consistency.Sync, 3, 1, 0)
	push(t, s, 0, 0, 0, 1)
	push(t, s, 2, 0, 0, 3)
	assert.Equal(t, int64(1), s.Clock(), "N-b = 2 pushes apply the step")
	assert.Equal(t, []float32{-2, -1, 0, 1}, values(t, s))
	res := push(t, s, 1, 0, 0, 100) // the straggler
	assert.True(t, res.Dropped)
	assert.Equal(t, []float32{-2, -1, 0, 1}, values(t, s), "a dropped push changes nothing")
	assert.Equal(t, int64(1), s.Stats().Dropped)
	// The straggler joins the next step.
	push(t, s, 1, 1, 1, 1)
	push(t, s, 0, 1, 1, 1)
	assert.Equal(t, int64(2), s.Clock())
}

// TestARetriedDroppedPushIsAnsweredDropped: a straggler's push that the
// shard dropped, sent again after its reply was lost, is a duplicate the
// shard answers as dropped, so the worker counts the drop the shard
// counted (issue 44, item 9: the shard counted 2,132 dropped pushes where
// the workers' summary said 2,009); a retry of an applied push is not.
func TestARetriedDroppedPushIsAnsweredDropped(t *testing.T) {
	s := newModeServer(t, consistency.Sync, 3, 1, 0)
	push(t, s, 0, 0, 0, 1)
	push(t, s, 2, 0, 0, 3)
	first := push(t, s, 1, 0, 0, 100) // the straggler; say its reply is lost
	require.True(t, first.Dropped)
	again := push(t, s, 1, 0, 0, 100)
	assert.True(t, again.Duplicate, "the retry is the same push")
	assert.True(t, again.Dropped, "and answered as the original was")
	assert.Equal(t, int64(1), s.Stats().Dropped, "counted once")
	assert.Equal(t, []float32{-2, -1, 0, 1}, values(t, s))
	applied := push(t, s, 0, 0, 0, 1) // an applied push sent again
	assert.True(t, applied.Duplicate)
	assert.False(t, applied.Dropped)
}

func TestSetWorkersReleasesAStepHeldByALeaver(t *testing.T) {
	s := newModeServer(t, consistency.Sync, 3, 0, 0)
	push(t, s, 0, 0, 0, 1)
	push(t, s, 1, 0, 0, 3)
	require.True(t, s.WorkerGone(2))
	assert.Equal(t, int64(1), s.Clock())
	assert.Equal(t, []float32{-2, -1, 0, 1}, values(t, s))
	// From now on two workers make a step.
	push(t, s, 0, 1, 1, 1)
	push(t, s, 1, 1, 1, 1)
	assert.Equal(t, int64(2), s.Clock())
}

func TestSSPBound(t *testing.T) {
	s := newModeServer(t, consistency.SSP, 2, 0, 1)
	push(t, s, 0, 0, 0, 2)
	// Worker 0 has pushed 1 step, worker 1 none: step 1 is 1 ahead, allowed.
	require.NoError(t, s.WaitToRead(canceled(), 0, 1))
	push(t, s, 0, 1, 1, 2)
	// Step 2 would be 2 ahead of worker 1.
	err := s.WaitToRead(canceled(), 0, 2)
	require.ErrorIs(t, err, ErrWaitTimeout)
	assert.Contains(t, err.Error(), "slowest worker(s) [1] pushed 0 steps")
	_, err = s.Push(context.Background(), signed(s, Push{WorkerID: 0, Step: 2, Ranges: whole, Grads: fill(1)}))
	require.ErrorIs(t, err, ErrInvalidArgument, "a push more than s ahead")

	released := make(chan error, 1)
	go func() { released <- s.WaitToRead(context.Background(), 0, 2) }()
	push(t, s, 1, 0, 0, 2)
	require.NoError(t, <-released)
	// Each push was applied at once, scaled by 1/N: three pushes of 2.
	assert.Equal(t, []float32{-3, -2, -1, 0}, values(t, s))
	assert.Equal(t, int64(3), s.Clock())
}

func TestSSPWithZeroStalenessIsSync(t *testing.T) {
	sync := newModeServer(t, consistency.Sync, 2, 0, 0)
	ssp := newModeServer(t, consistency.SSP, 2, 0, 0)
	for _, s := range []*Server{sync, ssp} {
		push(t, s, 0, 0, 0, 1)
		assert.Equal(t, int64(0), s.Clock())
		push(t, s, 1, 0, 0, 3)
		require.NoError(t, s.WaitToRead(canceled(), 0, 1))
	}
	assert.Equal(t, values(t, sync), values(t, ssp))
}

func TestModeConfigErrors(t *testing.T) {
	var l nn.Layout
	l.Add("w", 4)
	plan, _ := shard.New(4, 1, 16)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"backup without sync", Config{Mode: consistency.Async, Workers: 3, BackupWorkers: 1}, "only sync mode"},
		{"all backups", Config{Mode: consistency.Sync, Workers: 2, BackupWorkers: 2}, "want 0..1"},
		{"negative staleness", Config{Mode: consistency.SSP, Workers: 2, Staleness: -1}, "staleness -1"},
		{"ring has no servers", Config{Mode: consistency.Ring}, "mode ring: not a parameter-server mode (want async, sync or ssp)"},
		{"no mode", Config{}, "mode Mode(0): not a parameter-server mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Plan, tc.cfg.Layout, tc.cfg.Optimizer = plan, l, optim.DefaultConfig()
			_, err := New(tc.cfg, make([]float32, 4))
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// TestForgedStepsCannotStallAnyMode: a push whose step is far past the
// worker's own, or below 0, is refused in every mode. Before, sync took a
// push for step 2⁴⁰ (at the right clock), so that every real push of that
// worker after it was a "duplicate" that never reached the barrier and
// the run stalled; any mode took step -5000, after which async refused
// every real push as too far past it.
func TestForgedStepsCannotStallAnyMode(t *testing.T) {
	for _, mode := range []consistency.Mode{consistency.Async, consistency.Sync, consistency.SSP} {
		for _, step := range []int64{1 << 40, -5000} {
			t.Run(fmt.Sprintf("%v/step %d", mode, step), func(t *testing.T) {
				s := newModeServer(t, mode, 1, 0, 2)
				_, err := s.Push(context.Background(), signed(s, Push{WorkerID: 0, Step: step, Clock: 0, Ranges: whole, Grads: fill(1)}))
				require.ErrorIs(t, err, ErrInvalidArgument)
				assert.Equal(t, int64(0), s.Clock(), "the forged push changed nothing")
				for real := int64(0); real < 2; real++ {
					res, err := s.Push(context.Background(), signed(s, Push{WorkerID: 0, Step: real, Clock: real, Ranges: whole, Grads: fill(1)}))
					require.NoError(t, err, "the worker's real push for step %d", real)
					assert.False(t, res.Duplicate, "step %d", real)
				}
				assert.Equal(t, int64(2), s.Clock(), "both real pushes were applied")
			})
		}
	}
}

// TestPushPullPerMode: a push-pull's read goes where its mode says: in
// async with the push, the view right after it and no wait; in sync and
// SSP after the pull's wait (waiting called once the push is in, before
// it), from one view at the step it waited for.
func TestPushPullPerMode(t *testing.T) {
	tests := []struct {
		name      string
		mode      consistency.Mode
		staleness int64
		waits     bool // the first worker's push-pull waits for the second
		clock     int64
	}{
		{name: "async", mode: consistency.Async, clock: 1},
		{name: "sync", mode: consistency.Sync, waits: true, clock: 1},
		{name: "ssp 0 is sync", mode: consistency.SSP, waits: true, clock: 1},
		{name: "ssp 1", mode: consistency.SSP, staleness: 1, waits: true, clock: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newModeServer(t, tc.mode, 2, 0, tc.staleness)
			pullStep := int64(1) + tc.staleness
			if tc.staleness > 0 {
				push(t, s, 0, 0, 0, 1) // within the bound
			}
			waiting := make(chan struct{})
			type result struct {
				res   PushResult
				clock int64
				vals  []float32
				err   error
			}
			done := make(chan result, 1)
			go func() {
				var r result
				step := pullStep - 1
				r.res, r.err = s.PushPull(context.Background(), signed(s, Push{WorkerID: 0, Step: step, Clock: min(step, 0), Ranges: whole, Grads: fill(1)}), pullStep,
					func(_ PushResult, c ChunkRead) { r.clock, r.vals = c.Clock, append(r.vals, c.Values...) },
					func() error { close(waiting); return nil })
				done <- r
			}()
			if !tc.waits {
				r := <-done
				require.NoError(t, r.err)
				assert.Equal(t, tc.clock, r.clock)
				assert.Equal(t, []float32{-1, 0, 1, 2}, r.vals, "the values right after the push")
				assert.Zero(t, r.res.Waited)
				select {
				case <-waiting:
					t.Fatal("async called waiting")
				default:
				}
				return
			}
			<-waiting
			push(t, s, 1, 0, 0, 1)
			r := <-done
			require.NoError(t, r.err)
			assert.Equal(t, tc.clock+btoi(tc.staleness > 0), r.clock, "the view after the second worker's push")
			assert.Positive(t, r.res.Waited)
		})
	}
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
