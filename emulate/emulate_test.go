package emulate_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/emulate"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// job is n workers of a small MLP on a synthetic Fashion-MNIST look-alike
// (2,000 samples, 2 epochs), one shard behind a 1 Gbit/s NIC.
func job(t *testing.T, mode consistency.Mode, n int, staleness int64) emulate.Config {
	t.Helper()
	dc := data.DefaultSyntheticConfig()
	dc.Train, dc.Test = 2000, 500
	train, test, err := data.Synthetic(dc)
	require.NoError(t, err)
	opt := optim.DefaultConfig()
	opt.LR = 0.05
	return emulate.Config{
		Sim: sim.Config{Mode: mode, Workers: n, Servers: 1, Staleness: staleness, Layers: []int64{784 * 32 * 4, 32 * 4, 32 * 10 * 4, 40},
			Forward: 0.001, Backward: 0.002, Jitter: 0.3, Seed: 7, NICGbps: 1},
		Model:     func() (nn.Model, error) { return nn.New(nn.Spec{Arch: "mlp", Hidden: []int{32}}, nn.NewCPU()) },
		Seed:      1,
		Batch:     32,
		Epochs:    2,
		Optimizer: opt,
		Train:     train, Test: test,
		EvalEvery: 10,
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// The emulation follows the simulated schedule push for push: the
// staleness the real shard measured for every push is the one the
// simulation predicted, and the shard applied one update per push (one
// per step in sync). The model learns.
func TestTheShardSeesTheSimulatedSchedule(t *testing.T) {
	for _, tc := range []struct {
		mode      consistency.Mode
		n         int
		staleness int64
	}{{consistency.Async, 4, 0}, {consistency.Async, 8, 0}, {consistency.SSP, 8, 1}, {consistency.SSP, 4, 0}, {consistency.Sync, 4, 0}} {
		cfg := job(t, tc.mode, tc.n, tc.staleness)
		res, err := emulate.Run(ctxT(t), cfg)
		require.NoError(t, err, "%s N=%d", tc.mode, tc.n)
		steps := int64((2000/tc.n + 31) / 32 * 2)
		assert.Equal(t, steps, res.Steps)
		want := int64(tc.n) * steps
		switch {
		case tc.mode == consistency.Sync:
			want = steps
			assert.Empty(t, res.Staleness, "the sync strategy counts none")
		case tc.mode.Synchronous(tc.staleness):
			// SSP with bound 0 is the sync barrier on the shards; its
			// workers (the async strategy) count every push fresh.
			assert.Equal(t, consistency.Staleness{0: want}, res.Staleness)
			want = steps
		default:
			assert.Equal(t, want, res.Staleness.Pushes())
			assert.Equal(t, res.Simulated.Staleness, res.Staleness, "%s N=%d: staleness measured by the shard against the simulation's", tc.mode, tc.n)
		}
		assert.Equal(t, want, res.Updates, "%s N=%d", tc.mode, tc.n)
		if tc.mode == consistency.SSP {
			assert.LessOrEqual(t, res.Staleness.Worst(), int64(tc.n)*(2*tc.staleness+1), "SSP bounds staleness")
		}
		require.NotEmpty(t, res.Curve)
		assert.Equal(t, res.Updates, res.Curve[len(res.Curve)-1].Updates)
		assert.InDelta(t, 2.0, res.Curve[len(res.Curve)-1].Epochs, 1e-9)
		assert.Greater(t, res.Final.Accuracy, 0.5, "%s N=%d learns (10 classes)", tc.mode, tc.n)
		t.Logf("%s N=%d s=%d: accuracy %.4f after %d updates, staleness mean %.2f max %d", tc.mode, tc.n, tc.staleness, res.Final.Accuracy, res.Updates, res.Staleness.Mean(), res.Staleness.Worst())
	}
}

// The same job emulated twice gives the same curve, to the bit: the
// order of every update is the schedule's, not the goroutines'.
func TestAnEmulationIsReproducible(t *testing.T) {
	a, err := emulate.Run(ctxT(t), job(t, consistency.Async, 8, 0))
	require.NoError(t, err)
	b, err := emulate.Run(ctxT(t), job(t, consistency.Async, 8, 0))
	require.NoError(t, err)
	assert.Equal(t, a.Curve, b.Curve)
}

// DiLoCo with one local step, inner SGD at the job's learning rate and
// outer SGD at lr 1 without momentum is sync SGD (issue 42's
// equivalence): the emulation ends where sync's does, its curve point
// for point.
func TestOneLocalStepWithOuterSGDIsSync(t *testing.T) {
	want, err := emulate.Run(ctxT(t), job(t, consistency.Sync, 4, 0))
	require.NoError(t, err)
	cfg := job(t, consistency.Sync, 4, 0)
	cfg.LocalSteps, cfg.Inner = 1, cfg.Optimizer
	cfg.Optimizer = optim.DefaultConfig()
	cfg.Optimizer.Algorithm, cfg.Optimizer.LR, cfg.Optimizer.Momentum = optim.SGD, 1, 0
	got, err := emulate.Run(ctxT(t), cfg)
	require.NoError(t, err)
	assert.Equal(t, want.Updates, got.Updates)
	require.Len(t, got.Curve, len(want.Curve))
	for i, w := range want.Curve {
		g := got.Curve[i]
		assert.Equal(t, w.Updates, g.Updates, "point %d", i)
		assert.InDelta(t, w.Epochs, g.Epochs, 1e-12, "point %d", i)
		assert.InEpsilon(t, w.Loss, g.Loss, 1e-5, "point %d: the test loss", i)
		assert.InDelta(t, w.Accuracy, g.Accuracy, 0.0021, "point %d: at most one test sample of 500 apart", i)
	}
}

// With H local steps the shard applies one update a round (per worker in
// async), the async staleness is the simulated one, and the model
// learns.
func TestLocalStepsFollowTheSimulatedRounds(t *testing.T) {
	const h = 5
	steps := int64((2000/4 + 31) / 32 * 2)
	rounds := (steps + h - 1) / h
	for _, mode := range []consistency.Mode{consistency.Sync, consistency.Async} {
		cfg := job(t, mode, 4, 0)
		cfg.LocalSteps, cfg.Inner = h, cfg.Optimizer
		cfg.Optimizer = optim.DefaultConfig()
		cfg.Optimizer.Algorithm, cfg.Optimizer.LR, cfg.Optimizer.Momentum = optim.SGD, 1, 0
		if mode == consistency.Async {
			cfg.Update = ps.UpdateConfig{Rule: ps.UpdateAverage}
		}
		res, err := emulate.Run(ctxT(t), cfg)
		require.NoError(t, err, "%s", mode)
		assert.Equal(t, steps, res.Steps)
		want := rounds
		if mode == consistency.Async {
			want = 4 * rounds
			assert.Equal(t, res.Simulated.Staleness, res.Staleness, "async: staleness measured by the shard against the simulation's")
		}
		assert.Equal(t, want, res.Updates, "%s: one update a round", mode)
		require.NotEmpty(t, res.Curve)
		assert.InDelta(t, 2.0, res.Curve[len(res.Curve)-1].Epochs, 1e-9)
		assert.Greater(t, res.Final.Accuracy, 0.5, "%s H=%d learns (10 classes)", mode, h)
	}
}

func TestConfigErrors(t *testing.T) {
	ring := job(t, consistency.Ring, 2, 0)
	_, err := emulate.Run(ctxT(t), ring)
	assert.ErrorContains(t, err, "only the parameter-server modes")
	backup := job(t, consistency.Sync, 4, 0)
	backup.Sim.BackupWorkers = 1
	_, err = emulate.Run(ctxT(t), backup)
	assert.ErrorContains(t, err, "backup workers")
	ssp := job(t, consistency.SSP, 4, 1)
	ssp.LocalSteps, ssp.Inner = 10, ssp.Optimizer
	_, err = emulate.Run(ctxT(t), ssp)
	assert.ErrorContains(t, err, "10 local steps in ssp mode: only sync and async")
	negative := job(t, consistency.Sync, 4, 0)
	negative.LocalSteps = -1
	_, err = emulate.Run(ctxT(t), negative)
	assert.ErrorContains(t, err, "-1 local steps, want 0..")
	replay := job(t, consistency.Async, 4, 0)
	replay.LocalSteps, replay.Inner, replay.Schedule = 10, replay.Optimizer, []sim.Op{{Worker: 0, Read: true}}
	_, err = emulate.Run(ctxT(t), replay)
	assert.ErrorContains(t, err, "with a replayed schedule")
}

// A job whose loss turns NaN is reported, with its curve up to there,
// not failed: at some worker counts the interesting answer is that
// async diverges.
func TestADivergingJobIsReported(t *testing.T) {
	cfg := job(t, consistency.Async, 8, 0)
	cfg.Optimizer.LR = 1e6
	res, err := emulate.Run(ctxT(t), cfg)
	require.NoError(t, err)
	assert.Contains(t, res.Diverged, "the model diverged")
	require.NotEmpty(t, res.Curve)
	assert.Less(t, res.Updates, int64(8*((2000/8+31)/32*2)), "it stopped early (128 updates in all)")
}

func TestAPointWithANaNLossIsJSON(t *testing.T) {
	b, err := json.Marshal([]emulate.Point{{Updates: 3, Epochs: 0.5, Accuracy: 0.1, Loss: math.NaN()}, {Updates: 4, Loss: 0.25}})
	require.NoError(t, err)
	assert.JSONEq(t, `[{"updates":3,"epochs":0.5,"accuracy":0.1,"loss":null},{"updates":4,"epochs":0,"accuracy":0,"loss":0.25}]`, string(b))
}
