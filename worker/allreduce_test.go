package worker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/worker"
)

// ringRun trains a small MLP with n ranks of batch b over an in-memory
// group for steps steps and returns every rank's final vector.
func ringRun(t *testing.T, n, batch int, steps int64, op string, train data.Dataset, tweak func(rank int, cfg *worker.RingConfig)) ([][]float32, []error) {
	t.Helper()
	spec := nn.Spec{Arch: "mlp", Hidden: []int{24}}
	group := collective.NewMemGroup(n)
	finals := make([][]float32, n)
	errs := make([]error, n)
	done := make(chan struct{}, n)
	for r := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			defer group[r].Close()
			errs[r] = func() error {
				comm, err := collective.New(group[r], collective.DefaultConfig())
				if err != nil {
					return err
				}
				m, _ := nn.New(spec, nn.NewCPU())
				cfg := worker.RingConfig{Optimizer: optim.DefaultConfig(), ReduceOp: op, DesyncEvery: 10}
				cfg.Optimizer.Algorithm, cfg.Optimizer.LR = optim.SGD, 0.1
				if r == 0 {
					cfg.Initial = make([]float32, m.Layout().Size())
					m.Init(cfg.Initial, 7)
				}
				if tweak != nil {
					tweak(r, &cfg)
				}
				ring, err := worker.NewRing(comm, m.Layout().Size(), cfg)
				if err != nil {
					return err
				}
				w, err := worker.New(worker.Config{Rank: r, WorldSize: n, Batch: batch, Steps: steps, Seed: 11}, m, train, ring)
				if err != nil {
					return err
				}
				defer w.Close()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if _, err := w.Run(ctx); err != nil {
					return err
				}
				finals[r] = append([]float32(nil), w.Params()...)
				return nil
			}()
		}()
	}
	for range n {
		<-done
	}
	return finals, errs
}

func TestRingEquivalence(t *testing.T) {
	cfg := data.DefaultSyntheticConfig()
	cfg.Train, cfg.Test = 2400, 10
	train, _, err := data.Synthetic(cfg)
	require.NoError(t, err)
	const b, steps = 12, 50
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			ref, errs := ringRun(t, 1, n*b, steps, worker.ReduceAverage, train, nil)
			require.NoError(t, errors.Join(errs...))
			got, errs := ringRun(t, n, b, steps, worker.ReduceAverage, train, nil)
			require.NoError(t, errors.Join(errs...))
			for r := range n {
				e := testcluster.RelErr(got[r], ref[0])
				t.Logf("rank %d: relative error %.2e", r, e)
				assert.LessOrEqual(t, e, 1e-5)
			}
		})
	}
}

func TestRingAdasumTrains(t *testing.T) {
	train, _ := synthetic(t)
	finals, errs := ringRun(t, 3, 16, 40, worker.ReduceAdasum, train, nil)
	require.NoError(t, errors.Join(errs...))
	for r := 1; r < 3; r++ {
		assert.Equal(t, finals[0], finals[r], "rank %d's replica differs", r)
	}
}

func TestRingDesyncIsCaught(t *testing.T) {
	train, _ := synthetic(t)
	// Rank 2 uses another learning rate: its replica drifts and the
	// check at step 10 must name it.
	_, errs := ringRun(t, 3, 16, 30, worker.ReduceAverage, train, func(rank int, cfg *worker.RingConfig) {
		if rank == 2 {
			cfg.Optimizer.LR = 0.2
		}
	})
	for r, err := range errs {
		require.ErrorIs(t, err, worker.ErrDesync, "rank %d", r)
		assert.Contains(t, err.Error(), "rank(s) 2 differ")
	}
}

