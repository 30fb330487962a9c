package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/worker"
	"github.com/shoalml/shoal/worker/psclient"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fakePS records what a strategy does and applies plain SGD (lr 0.1).
type fakePS struct {
	params     []float32
	clock      int64
	pulls      []int64 // the clock at each pull
	pushes     int
	pushedSums []float32 // grads[0] of each push
	failPush   error
}

func (f *fakePS) Pull(_ context.Context, _ worker.PullArgs, dst []float32) ([]int64, error) {
	copy(dst, f.params)
	f.pulls = append(f.pulls, f.clock)
	return []int64{f.clock}, nil
}

func (f *fakePS) Push(_ context.Context, a worker.PushArgs) (worker.PushResult, error) {
	if f.failPush != nil {
		return worker.PushResult{}, f.failPush
	}
	for i, g := range a.Grads {
		f.params[i] -= 0.1 * g
	}
	f.pushes++
	f.pushedSums = append(f.pushedSums, a.Grads[0])
	st := f.clock - a.Clocks[0]
	f.clock++
	return worker.PushResult{Staleness: []int64{st}}, nil
}

func (f *fakePS) PushPull(ctx context.Context, a worker.PushPullArgs) (worker.PushPullResult, error) {
	res, err := f.Push(ctx, a.PushArgs)
	if err != nil {
		return worker.PushPullResult{PushResult: res}, err
	}
	clocks, err := f.Pull(ctx, worker.PullArgs{}, a.Dst)
	return worker.PushPullResult{PushResult: res, PullClocks: clocks}, err
}

func TestAsyncCadence(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		pushEvery, fetchEvery int
		steps                 int64
		wantPulls, wantPushes int
	}{
		{"every step", 1, 1, 6, 6, 6},
		{"push every 3", 3, 1, 6, 6, 2},
		{"fetch every 4", 1, 4, 6, 2, 6},
		{"flush at the end", 4, 4, 6, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakePS{params: make([]float32, 3)}
			a, err := worker.NewAsync(f, 3, 1, worker.AsyncConfig{WorkerID: 1, PushEvery: tc.pushEvery, FetchEvery: tc.fetchEvery})
			require.NoError(t, err)
			a.SetLastStep(tc.steps - 1)
			params := make([]float32, 3)
			for step := range tc.steps {
				require.NoError(t, a.Params(ctxT(t), step, params))
				require.NoError(t, a.Apply(ctxT(t), step, params, []float32{1, 1, 1}))
			}
			require.NoError(t, a.Finish(ctxT(t)))
			assert.Len(t, f.pulls, tc.wantPulls)
			assert.Equal(t, tc.wantPushes, f.pushes)
			// Every step's gradient reached the server exactly once.
			var sum float32
			for _, s := range f.pushedSums {
				sum += s
			}
			assert.Equal(t, float32(tc.steps), sum)
		})
	}
}

func TestAsyncRejectsBadConfig(t *testing.T) {
	_, err := worker.NewAsync(&fakePS{}, 3, 1, worker.AsyncConfig{PushEvery: -1})
	assert.ErrorContains(t, err, "want >= 1")
}

func newModel(t *testing.T) nn.Model {
	m, err := nn.New(nn.Spec{Arch: "mlp", Hidden: []int{32}}, nn.NewCPU())
	require.NoError(t, err)
	return m
}

func synthetic(t *testing.T) (data.Dataset, data.Dataset) {
	cfg := data.DefaultSyntheticConfig()
	cfg.Train, cfg.Test = 1200, 400
	train, test, err := data.Synthetic(cfg)
	require.NoError(t, err)
	return train, test
}

// runAlone trains model on one epoch of train, batch 32, as the only worker
// of f in async mode, and returns what Run returns.
func runAlone(t *testing.T, f *fakePS, model nn.Model, train data.Dataset) (worker.Result, error) {
	t.Helper()
	a, err := worker.NewAsync(f, model.Layout().Size(), 1, worker.AsyncConfig{})
	require.NoError(t, err)
	w, err := worker.New(worker.Config{WorldSize: 1, Batch: 32, Epochs: 1}, model, train, a)
	require.NoError(t, err)
	defer w.Close()
	return w.Run(ctxT(t))
}

