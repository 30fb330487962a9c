package ps

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
)

// newTestServer returns async shard s of a vector of n floats in chunks
// of chunk floats over servers shards, with plain SGD at lr 0.5, initial
// values i, applying every push at the full rate (the server's mechanics;
// update_test.go tests the rules).
func newTestServer(t *testing.T, n, servers, s, chunk int) *Server {
	t.Helper()
	var l nn.Layout
	l.Add("w", n)
	plan, err := shard.New(n, servers, 4*chunk)
	require.NoError(t, err)
	ocfg := optim.DefaultConfig()
	ocfg.LR = 0.5
	initial := make([]float32, n)
	for i := range initial {
		initial[i] = float32(i)
	}
	srv, err := New(Config{Mode: consistency.Async, Shard: s, Plan: plan, Layout: l, Optimizer: ocfg, Update: UpdateConfig{Rule: UpdateFull}}, initial)
	require.NoError(t, err)
	return srv
}

func readAll(t *testing.T, s *Server) []float32 {
	t.Helper()
	var out []float32
	for _, r := range s.Ranges() {
		buf := make([]float32, r.Len)
		_, err := s.Read(r, buf)
		require.NoError(t, err)
		out = append(out, buf...)
	}
	return out
}

// filled returns n floats of v.
func filled(n int, v float32) []float32 {
	g := make([]float32, n)
	for i := range g {
		g[i] = v
	}
	return g
}

func ones(n int) []float32 {
	g := make([]float32, n)
	for i := range g {
		g[i] = 1
	}
	return g
}

func TestPushAppliesOptimizer(t *testing.T) {
	s := newTestServer(t, 10, 1, 0, 4)
	res, err := s.Push(context.Background(), signed(s, Push{WorkerID: 1, Step: 0, Ranges: []shard.Range{{Off: 0, Len: 10}}, Grads: ones(10)}))
	require.NoError(t, err)
	assert.Equal(t, int64(1), res.Clock)
	got := readAll(t, s)
	for i, v := range got {
		assert.InDelta(t, float32(i)-0.5, v, 1e-6, "index %d", i)
	}
}

func TestPushRejectsAndLeavesValues(t *testing.T) {
	nan := ones(10)
	nan[7] = float32(math.NaN())
	inf := ones(10)
	inf[3] = float32(math.Inf(-1))
	for _, tc := range []struct {
		name string
		push Push
		want string
	}{
		{"wrong length", Push{Ranges: []shard.Range{{Off: 0, Len: 10}}, Grads: ones(9)}, "push of 9 floats, its ranges hold 10"},
		{"unknown range past the end", Push{Ranges: []shard.Range{{Off: 8, Len: 4}}, Grads: ones(4)}, "inside [0,10)"},
		{"negative offset", Push{Ranges: []shard.Range{{Off: -4, Len: 4}}, Grads: ones(4)}, "inside [0,10)"},
		{"not whole chunks", Push{Ranges: []shard.Range{{Off: 0, Len: 3}}, Grads: ones(3)}, "whole chunks"},
		{"overlapping ranges", Push{Ranges: []shard.Range{{Off: 0, Len: 4}, {Off: 0, Len: 4}}, Grads: ones(8)}, "overlaps"},
		{"no ranges", Push{}, "names no ranges"},
		{"nan", Push{Ranges: []shard.Range{{Off: 0, Len: 10}}, Grads: nan}, "index 7 is NaN"},
		{"inf", Push{Ranges: []shard.Range{{Off: 0, Len: 10}}, Grads: inf}, "index 3 is -Inf"},
		{"step from the far future", Push{Step: math.MaxInt64, Ranges: []shard.Range{{Off: 0, Len: 10}}, Grads: ones(10)}, "more than 1024 steps past its last push (step -1)"},
		{"first push past the gap", Push{Step: MaxStepGap, Ranges: []shard.Range{{Off: 0, Len: 10}}, Grads: ones(10)}, "step 1024 from worker 0"},
		{"negative step", Push{Step: -5000, Ranges: []shard.Range{{Off: 0, Len: 10}}, Grads: ones(10)}, "push for step -5000 from worker 0: steps count from 0"},
		{"negative worker id", Push{WorkerID: -1, Ranges: []shard.Range{{Off: 0, Len: 10}}, Grads: ones(10)}, "worker -1: this shard expects workers 0..65535"},
		{"worker id past MaxWorkers", Push{WorkerID: MaxWorkers, Ranges: []shard.Range{{Off: 0, Len: 10}}, Grads: ones(10)}, "worker 65536: this shard expects workers 0..65535"},
		{"huge finite gradient", Push{WorkerID: 3, Ranges: []shard.Range{{Off: 0, Len: 10}}, Grads: filled(10, 3e38)}, "from worker 3: its gradient reaches 3e+38 (at index 0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, 10, 1, 0, 4)
			before := readAll(t, s)
			_, err := s.Push(context.Background(), signed(s, tc.push))
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalidArgument), "%v", err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, before, readAll(t, s), "a rejected push changed the values")
			assert.Equal(t, int64(0), s.Clock())
			assert.Equal(t, int64(1), s.Stats().Rejected)
			assert.Equal(t, map[string]int64{reasonOf[tc.name]: 1}, s.Stats().RejectedBy, "counted by its reason")
		})
	}
}

