package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/worker"
	"github.com/shoalml/shoal/worker/psclient"
)

// runPS trains a small MLP with workers×batch through servers shards in
// mode (plain SGD, lr 0.1) for steps steps, and returns the final vector.
func runPS(t *testing.T, mode consistency.Mode, staleness int64, workers, servers, batch int, steps int64, train data.Dataset) []float32 {
	t.Helper()
	spec := nn.Spec{Arch: "mlp", Hidden: []int{24}}
	model, err := nn.New(spec, nn.NewCPU())
	require.NoError(t, err)
	initial := make([]float32, model.Layout().Size())
	model.Init(initial, 7)
	cfg := ps.DefaultConfig()
	cfg.Mode, cfg.Workers, cfg.Staleness = mode, workers, staleness
	cfg.Optimizer = optim.DefaultConfig()
	cfg.Optimizer.Algorithm, cfg.Optimizer.LR = optim.SGD, 0.1
	c := testcluster.Start(t, testcluster.CoresWith(t, cfg, model.Layout(), initial, servers, 2000)...)

	errs := make(chan error, workers)
	for r := range workers {
		go func() {
			errs <- func() error {
				cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()))
				if err != nil {
					return err
				}
				defer cl.Close()
				m, _ := nn.New(spec, nn.NewCPU())
				var s worker.Strategy = worker.NewSync(psclient.New(cl), int64(r), servers)
				if mode != consistency.Sync {
					if s, err = worker.NewAsync(psclient.New(cl), m.Layout().Size(), servers, worker.AsyncConfig{WorkerID: int64(r)}); err != nil {
						return err
					}
				}
				w, err := worker.New(worker.Config{Rank: r, WorldSize: workers, Batch: batch, Steps: steps, Seed: 11}, m, train, s)
				if err != nil {
					return err
				}
				defer w.Close()
				_, err = w.Run(ctxT(t))
				return err
			}()
		}()
	}
	for range workers {
		require.NoError(t, <-errs)
	}
	cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()))
	require.NoError(t, err)
	defer cl.Close()
	final := make([]float32, model.Layout().Size())
	clocks, err := cl.Pull(ctxT(t), final)
	require.NoError(t, err)
	if mode.Synchronous(staleness) {
		for _, c := range clocks {
			require.Equal(t, steps, c, "every shard applied each step once")
		}
	}
	return final
}

// TestSyncEquivalence is the correctness test of the synchronous path: N
// workers of batch b through S shards see, step by step, exactly the
// samples one worker of batch N·b sees, and must end at the same weights.
func TestSyncEquivalence(t *testing.T) {
	cfg := data.DefaultSyntheticConfig()
	cfg.Train, cfg.Test = 2400, 10 // 50 steps of 4×12 samples fit in one epoch
	train, _, err := data.Synthetic(cfg)
	require.NoError(t, err)
	const b, steps = 12, 50
	// The comparison can tell runs apart: half the batch ends elsewhere.
	other := runPS(t, consistency.Sync, 0, 1, 1, 2*b, steps, train)
	ref := runPS(t, consistency.Sync, 0, 1, 1, 4*b, steps, train)
	require.Greater(t, testcluster.RelErr(other, ref), 1e-3)
	for _, n := range []int{1, 2, 4} {
		for _, s := range []int{1, 3} {
			t.Run(fmt.Sprintf("N=%d S=%d", n, s), func(t *testing.T) {
				want := runPS(t, consistency.Sync, 0, 1, 1, n*b, steps, train)
				got := runPS(t, consistency.Sync, 0, n, s, b, steps, train)
				e := testcluster.RelErr(got, want)
				t.Logf("relative error %.2e", e)
				assert.LessOrEqual(t, e, 1e-5)
			})
		}
	}
}

func TestSSPWithZeroStalenessMatchesSync(t *testing.T) {
	cfg := data.DefaultSyntheticConfig()
	cfg.Train, cfg.Test = 1200, 10
	train, _, err := data.Synthetic(cfg)
	require.NoError(t, err)
	sync := runPS(t, consistency.Sync, 0, 2, 3, 8, 30, train)
	ssp := runPS(t, consistency.SSP, 0, 2, 3, 8, 30, train)
	e := testcluster.RelErr(ssp, sync)
	t.Logf("relative error %.2e", e)
	assert.LessOrEqual(t, e, 1e-5)
}