// A peer that closed its connection shows as an error wrapping io.EOF: it
// fails the run, and is not taken for the end of the epoch's data (which
// once ended the epoch early, with no error).
func TestAnErrorWrappingEOFIsNotTheEndOfTheEpoch(t *testing.T) {
	model := newModel(t)
	train, _ := synthetic(t)
	f := &fakePS{params: make([]float32, model.Layout().Size()), failPush: fmt.Errorf("recv from rank 1: %w", io.EOF)}
	res, err := runAlone(t, f, model, train)
	require.ErrorIs(t, err, io.EOF)
	assert.ErrorContains(t, err, "step 0: recv from rank 1")
	assert.Zero(t, res.Steps)
}

func TestWorkerPushErrorStopsRun(t *testing.T) {
	model := newModel(t)
	train, _ := synthetic(t)
	f := &fakePS{params: make([]float32, model.Layout().Size()), failPush: errors.New("server gone")}
	_, err := runAlone(t, f, model, train)
	assert.ErrorContains(t, err, "step 0: server gone")
}

func TestWorkerConfigErrors(t *testing.T) {
	model := newModel(t)
	train, _ := synthetic(t)
	for _, tc := range []struct {
		name string
		cfg  worker.Config
		want string
	}{
		{"rank outside world", worker.Config{Rank: 2, WorldSize: 2, Batch: 8, Epochs: 1}, "rank 2 of 2"},
		{"no batch", worker.Config{WorldSize: 1, Epochs: 1}, "batch 0"},
		{"no epochs", worker.Config{WorldSize: 1, Batch: 8}, "epochs 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := worker.New(tc.cfg, model, train, &worker.Async{})
			assert.ErrorContains(t, err, tc.want)
		})
	}
	cnn, err := nn.New(nn.Spec{Arch: "mlp", Channels: 1, Height: 8, Width: 8}, nn.NewCPU())
	require.NoError(t, err)
	_, err = worker.New(worker.Config{WorldSize: 1, Batch: 8, Epochs: 1}, cnn, train, &worker.Async{})
	assert.ErrorContains(t, err, "model mlp takes 64")
}

// TestTwoWorkersTrainThroughServers runs two async workers against two
// in-process shards and checks that the shared model learns.
func TestTwoWorkersTrainThroughServers(t *testing.T) {
	model := newModel(t)
	train, test := synthetic(t)
	initial := make([]float32, model.Layout().Size())
	model.Init(initial, 1)
	c := testcluster.Start(t, testcluster.CoresFor(t, model.Layout(), initial, 2, 4096, 0.05)...)

	before, err := worker.Evaluate(ctxT(t), model, initial, test, 100)
	require.NoError(t, err)

	errs := make(chan error, 2)
	var progress [2][]worker.Progress
	for r := range 2 {
		go func() {
			cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()))
			if err != nil {
				errs <- err
				return
			}
			defer cl.Close()
			m := newModel(t)
			a, _ := worker.NewAsync(psclient.New(cl), m.Layout().Size(), 2, worker.AsyncConfig{WorkerID: int64(r)})
			w, err := worker.New(worker.Config{Rank: r, WorldSize: 2, Batch: 16, Epochs: 2, Seed: 3,
				Progress: func(p worker.Progress) { progress[r] = append(progress[r], p) }}, m, train, a)
			if err != nil {
				errs <- err
				return
			}
			defer w.Close()
			_, err = w.Run(ctxT(t))
			errs <- err
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)

	cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()))
	require.NoError(t, err)
	defer cl.Close()
	final := make([]float32, model.Layout().Size())
	_, err = cl.Pull(ctxT(t), final)
	require.NoError(t, err)
	after, err := worker.Evaluate(ctxT(t), model, final, test, 100)
	require.NoError(t, err)
	t.Logf("test accuracy %.3f → %.3f, loss %.3f → %.3f", before.Accuracy, after.Accuracy, before.Loss, after.Loss)
	assert.Greater(t, after.Accuracy, 0.9)
	assert.Less(t, after.Loss, before.Loss/2)
	// Each worker pushed every step: 600 samples / 16 = 38 steps × 2 epochs.
	assert.Equal(t, int64(2*2*38), c.Shard(0).Core.Clock())
	for r := range 2 {
		last := progress[r][len(progress[r])-1]
		assert.True(t, last.EpochDone)
		assert.Equal(t, 1, last.Epoch)
		assert.Equal(t, 600, last.Samples)
	}
}