// reasonOf is what TestPushRejectsAndLeavesValues's pushes are counted as.
var reasonOf = map[string]string{
	"wrong length": RejectedShape, "unknown range past the end": RejectedShape, "negative offset": RejectedShape,
	"not whole chunks": RejectedShape, "overlapping ranges": RejectedShape, "no ranges": RejectedShape,
	"nan": RejectedNonFinite, "inf": RejectedNonFinite,
	"step from the far future": RejectedStep, "first push past the gap": RejectedStep, "negative step": RejectedStep,
	"negative worker id": RejectedWorker, "worker id past MaxWorkers": RejectedWorker,
	"huge finite gradient": RejectedMagnitude,
}

// TestAForgedFutureStepCannotStopTheRun: one async push with step
// 2⁶³−1 made every later real push of that worker a "duplicate", so a
// run went on without learning. It is refused, and the worker's next
// real push, and one MaxStepGap steps past it (Downpour's largest
// --push-every), are applied.
func TestAForgedFutureStepCannotStopTheRun(t *testing.T) {
	s := newTestServer(t, 8, 1, 0, 4)
	p := Push{WorkerID: 0, Step: math.MaxInt64, Ranges: []shard.Range{{Off: 0, Len: 8}}, Grads: ones(8)}
	_, err := s.Push(context.Background(), signed(s, p))
	require.ErrorIs(t, err, ErrInvalidArgument)
	for _, step := range []int64{0, MaxStepGap} {
		p.Step = step
		res, err := s.Push(context.Background(), signed(s, p))
		require.NoError(t, err)
		assert.False(t, res.Duplicate, "step %d", step)
	}
	assert.Equal(t, int64(2), s.Clock())
	assert.Equal(t, Stats{Pushes: 2, Rejected: 1}, Stats{Pushes: s.Stats().Pushes, Rejected: s.Stats().Rejected})
}

func TestPushOfAnotherShardsChunk(t *testing.T) {
	// Shard 1 of 2 owns chunks 1 and 3 ([4,8) and [12,16)) of 16 floats.
	s := newTestServer(t, 16, 2, 1, 4)
	assert.Equal(t, []shard.Range{{Off: 4, Len: 4}, {Off: 12, Len: 4}}, s.Ranges())
	_, err := s.Push(context.Background(), signed(s, Push{Ranges: []shard.Range{{Off: 0, Len: 4}}, Grads: ones(4)}))
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.Contains(t, err.Error(), "chunk 0 is owned by shard 0, this is shard 1")
	_, err = s.Push(context.Background(), signed(s, Push{Ranges: []shard.Range{{Off: 4, Len: 4}, {Off: 12, Len: 4}}, Grads: ones(8)}))
	require.NoError(t, err)
	assert.Equal(t, []float32{3.5, 4.5, 5.5, 6.5, 11.5, 12.5, 13.5, 14.5}, readAll(t, s))
}

