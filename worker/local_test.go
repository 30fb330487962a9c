package worker_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/worker"
	"github.com/shoalml/shoal/worker/psclient"
)

// localRun is a low-communication run of the small MLP of runPS: workers
// of batch batch through servers shards in mode, h local steps of inner
// between exchanges, outer on the shards.
type localRun struct {
	mode                consistency.Mode
	workers, servers, h int
	batch               int
	steps               int64
	inner, outer        optim.Config
	kill                int         // a worker killed (its run ended, the shards told it is gone) after step killAfter; -1 none
	killAfter           int64       // the worker's step
	wantOuter           int64       // the outer steps every shard applies
	enc                 pb.Encoding // the pushes' (pseudo-gradients')
	train               data.Dataset
	cores               []*ps.Server
	results             []worker.Result
}

// run trains and returns the final weights.
func (lr *localRun) run(t *testing.T) []float32 {
	t.Helper()
	spec := nn.Spec{Arch: "mlp", Hidden: []int{24}}
	model, err := nn.New(spec, nn.NewCPU())
	require.NoError(t, err)
	initial := make([]float32, model.Layout().Size())
	model.Init(initial, 7)
	cfg := ps.DefaultConfig()
	cfg.Mode, cfg.Workers, cfg.LocalSteps, cfg.Optimizer = lr.mode, lr.workers, lr.h, lr.outer
	if lr.mode == consistency.Async {
		cfg.Update.Rule = ps.UpdateAverage
	}
	lr.cores = testcluster.CoresWith(t, cfg, model.Layout(), initial, lr.servers, 2000)
	c := testcluster.Start(t, lr.cores...)

	lr.results = make([]worker.Result, lr.workers)
	errs := make(chan error, lr.workers)
	for r := range lr.workers {
		go func() {
			errs <- func() error {
				cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()), client.WithPushEncoding(lr.enc))
				if err != nil {
					return err
				}
				defer cl.Close()
				m, _ := nn.New(spec, nn.NewCPU())
				var inner worker.Strategy = worker.NewSync(psclient.New(cl), int64(r), lr.servers)
				if lr.mode == consistency.Async {
					if inner, err = worker.NewAsync(psclient.New(cl), m.Layout().Size(), lr.servers, worker.AsyncConfig{WorkerID: int64(r)}); err != nil {
						return err
					}
				}
				opt, err := optim.New(lr.inner, m.Layout().Size())
				if err != nil {
					return err
				}
				s, err := worker.NewLocal(inner, opt, lr.h)
				if err != nil {
					return err
				}
				ctx, cancel := context.WithCancel(ctxT(t))
				defer cancel()
				wcfg := worker.Config{Rank: r, WorldSize: lr.workers, Batch: lr.batch, Steps: lr.steps, Seed: 11}
				if r == lr.kill {
					wcfg.OnStep = func(step int64, _ worker.StepTimes) {
						if step == lr.killAfter {
							cancel()
						}
					}
				}
				w, err := worker.New(wcfg, m, lr.train, s)
				if err != nil {
					return err
				}
				defer w.Close()
				lr.results[r], err = w.Run(ctx)
				if r == lr.kill {
					require.ErrorIs(t, err, context.Canceled)
					// What membership does once it sees the worker dead.
					for _, core := range lr.cores {
						core.WorkerGone(int64(r))
					}
					return nil
				}
				return err
			}()
		}()
	}
	for range lr.workers {
		require.NoError(t, <-errs)
	}
	cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()))
	require.NoError(t, err)
	defer cl.Close()
	final := make([]float32, model.Layout().Size())
	clocks, err := cl.Pull(ctxT(t), final)
	require.NoError(t, err)
	if lr.mode == consistency.Sync {
		for _, c := range clocks {
			require.Equal(t, lr.wantOuter, c, "every shard applied each outer step once")
		}
	}
	return final
}

func sgd(lr, momentum float64) optim.Config {
	c := optim.DefaultConfig()
	c.Algorithm, c.LR, c.Momentum = optim.SGD, lr, momentum
	if momentum > 0 {
		c.Algorithm = optim.Momentum
	}
	return c
}

func localTrain(t *testing.T) data.Dataset {
	cfg := data.DefaultSyntheticConfig()
	cfg.Train, cfg.Test = 2400, 10
	train, _, err := data.Synthetic(cfg)
	require.NoError(t, err)
	return train
}

// TestLocalStepsOneIsSync is the equivalence of issue 42: one local step
// of inner SGD at lr η, outer SGD at lr 1 without momentum, is sync SGD at
// lr η, the mean pseudo-gradient being η times the mean gradient.
func TestLocalStepsOneIsSync(t *testing.T) {
	train := localTrain(t)
	const b, steps = 12, 50
	for _, n := range []int{1, 3} {
		for _, s := range []int{1, 2} {
			t.Run(fmt.Sprintf("N=%d S=%d", n, s), func(t *testing.T) {
				want := runPS(t, consistency.Sync, 0, n, s, b, steps, train) // SGD at lr 0.1
				lr := &localRun{mode: consistency.Sync, workers: n, servers: s, h: 1, batch: b, steps: steps, inner: sgd(0.1, 0), outer: sgd(1, 0), kill: -1, wantOuter: steps, train: train}
				got := lr.run(t)
				e := testcluster.RelErr(got, want)
				t.Logf("relative error %.2e", e)
				assert.LessOrEqual(t, e, 1e-5)
			})
		}
	}
}