// waitingPS is a fakePS whose pulls say they were held for an hour, more
// than the whole pull took.
type waitingPS struct{ fakePS }

func (w *waitingPS) Pull(ctx context.Context, a worker.PullArgs, dst []float32) ([]int64, error) {
	if a.Waited != nil {
		*a.Waited = time.Hour
	}
	return w.fakePS.Pull(ctx, a, dst)
}

func (w *waitingPS) PushPull(ctx context.Context, a worker.PushPullArgs) (worker.PushPullResult, error) {
	if a.Waited != nil {
		*a.Waited = time.Hour
	}
	return w.fakePS.PushPull(ctx, a)
}

// TestStepTimesAndEval: every step reports where its time went, a held
// pull counts as waiting (never more than the pull took), and Eval runs
// every EvalEvery steps and after the last.
func TestStepTimesAndEval(t *testing.T) {
	model := newModel(t)
	train, _ := synthetic(t)
	f := &waitingPS{fakePS{params: make([]float32, model.Layout().Size())}}
	a, err := worker.NewAsync(f, model.Layout().Size(), 1, worker.AsyncConfig{})
	require.NoError(t, err)
	var steps []int64
	var evals []int64
	w, err := worker.New(worker.Config{WorldSize: 1, Batch: 16, Steps: 10, EvalEvery: 4,
		OnStep: func(step int64, st worker.StepTimes) {
			steps = append(steps, step)
			assert.Positive(t, st.Compute, "step %d", step)
			if step == 0 {
				// Later steps' weights came with the push-pull of the
				// step before: their Params does no I/O.
				assert.Zero(t, st.Pull, "step %d: the whole pull was held", step)
			}
			if step < 9 { // the last step only pushes: nothing to hold
				assert.Positive(t, st.Wait, "step %d", step)
				assert.Zero(t, st.Push, "step %d: the whole push-pull was held", step)
			}
			assert.Zero(t, st.Reduce, "step %d", step)
			assert.GreaterOrEqual(t, st.Step, st.Data+st.Compute+st.Wait+st.Pull+st.Push, "step %d", step)
		},
		Eval: func(_ context.Context, done int64, params []float32) error {
			evals = append(evals, done)
			assert.Len(t, params, model.Layout().Size())
			return nil
		}}, model, train, a)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.Run(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, steps)
	assert.Equal(t, []int64{4, 8, 10}, evals)
	// One pull for step 0, then each step's push brought the next step's
	// weights, but for the last one: 10 fetches, 10 pushes.
	assert.Len(t, f.pulls, 10)
	assert.Equal(t, 10, f.pushes)
}

func TestEvalErrorStopsRun(t *testing.T) {
	model := newModel(t)
	train, _ := synthetic(t)
	f := &fakePS{params: make([]float32, model.Layout().Size())}
	a, err := worker.NewAsync(f, model.Layout().Size(), 1, worker.AsyncConfig{})
	require.NoError(t, err)
	w, err := worker.New(worker.Config{WorldSize: 1, Batch: 16, Steps: 10, EvalEvery: 3,
		Eval: func(context.Context, int64, []float32) error { return errors.New("disk full") }}, model, train, a)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.Run(ctxT(t))
	assert.ErrorContains(t, err, "evaluating after step 3: disk full")
}