func TestDuplicatePushIsAppliedOnce(t *testing.T) {
	s := newTestServer(t, 8, 1, 0, 4)
	p := Push{WorkerID: 3, Step: 5, Ranges: []shard.Range{{Off: 0, Len: 8}}, Grads: ones(8)}
	_, err := s.Push(context.Background(), signed(s, p))
	require.NoError(t, err)
	after := readAll(t, s)
	res, err := s.Push(context.Background(), signed(s, p)) // a retry after a lost reply
	require.NoError(t, err)
	assert.True(t, res.Duplicate)
	assert.Equal(t, after, readAll(t, s))
	assert.Equal(t, int64(1), s.Clock())
	// Another worker's step 5 is a different push.
	p.WorkerID = 4
	res, err = s.Push(context.Background(), signed(s, p))
	require.NoError(t, err)
	assert.False(t, res.Duplicate)
	assert.Equal(t, int64(2), s.Clock())
}

func TestStalenessHistogram(t *testing.T) {
	s := newTestServer(t, 4, 1, 0, 4)
	r := []shard.Range{{Off: 0, Len: 4}}
	for step := range int64(3) {
		_, err := s.Push(context.Background(), signed(s, Push{WorkerID: 1, Step: step, Clock: 0, Ranges: r, Grads: ones(4)}))
		require.NoError(t, err)
	}
	st := s.Stats()
	assert.Equal(t, consistency.Staleness{0: 1, 1: 1, 2: 1}, st.Staleness)
	st.Staleness.Add(5)
	assert.Equal(t, consistency.Staleness{0: 1, 1: 1, 2: 1}, s.Stats().Staleness, "Stats returns a copy")
}

func TestReadRanges(t *testing.T) {
	s := newTestServer(t, 16, 2, 0, 4) // owns [0,4) and [8,12)
	buf := make([]float32, 2)
	_, err := s.Read(shard.Range{Off: 9, Len: 2}, buf)
	require.NoError(t, err)
	assert.Equal(t, []float32{9, 10}, buf)
	_, err = s.Read(shard.Range{Off: 3, Len: 2}, buf)
	assert.ErrorIs(t, err, ErrInvalidArgument, "range spilling into shard 1's chunk")
}