// TestSyncNamesAMissingWorker: with the launcher's count of 2 and only
// worker 0 running, the run fails within the call deadline with an error
// that names worker 1, instead of hanging.
func TestSyncNamesAMissingWorker(t *testing.T) {
	model := newModel(t)
	train, _ := synthetic(t)
	initial := make([]float32, model.Layout().Size())
	cfg := ps.DefaultConfig()
	cfg.Mode, cfg.Workers = consistency.Sync, 2
	c := testcluster.Start(t, testcluster.CoresWith(t, cfg, model.Layout(), initial, 2, 4096)...)
	cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()), client.WithCallTimeout(time.Second))
	require.NoError(t, err)
	defer cl.Close()
	w, err := worker.New(worker.Config{Rank: 0, WorldSize: 2, Batch: 16, Epochs: 1}, model, train, worker.NewSync(psclient.New(cl), 0, 2))
	require.NoError(t, err)
	defer w.Close()
	// No deadline but the client's 1 s call timeout: the run ends with the
	// shard's answer to it, naming the missing worker.
	_, err = w.Run(context.Background())
	require.Error(t, err)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	assert.Contains(t, err.Error(), "waiting for worker(s) 1")
}

// TestABackupStragglerDoesNotPushPastTheEnd: with backup workers and two
// shards, a straggler may find one shard done with the run (it applied
// both steps without it) and the other not. Its push goes to the second
// alone: before, it also went to the first and opened a step past the
// run's end there, which waited out --max-wait for pushes no one sends
// (3 workers, 2 needed) or was applied as an extra update (2 workers, 1
// needed).
func TestABackupStragglerDoesNotPushPastTheEnd(t *testing.T) {
	for _, workers := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			model := newModel(t)
			train, _ := synthetic(t)
			cfg := ps.DefaultConfig()
			cfg.Mode, cfg.Workers, cfg.BackupWorkers, cfg.MaxWait = consistency.Sync, workers, 1, 10*time.Second
			cores := testcluster.CoresWith(t, cfg, model.Layout(), make([]float32, model.Layout().Size()), 2, 512)
			c := testcluster.Start(t, cores...)
			// The others push into the shards directly, each bound to its
			// id there (Rebind admits nothing).
			sessions := map[*ps.Server]map[int64]ps.Session{}
			push := func(core *ps.Server, w, step int64) {
				if sessions[core] == nil {
					sessions[core] = map[int64]ps.Session{}
				}
				if _, ok := sessions[core][w]; !ok {
					var err error
					sessions[core][w], err = core.Rebind(w)
					require.NoError(t, err)
				}
				_, err := core.Push(context.Background(), ps.Push{WorkerID: w, Session: sessions[core][w], Step: step, Clock: step, Ranges: core.Ranges(), Grads: make([]float32, core.Floats())})
				require.NoError(t, err)
			}
			// A run of 2 steps; worker 1 is the straggler. The others
			// finish it on shard 0, and step 1 on shard 1 lacks one push.
			others := []int64{0, 2}[:workers-1]
			for _, w := range others {
				push(cores[0], w, 0)
				push(cores[1], w, 0)
			}
			for _, w := range others {
				push(cores[0], w, 1)
			}
			if workers == 3 {
				push(cores[1], 0, 1) // one of the two step 1 needs
			}
			require.Equal(t, []int64{2, 1}, []int64{cores[0].Clock(), cores[1].Clock()})

			cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()))
			require.NoError(t, err)
			defer cl.Close()
			w, err := worker.New(worker.Config{Rank: 1, WorldSize: workers, Batch: 16, Steps: 2}, model, train, worker.NewSync(psclient.New(cl), 1, 2))
			require.NoError(t, err)
			defer w.Close()
			res, err := w.Run(ctxT(t))
			require.NoError(t, err)
			assert.True(t, res.Complete)
			assert.Equal(t, []int64{2, 2}, []int64{cores[0].Clock(), cores[1].Clock()}, "each shard applied the run's 2 steps, no more")
		})
	}
}