// TestRunFinishesWhenItFails: a run that ends on an error still calls the
// strategy's Finish, so an overlapped push still under way is waited for
// before Run returns (the strategy must not hold the gradient after it).
func TestRunFinishesWhenItFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		model := newModel(t)
		train, _ := synthetic(t)
		g := &gatePS{release: make(chan error), pulled: make(chan struct{}, 1)}
		a, err := worker.NewAsync(g, model.Layout().Size(), 1, worker.AsyncConfig{Overlap: true})
		require.NoError(t, err)
		w, err := worker.New(worker.Config{WorldSize: 1, Batch: 16, Steps: 10, EvalEvery: 1,
			Eval: func(context.Context, int64, []float32) error { return errors.New("disk full") }}, model, train, a)
		require.NoError(t, err)
		defer w.Close()
		done := make(chan error, 1)
		go func() {
			_, err := w.Run(ctxT(t))
			done <- err
		}()
		// Step 0's push is held; Eval fails after step 0.
		synctest.Wait()
		select {
		case err := <-done:
			t.Errorf("Run returned (%v) while the push of step 0 was under way", err)
			done <- err
		default:
		}
		g.release <- nil
		assert.ErrorContains(t, <-done, "evaluating after step 1: disk full")
	})
}

// gatePS holds each push until release, and tells of each pull; pushed
// is what the last push sent, read when it was released.
type gatePS struct {
	release chan error
	pulled  chan struct{}
	pushed  []float32
}

func (g *gatePS) Pull(context.Context, worker.PullArgs, []float32) ([]int64, error) {
	g.pulled <- struct{}{}
	return []int64{0}, nil
}

func (g *gatePS) Push(ctx context.Context, a worker.PushArgs) (worker.PushResult, error) {
	select {
	case err := <-g.release:
		g.pushed = slices.Clone(a.Grads)
		return worker.PushResult{Staleness: []int64{0}}, err
	case <-ctx.Done():
		return worker.PushResult{}, ctx.Err()
	}
}

func (g *gatePS) PushPull(context.Context, worker.PushPullArgs) (worker.PushPullResult, error) {
	return worker.PushPullResult{}, errors.New("gatePS: an overlapping worker pushes and pulls apart")
}

// TestAsyncOverlap: with Overlap, Apply returns while its push is still
// under way, the next Params pulls during that push and returns only once
// the push is done, and a failed push fails that Params.
func TestAsyncOverlap(t *testing.T) {
	g, a, params, grads := overlapping(t)

	for _, pushErr := range []error{nil, errors.New("server gone")} {
		done := make(chan error, 1)
		go func() { done <- a.Params(ctxT(t), 1, params) }()
		<-g.pulled // the pull ran while the push was held
		select {
		case err := <-done:
			t.Fatalf("Params returned (%v) before the push it overlaps finished", err)
		default:
		}
		g.release <- pushErr
		if pushErr == nil {
			require.NoError(t, <-done)
			require.NoError(t, a.Apply(ctxT(t), 1, params, grads))
		} else {
			require.ErrorContains(t, <-done, "server gone")
		}
	}
	require.NoError(t, a.Finish(ctxT(t)), "nothing left in flight")
	assert.Equal(t, int64(1), a.Staleness[0])

	_, err := worker.NewAsync(g, 3, 1, worker.AsyncConfig{Overlap: true, PushEvery: 2})
	assert.ErrorContains(t, err, "overlapping push and pull needs push every 1")
}

// overlapping returns an overlapping Async over a gatePS that holds its
// pushes, after step 0's Apply: that push is held, and grads, which
// Apply was given, is the caller's again.
func overlapping(t *testing.T) (g *gatePS, a *worker.Async, params, grads []float32) {
	t.Helper()
	g = &gatePS{release: make(chan error), pulled: make(chan struct{}, 1)}
	a, err := worker.NewAsync(g, 3, 1, worker.AsyncConfig{Overlap: true})
	require.NoError(t, err)
	params, grads = make([]float32, 3), []float32{1, 2, 3}
	require.NoError(t, a.Params(ctxT(t), 0, params))
	<-g.pulled
	require.NoError(t, a.Apply(ctxT(t), 0, params, grads), "returns although the push is held")
	return g, a, params, grads
}