func TestNewValidates(t *testing.T) {
	var l nn.Layout
	l.Add("w", 8)
	plan, err := shard.New(8, 2, 16)
	require.NoError(t, err)
	good := Config{Mode: consistency.Async, Plan: plan, Layout: l, Optimizer: optim.DefaultConfig()}
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		initial int
		want    string
	}{
		{"not a mode", func(c *Config) { c.Mode = consistency.Ring + 1 }, 8, "mode Mode(5)"},
		{"shard out of range", func(c *Config) { c.Shard = 2 }, 8, "shard 2"},
		{"layout size", func(c *Config) { c.Layout = nn.Layout{}; c.Layout.Add("w", 7) }, 8, "layout holds 7 floats, plan 8"},
		{"bad optimizer", func(c *Config) { c.Optimizer.LR = -1 }, 8, "lr -1"},
		{"short initial", func(*Config) {}, 7, "initial vector has 7 floats, want 8"},
		{"negative max wait", func(c *Config) { c.MaxWait = -time.Second }, 8, "max wait -1s: want > 0 (0: the default, 10 minutes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.mutate(&cfg)
			_, err := New(cfg, make([]float32, tc.initial))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestConcurrentPushAndPull(t *testing.T) {
	const n, workers, steps = 64, 4, 50
	s := newTestServer(t, n, 1, 0, 16)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			buf := make([]float32, n)
			for step := range int64(steps) {
				_, err := s.Read(shard.Range{Off: 0, Len: n}, buf)
				assert.NoError(t, err)
				_, err = s.Push(context.Background(), signed(s, Push{WorkerID: int64(w), Step: step, Ranges: []shard.Range{{Off: 0, Len: n}}, Grads: ones(n)}))
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(workers*steps), s.Clock())
	// Every push subtracted lr·1 = 0.5 from every value.
	for i, v := range readAll(t, s) {
		assert.InDelta(t, float32(i)-0.5*workers*steps, v, 1e-3, "index %d", i)
	}
}

// heapFloats keeps a test's vector on the heap, where checkptr (-race)
// sees its allocation's bounds.
var heapFloats []float32

// TestFirstNonFinite: the word-at-a-time scan finds the first NaN or
// ±Inf wherever it is (either half of a word, the odd last float, any
// block), and nothing in finite values, the largest and smallest included.
func TestFirstNonFinite(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7fc00001), math.Float32frombits(0xff800001)}
	finite := []float32{0, -0, 1, -1, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, math.Float32frombits(0x7f7fffff), math.Float32frombits(0x00800000)}
	for _, n := range []int{0, 1, 2, 3, 1023, 1024, 1025, 4099} {
		g := make([]float32, n)
		for i := range g {
			g[i] = finite[i%len(finite)]
		}
		assert.Equal(t, -1, firstNonFinite(g), "n=%d all finite", n)
		for _, at := range []int{0, 1, n / 2, n - 2, n - 1} {
			if at < 0 || at >= n {
				continue
			}
			for _, b := range bad {
				saved := g[at]
				g[at] = b
				assert.Equal(t, at, firstNonFinite(g), "n=%d, %v at %d", n, b, at)
				if at+1 < n { // a later one does not hide the first
					g[n-1] = b
					assert.Equal(t, at, firstNonFinite(g), "n=%d, %v at %d and at the end", n, b, at)
					g[n-1] = finite[(n-1)%len(finite)]
				}
				g[at] = saved
			}
		}
		if n == 2 { // one float at the end of its allocation, off an 8-byte boundary
			heapFloats = make([]float32, 12) // 48 bytes: a size class of its own
			assert.Equal(t, -1, firstNonFinite(heapFloats[11:]))
		}
		if n > 1 { // a vector that does not start on an 8-byte boundary
			h := g[1:]
			assert.Equal(t, -1, firstNonFinite(h), "n=%d from index 1", n)
			h[len(h)-1] = bad[0]
			assert.Equal(t, len(h)-1, firstNonFinite(h), "n=%d from index 1, NaN last", n)
			h[0] = bad[1]
			assert.Equal(t, 0, firstNonFinite(h), "n=%d from index 1, Inf first", n)
		}
	}
}

// TestPushRead: an async push hands the reader every owned chunk in
// vector order, right after its update and with the push's result; the
// chunks together are the values after the push. A duplicate reads the
// values as they are, and another mode reads nothing.
func TestPushRead(t *testing.T) {
	s := newTestServer(t, 20, 2, 1, 4) // six chunks of 4, 4, 3, 3, 3, 3; shard 1 owns three
	type got struct {
		res  PushResult
		r    shard.Range
		vals []float32
	}
	var reads []got
	read := func(res PushResult, c ChunkRead) {
		reads = append(reads, got{res, c.Range, append([]float32(nil), c.Values...)})
	}
	push := Push{WorkerID: 3, Step: 0, Ranges: s.Ranges(), Grads: ones(s.Floats())}
	res, err := s.PushRead(context.Background(), signed(s, push), read)
	require.NoError(t, err)
	require.Len(t, reads, len(s.Ranges()))
	var all []float32
	for i, rd := range reads {
		assert.Equal(t, s.Ranges()[i], rd.r)
		assert.Equal(t, res, rd.res)
		all = append(all, rd.vals...)
	}
	assert.Equal(t, int64(1), res.Clock)
	assert.Equal(t, readAll(t, s), all, "the reads are the values after the push")
	assert.Equal(t, float32(4-0.5), all[0], "chunk [4,8) starts at 4, one SGD step of lr 0.5")

	reads = nil
	res, err = s.PushRead(context.Background(), signed(s, push), read)
	require.NoError(t, err)
	assert.True(t, res.Duplicate)
	require.Len(t, reads, len(s.Ranges()))
	assert.Equal(t, all, append(append(append([]float32(nil), reads[0].vals...), reads[1].vals...), reads[2].vals...))

	var l nn.Layout
	l.Add("w", 8)
	plan, err := shard.New(8, 1, 16)
	require.NoError(t, err)
	ocfg := optim.DefaultConfig()
	syncSrv, err := New(Config{Mode: consistency.Sync, Plan: plan, Layout: l, Optimizer: ocfg, Workers: 1}, make([]float32, 8))
	require.NoError(t, err)
	reads = nil
	_, err = syncSrv.PushRead(context.Background(), signed(syncSrv, Push{WorkerID: 0, Ranges: syncSrv.Ranges(), Grads: ones(8)}), read)
	require.NoError(t, err)
	assert.Empty(t, reads, "sync mode reads after its barrier, not in the push")
	assert.Equal(t, int64(1), syncSrv.Clock())
}