// TestTheFinalPullWaitsForTheLastStep: a sync worker that finishes first
// (its last push goes out before another worker's) must read the run's
// final weights through FinalPull, the last step applied on every shard,
// not the weights of the step before it (issue 44, item 9: rank 0 of a
// standalone PS job evaluated whatever the shards held when it finished).
func TestTheFinalPullWaitsForTheLastStep(t *testing.T) {
	const steps = 3
	model := newModel(t)
	train, _ := synthetic(t)
	cfg := ps.DefaultConfig()
	cfg.Mode, cfg.Workers, cfg.MaxWait = consistency.Sync, 2, 30*time.Second
	cfg.Optimizer = optim.DefaultConfig()
	cfg.Optimizer.Algorithm, cfg.Optimizer.LR = optim.SGD, 0.1
	initial := make([]float32, model.Layout().Size())
	model.Init(initial, 7)
	cores := testcluster.CoresWith(t, cfg, model.Layout(), initial, 2, 512)
	c := testcluster.Start(t, cores...)
	// Worker 1 pushes straight into the shards, beside worker 0: every
	// step but the last (a push waits for the step before it).
	sessions := make([]ps.Session, len(cores))
	push := func(step int64) error {
		for i, core := range cores {
			g := make([]float32, core.Floats())
			for j := range g {
				g[j] = 0.01 * float32(step+1)
			}
			if _, err := core.Push(ctxT(t), ps.Push{WorkerID: 1, Session: sessions[i], Step: step, Clock: step, Ranges: core.Ranges(), Grads: g}); err != nil {
				return fmt.Errorf("worker 1's push of step %d to shard %d: %w", step, i, err)
			}
		}
		return nil
	}
	for i, core := range cores {
		var err error
		sessions[i], err = core.Rebind(1)
		require.NoError(t, err)
	}
	pushed := make(chan error, 1)
	go func() {
		for s := range int64(steps - 1) {
			if err := push(s); err != nil {
				pushed <- err
				return
			}
		}
		pushed <- nil
	}()
	cl, err := client.Dial(ctxT(t), c.Addrs(), client.WithDialOptions(c.DialOption()))
	require.NoError(t, err)
	defer cl.Close()
	sync := worker.NewSync(psclient.New(cl), 0, len(cores))
	_, ok := sync.FinalPull()
	require.False(t, ok, "no final pull before the last step is pushed")
	w, err := worker.New(worker.Config{Rank: 0, WorldSize: 2, Batch: 16, Steps: steps, Seed: 11}, model, train, sync)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.Run(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, <-pushed)
	require.Equal(t, []int64{steps - 1, steps - 1}, []int64{cores[0].Clock(), cores[1].Clock()}, "the last step waits for worker 1's push")

	args, ok := sync.FinalPull()
	require.True(t, ok)
	type read struct {
		clocks client.Clocks
		err    error
	}
	params := make([]float32, model.Layout().Size())
	done := make(chan read, 1)
	go func() {
		clocks, err := cl.PullFor(ctxT(t), args, params)
		done <- read{clocks, err}
	}()
	// The final pull must wait at the shards for worker 1's last push: it
	// is sent once a shard holds the pull (or the pull came back at once,
	// which is the defect).
	var r read
	returned := false
	require.Eventually(t, func() bool {
		select {
		case r = <-done:
			returned = true
			return true
		default:
		}
		_, waiting := cores[0].Stall()
		return waiting
	}, time.Minute, time.Millisecond)
	if !returned {
		require.NoError(t, push(steps-1))
		r = <-done
	}
	require.NoError(t, r.err)
	assert.Equal(t, client.Clocks{steps, steps}, r.clocks, "the final pull read the weights of the run's last step")
	final := make([]float32, model.Layout().Size())
	_, err = cl.Pull(ctxT(t), final)
	require.NoError(t, err)
	assert.Equal(t, final, params, "the final pull's weights are the run's end")
}