// TestAsyncOverlapOwnsWhatItPushes: the gradient belongs to the caller
// again once Apply returns, so the worker may compute the next step into
// it while the overlapped push is still under way; the push sends the
// gradient Apply was given.
func TestAsyncOverlapOwnsWhatItPushes(t *testing.T) {
	g, a, _, grads := overlapping(t)
	copy(grads, []float32{7, 7, 7}) // the next step's gradient
	g.release <- nil
	require.NoError(t, a.Finish(ctxT(t)))
	assert.Equal(t, []float32{1, 2, 3}, g.pushed)
}

// TestEvalStopsTheRun: an Eval error wrapping ErrStop ends the run after
// that step, cleanly, with Finish called and no further evaluation.
func TestEvalStopsTheRun(t *testing.T) {
	model := newModel(t)
	train, _ := synthetic(t)
	f := &fakePS{params: make([]float32, model.Layout().Size())}
	a, err := worker.NewAsync(f, model.Layout().Size(), 1, worker.AsyncConfig{PushEvery: 4})
	require.NoError(t, err)
	var evals []int64
	w, err := worker.New(worker.Config{WorldSize: 1, Batch: 16, Steps: 50, EvalEvery: 3,
		Eval: func(_ context.Context, steps int64, _ []float32) error {
			evals = append(evals, steps)
			if steps == 6 {
				return fmt.Errorf("target reached: %w", worker.ErrStop)
			}
			return nil
		}}, model, train, a)
	require.NoError(t, err)
	defer w.Close()
	res, err := w.Run(ctxT(t))
	require.NoError(t, err)
	assert.True(t, res.Stopped)
	assert.Equal(t, int64(6), res.Steps)
	assert.Equal(t, []int64{3, 6}, evals)
	assert.Equal(t, 6*16, res.Last.Samples)
	assert.Equal(t, 2, f.pushes, "Finish pushed the 2 pending steps after the 4-step push")
}

// skippingPS is a sync fakePS whose clock jumps ahead by skip at the
// given push, as a shard's does while a backup worker's late pushes are
// dropped: the others' pushes move it on.
type skippingPS struct {
	fakePS
	at, skip int
}

func (s *skippingPS) PushPull(ctx context.Context, a worker.PushPullArgs) (worker.PushPullResult, error) {
	if s.pushes == s.at {
		s.clock += int64(s.skip)
	}
	return s.fakePS.PushPull(ctx, a)
}

// TestSyncEndsWhenTheServersAreDone: a sync worker whose shard is past
// the run's last step (it skipped steps whose pushes were dropped) ends
// its run cleanly there instead of computing a step no one else pushes,
// which would wait for the others forever.
func TestSyncEndsWhenTheServersAreDone(t *testing.T) {
	model := newModel(t)
	train, _ := synthetic(t)
	for _, tc := range []struct {
		name      string
		skip      int
		wantSteps int64
		complete  bool
	}{
		{"no step skipped", 0, 10, false},
		{"three steps skipped", 3, 7, true},
		// A straggler that starts after the others finished: its first
		// pull finds the shard at the end of the run. A push then would
		// open step 10, which no one else joins.
		{"started after the others finished", 10, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &skippingPS{fakePS: fakePS{params: make([]float32, model.Layout().Size())}, at: 4, skip: tc.skip}
			if tc.skip == 10 {
				f.clock, f.skip = 10, 0
			}
			s := worker.NewSync(f, 0, 1)
			w, err := worker.New(worker.Config{WorldSize: 1, Batch: 16, Steps: 10}, model, train, s)
			require.NoError(t, err)
			defer w.Close()
			res, err := w.Run(ctxT(t))
			require.NoError(t, err)
			assert.Equal(t, tc.wantSteps, res.Steps)
			assert.Equal(t, tc.complete, res.Complete)
			assert.Equal(t, int64(10), f.clock, "the shard ends at the run's last step")
		})
	}
}