func TestRingDeadRankIsNamed(t *testing.T) {
	train, _ := synthetic(t)
	group := collective.NewMemGroup(3)
	// Rank 1 dies before its first collective.
	require.NoError(t, group[1].Close())
	errs := make(chan error, 2)
	for _, r := range []int{0, 2} {
		go func() {
			comm, err := collective.New(group[r], collective.DefaultConfig())
			if err != nil {
				errs <- err
				return
			}
			m := newModel(t)
			cfg := worker.RingConfig{Optimizer: optim.DefaultConfig()}
			if r == 0 {
				cfg.Initial = make([]float32, m.Layout().Size())
			}
			ring, err := worker.NewRing(comm, m.Layout().Size(), cfg)
			if err != nil {
				errs <- err
				return
			}
			w, err := worker.New(worker.Config{Rank: r, WorldSize: 3, Batch: 16, Steps: 5}, m, train, ring)
			if err != nil {
				errs <- err
				return
			}
			defer w.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = w.Run(ctx)
			errs <- err
		}()
	}
	for range 2 {
		err := <-errs
		var pe *collective.PeerError
		require.ErrorAs(t, err, &pe, "%v", err)
		assert.Equal(t, 1, pe.Rank, "%v", err)
	}
	require.NoError(t, group[0].Close())
	require.NoError(t, group[2].Close())
}

// TestRingFusionMatchesOneAllreduce: reducing the gradient in buckets
// while backward runs ends where one allreduce after backward does, for
// bucket sizes that cut every layer apart, cut some, and cut none.
func TestRingFusionMatchesOneAllreduce(t *testing.T) {
	train, _ := synthetic(t)
	ref, errs := ringRun(t, 3, 16, 30, worker.ReduceAverage, train, nil)
	require.NoError(t, errors.Join(errs...))
	for _, fusion := range []int{1, 2 << 10, 1 << 30} {
		t.Run(fmt.Sprint(fusion), func(t *testing.T) {
			got, errs := ringRun(t, 3, 16, 30, worker.ReduceAverage, train, func(_ int, cfg *worker.RingConfig) { cfg.FusionBytes = fusion })
			require.NoError(t, errors.Join(errs...))
			for r := range 3 {
				assert.Equal(t, got[0], got[r], "rank %d's replica differs", r)
				e := testcluster.RelErr(got[r], ref[0])
				t.Logf("rank %d: relative error %.2e", r, e)
				assert.LessOrEqual(t, e, 1e-6)
			}
		})
	}
}

func TestRingRejectsNegativeFusion(t *testing.T) {
	comm, err := collective.New(collective.NewMemGroup(1)[0], collective.DefaultConfig())
	require.NoError(t, err)
	_, err = worker.NewRing(comm, 4, worker.RingConfig{Optimizer: optim.DefaultConfig(), Initial: make([]float32, 4), FusionBytes: -1})
	require.ErrorContains(t, err, "fusion bytes -1")
}

// A step whose allreduce breaks (a peer died mid-call) is not applied:
// the weights and the optimizer state stay those of the last whole step,
// which is what an elastic re-form takes up.
func TestABrokenAllreduceLeavesTheStepUnapplied(t *testing.T) {
	for _, fusion := range []int{0, 64} {
		t.Run(fmt.Sprint("fusion ", fusion), func(t *testing.T) {
			group := collective.NewMemGroup(2)
			defer group[0].Close()
			comm, err := collective.New(group[0], collective.DefaultConfig())
			require.NoError(t, err)
			cfg := worker.RingConfig{Optimizer: optim.DefaultConfig(), Synced: true, FusionBytes: fusion}
			cfg.Optimizer.Algorithm, cfg.Optimizer.LR, cfg.Optimizer.Momentum = optim.Momentum, 0.1, 0.9
			const n = 1000
			ring, err := worker.NewRing(comm, n, cfg)
			require.NoError(t, err)
			params, grads := make([]float32, n), make([]float32, n)
			for i := range params {
				params[i], grads[i] = float32(i), 1
			}
			before, state := append([]float32(nil), params...), ring.State()
			// The peer sends half of its first message and dies.
			require.NoError(t, group[1].Send(context.Background(), 0, make([]byte, 40)))
			require.NoError(t, group[1].Close())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = ring.Apply(ctx, 0, params, grads)
			require.ErrorIs(t, err, collective.ErrPeer)
			assert.Equal(t, before, params, "a broken step changed the weights")
			assert.Equal(t, state, ring.State(), "a broken step changed the optimizer state")
		})
	}
}