// firstNonFinite is ScanGradient's index alone.
func firstNonFinite(g []float32) int {
	i, _ := ScanGradient(g)
	return i
}

// A finite but huge gradient (3e38 in every element, three times) turned
// every weight into -Inf, and the next worker blamed its learning rate.
// In every mode and with every optimizer, such a push is refused whole,
// changes nothing, and a normal push after it is applied; ordinary
// gradients of any optimizer go through.
func TestHugeGradientIsRefusedWhole(t *testing.T) {
	var l nn.Layout
	l.Add("w", 4000) // two chunks, one of them of 1000 floats: the word scan, and a chunk measured
	plan, err := shard.New(4000, 1, 4*3000)
	require.NoError(t, err)
	for _, mode := range []consistency.Mode{consistency.Async, consistency.Sync, consistency.SSP} {
		for _, alg := range optim.Algorithms() {
			t.Run(fmt.Sprint(mode, " ", alg), func(t *testing.T) {
				ocfg := optim.DefaultConfig()
				ocfg.Algorithm = alg
				srv, err := New(Config{Mode: mode, Staleness: 2, Plan: plan, Layout: l, Optimizer: ocfg, Workers: 1}, filled(4000, 0.5))
				require.NoError(t, err)
				ctx := context.Background()
				push := func(step int64, g []float32) error {
					_, err := srv.Push(ctx, signed(srv, Push{WorkerID: 0, Step: step, Clock: srv.Clock(), Ranges: srv.Ranges(), Grads: g}))
					return err
				}
				require.NoError(t, push(0, filled(4000, 0.1)))
				before := readAll(t, srv)
				huge := filled(4000, 0.1)
				huge[2500] = -3e38
				for range 3 {
					err := push(1, huge)
					require.ErrorIs(t, err, ErrInvalidArgument)
					assert.Contains(t, err.Error(), "from worker 0: its gradient reaches -3e+38 (at index 2500)")
					assert.Contains(t, err.Error(), "refused whole, nothing changed")
					assert.Equal(t, before, readAll(t, srv), "a refused push changed the weights")
					assert.Equal(t, int64(1), srv.Clock())
				}
				require.NoError(t, push(1, filled(4000, 0.1)), "the push after the refused ones")
				assert.Equal(t, int64(2), srv.Clock())
				assert.Equal(t, map[string]int64{RejectedMagnitude: 3}, srv.Stats().RejectedBy)
				for i := range 200 { // ordinary training, also with large ordinary gradients
					require.NoError(t, push(int64(2+i), filled(4000, float32(1+i))))
				}
				for i, v := range readAll(t, srv) {
					require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0), "weight %d is %v", i, v)
				}
			})
		}
	}
}