// TestOneWorkerOfLocalStepsIsLocalSGD: a single worker's pseudo-gradient
// applied by outer SGD at lr 1 makes the global weights its own, so H
// local steps with a shorter last round (50 = 12·4 + 2) end where one
// worker of plain SGD does, round boundaries and all; a different H with
// outer momentum ends elsewhere, so the comparison can tell.
func TestOneWorkerOfLocalStepsIsLocalSGD(t *testing.T) {
	train := localTrain(t)
	const b, steps = 12, 50
	want := runPS(t, consistency.Sync, 0, 1, 1, b, steps, train)
	lr := &localRun{mode: consistency.Sync, workers: 1, servers: 2, h: 4, batch: b, steps: steps, inner: sgd(0.1, 0), outer: sgd(1, 0), kill: -1, wantOuter: 13, train: train}
	got := lr.run(t)
	e := testcluster.RelErr(got, want)
	t.Logf("relative error %.2e", e)
	assert.LessOrEqual(t, e, 1e-5)
	for _, core := range lr.cores {
		assert.Equal(t, int64(13), core.Stats().Pushes, "one push per round: 50 steps in rounds of 4")
	}

	nesterov := optim.DefaultConfig()
	nesterov.Algorithm, nesterov.LR, nesterov.Momentum = optim.Nesterov, 0.7, 0.9
	other := &localRun{mode: consistency.Sync, workers: 1, servers: 2, h: 4, batch: b, steps: steps, inner: sgd(0.1, 0), outer: nesterov, kill: -1, wantOuter: 13, train: train}
	assert.Greater(t, testcluster.RelErr(other.run(t), want), 1e-3)
}

// TestAWorkerKilledMidRoundDoesNotStopTheOthers: a sync worker that dies
// in the middle of a round (after step 6 of rounds of 4) never pushes
// that round; once the shards see it gone the round is applied with the
// others' pseudo-gradients and they train to the end.
func TestAWorkerKilledMidRoundDoesNotStopTheOthers(t *testing.T) {
	train := localTrain(t)
	lr := &localRun{mode: consistency.Sync, workers: 3, servers: 2, h: 4, batch: 12, steps: 20, inner: sgd(0.05, 0.9), outer: sgd(0.7, 0), kill: 2, killAfter: 6, wantOuter: 5, train: train}
	lr.run(t)
	for r := range 2 {
		assert.Equal(t, int64(20), lr.results[r].Steps, "worker %d ran every step", r)
	}
	for _, core := range lr.cores {
		// Whether the others pushed round 1 before the shards saw it go
		// (a short step) or after (a step of two) is the schedule's.
		assert.Equal(t, int64(1), core.Stats().Left, "the dead worker left the live set")
	}
}

// TestAsyncLocalSteps: asynchronous outer steps, each pseudo-gradient
// applied as it arrives (1/N each), train every worker to its end and
// apply one outer step per round of each worker.
func TestAsyncLocalSteps(t *testing.T) {
	train := localTrain(t)
	lr := &localRun{mode: consistency.Async, workers: 2, servers: 2, h: 5, batch: 12, steps: 20, inner: sgd(0.05, 0.9), outer: sgd(1, 0), kill: -1, train: train}
	lr.run(t)
	for _, core := range lr.cores {
		assert.Equal(t, int64(2*4), core.Clock(), "4 rounds of 2 workers")
		assert.Equal(t, int64(0), core.Stats().Rejected)
	}
}

// TestInt8PseudoGradients: a synchronous DiLoCo run whose workers push
// their pseudo-gradients in INT8 (a scale per 2048 values) applies every
// outer step, refuses nothing, and ends near the same run in float32:
// the rounding (at most 1/254 of a block's largest value, each round)
// moves the weights, but by little.
func TestInt8PseudoGradients(t *testing.T) {
	train := localTrain(t)
	nesterov := optim.DefaultConfig()
	nesterov.Algorithm, nesterov.LR, nesterov.Momentum = optim.Nesterov, 0.7, 0.9
	run := func(enc pb.Encoding) ([]float32, []*ps.Server) {
		lr := &localRun{mode: consistency.Sync, workers: 2, servers: 2, h: 4, batch: 12, steps: 40, inner: sgd(0.05, 0.9), outer: nesterov, kill: -1, wantOuter: 10, train: train, enc: enc}
		return lr.run(t), lr.cores
	}
	want, _ := run(pb.Encoding_FLOAT32)
	got, cores := run(pb.Encoding_INT8)
	for _, core := range cores {
		assert.Equal(t, int64(2*10), core.Stats().Pushes, "10 rounds of 2 workers")
		assert.Empty(t, core.Stats().RejectedBy)
	}
	e := testcluster.RelErr(got, want)
	t.Logf("relative error against float32 pseudo-gradients %.2e", e)
	assert.Greater(t, e, 0.0, "the pushes were rounded: int8 was used")
	assert.Less(t, e, 2e-2)
}