// ScanGradient's bound is the largest magnitude, wherever it sits (either
// half of a word, an odd float at either end), where that is at least
// 2^20, and 2^20 below.
func TestScanGradientLargest(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, n := range []int{0, 1, 2, 3, 1023, 1024, 1025, 4099} {
		g := make([]float32, n+1)
		for i := range g {
			g[i] = float32(rng.NormFloat64())
		}
		for _, v := range [][]float32{g[:n], g[1:]} {
			for _, at := range []int{0, len(v) / 2, len(v) - 1} {
				if at < 0 || len(v) == 0 {
					continue
				}
				saved := v[at]
				v[at] = -7e30
				i, m := ScanGradient(v)
				assert.Equal(t, -1, i)
				assert.Equal(t, optim.MaxAbs(v), m, "n=%d, largest at %d", len(v), at)
				assert.Equal(t, float64(float32(7e30)), m)
				v[at] = 1<<20 + 1
				_, m = ScanGradient(v)
				assert.Equal(t, float64(1<<20+1), m, "n=%d, just past the floor at %d", len(v), at)
				v[at] = saved
				_, m = ScanGradient(v)
				assert.Equal(t, float64(1<<20), m, "n=%d, all below the floor", len(v))
			}
		}
	}
}

// An async shard told its workers takes pushes from those ids only; one
// told nothing takes ids up to MaxWorkers, so it holds at most that many
// workers' deduplication state.
func TestAsyncWorkerIDs(t *testing.T) {
	var l nn.Layout
	l.Add("w", 8)
	plan, err := shard.New(8, 1, 32)
	require.NoError(t, err)
	srv, err := New(Config{Mode: consistency.Async, Plan: plan, Layout: l, Optimizer: optim.DefaultConfig(), Workers: 2}, make([]float32, 8))
	require.NoError(t, err)
	for w, want := range map[int64]string{0: "", 1: "", 2: "worker 2: this shard expects workers 0..1"} {
		_, err := srv.Push(context.Background(), signed(srv, Push{WorkerID: w, Ranges: srv.Ranges(), Grads: ones(8)}))
		if want == "" {
			require.NoError(t, err, "worker %d", w)
		} else {
			require.ErrorIs(t, err, ErrInvalidArgument)
			assert.Contains(t, err.Error(), want)
		}
	}
	_, err = New(Config{Mode: consistency.Async, Plan: plan, Layout: l, Optimizer: optim.DefaultConfig(), Workers: MaxWorkers + 1}, make([]float32, 8))
	assert.ErrorContains(t, err, "workers 65537: want 1..65536")
}

// manyChunks is a vector of n floats in chunks of at most 64 KiB, more
// than 4 of them, all on one shard, and values for it.
func manyChunks(t *testing.T, n int) (nn.Layout, shard.Plan, []float32) {
	t.Helper()
	var l nn.Layout
	l.Add("w", n)
	plan, err := shard.New(n, 1, 1<<16)
	require.NoError(t, err)
	require.Greater(t, plan.NumChunks(), 4)
	initial := make([]float32, n)
	for i := range initial {
		initial[i] = float32(i%200-100) * 1e-3
	}
	return l, plan, initial
}

// TestParallelStepIsTheSerialStep: with ParallelStep the chunks, updated
// by several goroutines, end bit for bit where the serial update leaves
// them, in every mode, and a push-pull's reader still gets every chunk
// once, in vector order.
func TestParallelStepIsTheSerialStep(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	const n = 200_003 // 13 chunks of about 15,400 floats
	l, plan, initial := manyChunks(t, n)
	var err error
	for _, mode := range []consistency.Mode{consistency.Async, consistency.SSP, consistency.Sync} {
		t.Run(mode.String(), func(t *testing.T) {
			servers := make([]*Server, 2)
			for i, par := range []bool{false, true} {
				cfg := Config{Mode: mode, Plan: plan, Layout: l, Optimizer: optim.Config{Algorithm: "momentum", LR: 0.05, Momentum: 0.9}, Workers: 1, Staleness: 2, ParallelStep: par}
				servers[i], err = New(cfg, initial)
				require.NoError(t, err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			grads := make([]float32, n)
			for step := range int64(5) {
				for i := range grads {
					grads[i] = float32(rng.NormFloat64()) * 1e-2
				}
				reads := make([]map[int][]float32, len(servers))
				for i, s := range servers {
					var mu sync.Mutex
					var order []int
					reads[i] = map[int][]float32{}
					_, err := s.PushRead(context.Background(), signed(s, Push{WorkerID: 0, Step: step, Clock: step, Ranges: s.Ranges(), Grads: grads}), func(_ PushResult, c ChunkRead) {
						r, vals := c.Range, c.Values
						// The parallel step reads each chunk from the
						// goroutine that updated it.
						mu.Lock()
						defer mu.Unlock()
						order = append(order, r.Off)
						assert.Equal(t, r.Len, len(vals))
						assert.NotContains(t, reads[i], r.Off, "server %d: chunk %v read twice", i, r)
						reads[i][r.Off] = slices.Clone(vals)
					})
					require.NoError(t, err)
					if mode == consistency.Async {
						assert.Len(t, order, plan.NumChunks(), "server %d: chunks read", i)
						if i == 0 {
							assert.IsIncreasing(t, order, "the serial step read chunks out of order")
						}
					}
				}
				// What each chunk's read saw is its values right after
				// the push, the same bit for bit.
				for off, want := range reads[0] {
					got, ok := reads[1][off]
					if !assert.True(t, ok, "chunk at %d: not read by the parallel step", off) {
						continue
					}
					for k := range want {
						if math.Float32bits(want[k]) != math.Float32bits(got[k]) {
							t.Fatalf("step %d, chunk at %d, float %d: the parallel step read %v, the serial %v", step, off, k, got[k], want[k])
						}
					}
				}
			}
			want, got := make([]float32, n), make([]float32, n)
			_, err := servers[0].Snapshot(want)
			require.NoError(t, err)
			_, err = servers[1].Snapshot(got)
			require.NoError(t, err)
			for i := range want {
				if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
					t.Fatalf("float %d: parallel %v, serial %v", i, got[i], want[i])
				}
			}
			assert.NotEqual(t, initial, got, "the pushes changed nothing")
		})
	}
}

// TestPushScannedByTheCaller: a push that the caller scanned piece by
// piece (Push.Scan) is applied as one the shard scans; its bound still
// gates the growth check; a NaN it found is refused with its index; and a
// Scan that does not cover the push is not trusted: the shard scans, and
// finds the NaN.
func TestPushScannedByTheCaller(t *testing.T) {
	scanned, plain := newTestServer(t, 8, 1, 0, 4), newTestServer(t, 8, 1, 0, 4)
	g := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	var sc Scan
	sc.Add(g[:4])
	sc.Add(g[4:])
	require.Equal(t, 8, sc.Floats())
	_, err := scanned.Push(context.Background(), signed(scanned, Push{WorkerID: 1, Ranges: scanned.Ranges(), Grads: g, Scan: &sc}))
	require.NoError(t, err)
	_, err = plain.Push(context.Background(), signed(plain, Push{WorkerID: 1, Ranges: plain.Ranges(), Grads: g}))
	require.NoError(t, err)
	assert.Equal(t, readAll(t, plain), readAll(t, scanned))

	huge := []float32{1, 1, 1, 1, 1, 3e38, 1, 1}
	var hs Scan
	hs.Add(huge)
	_, err = scanned.Push(context.Background(), signed(scanned, Push{WorkerID: 1, Step: 1, Ranges: scanned.Ranges(), Grads: huge, Scan: &hs}))
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.ErrorContains(t, err, "reaches 3e+38 (at index 5)")

	nan := []float32{1, 1, float32(math.NaN()), 1, 1, 1, 1, 1}
	before := readAll(t, scanned)
	var partial Scan
	partial.Add(nan[3:])
	_, err = scanned.Push(context.Background(), signed(scanned, Push{WorkerID: 1, Step: 2, Ranges: scanned.Ranges(), Grads: nan, Scan: &partial}))
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.ErrorContains(t, err, "index 2 is NaN")
	var lanes, lane0, lane1 Scan
	lane0.Add(nan[:4])
	lane1.Add(nan[4:])
	lanes.Merge(4, lane1)
	lanes.Merge(0, lane0)
	_, err = scanned.Push(context.Background(), signed(scanned, Push{WorkerID: 1, Step: 2, Ranges: scanned.Ranges(), Grads: nan, Scan: &lanes}))
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.ErrorContains(t, err, "index 2 is NaN", "from the merged scan")
	assert.Equal(t, before, readAll(t, scanned))
	assert.Equal(t, map[string]int64{RejectedMagnitude: 1, RejectedNonFinite: 2}, scanned.Stats().RejectedBy)
}

// TestHeldValuesDoNotChange: values a reader holds after a push stay as
// they were through later pushes (the shard updates into another buffer:
// copy-on-write), serial and parallel; once released, the next update is
// in place again and the spare buffer is kept for reuse.
func TestHeldValuesDoNotChange(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	const n = 100_003 // 7 chunks of about 14,300 floats
	l, plan, initial := manyChunks(t, n)
	for _, par := range []bool{false, true} {
		t.Run(fmt.Sprintf("parallel=%v", par), func(t *testing.T) {
			s, err := New(Config{Mode: consistency.Async, Plan: plan, Layout: l, Optimizer: optim.Config{Algorithm: "momentum", LR: 0.05, Momentum: 0.9}, ParallelStep: par}, initial)
			require.NoError(t, err)
			grads := make([]float32, n)
			for i := range grads {
				grads[i] = float32(i%7+1) * 1e-2
			}
			var mu sync.Mutex
			held := map[int][]float32{} // chunk offset: the held slice
			copies := map[int][]float32{}
			var releases []func()
			_, err = s.PushRead(context.Background(), signed(s, Push{WorkerID: 1, Ranges: s.Ranges(), Grads: grads}), func(_ PushResult, c ChunkRead) {
				mu.Lock()
				defer mu.Unlock()
				held[c.Range.Off], copies[c.Range.Off] = c.Values, slices.Clone(c.Values)
				releases = append(releases, c.Hold())
			})
			require.NoError(t, err)
			require.Len(t, held, plan.NumChunks())
			for step := int64(1); step <= 3; step++ {
				_, err = s.Push(context.Background(), signed(s, Push{WorkerID: 1, Step: step, Clock: step, Ranges: s.Ranges(), Grads: grads}))
				require.NoError(t, err)
			}
			now := readAll(t, s)
			for off, vals := range held {
				assert.Equal(t, copies[off], vals, "chunk at %d: held values changed", off)
				assert.NotEqual(t, copies[off][0], now[off], "chunk at %d: the pushes after the hold changed nothing", off)
			}
			for _, release := range releases {
				release()
				release() // a second call does nothing
			}
			bufs := make([]*valueBuf, len(s.chunks))
			for i := range s.chunks {
				bufs[i] = s.chunks[i].buf
				assert.Equal(t, int32(1), bufs[i].refs.Load(), "chunk %d", i)
			}
			_, err = s.Push(context.Background(), signed(s, Push{WorkerID: 1, Step: 4, Clock: 4, Ranges: s.Ranges(), Grads: grads}))
			require.NoError(t, err)
			for i := range s.chunks {
				assert.Same(t, bufs[i], s.chunks[i].buf, "chunk %d: updated into another buffer with no reader holding it", i)
			}
			assert.NotNil(t, s.freeVals.Get(s.chunks[0].r.Len), "the released versions were not kept for reuse")
		})
	}
}

func TestAutoParallelStepTurnsOnWithTheCores(t *testing.T) {
	for _, cpus := range []int{1, 2, 7, 8, 16, 128} {
		assert.Equal(t, cpus >= 8, AutoParallelStep(cpus), "parallel step on %d CPUs", cpus)
	}
}
