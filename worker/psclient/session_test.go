package psclient_test

import (
	"context"
	"sync/atomic"
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

// TestASecondClientCannotSpendAWorkersSteps is issue 44's item 4: worker
// 0 trains async against two shards while a second client, which reaches
// the shards as freely as the worker (the same transport, the same
// credentials) but did not join as worker 0, pushes for worker 0 at step
// 1023, push-pulls for it and pulls as it. Before sessions, one such
// push made every later push of the real worker a "duplicate": it
// trained on, and nothing it computed reached the shards (a restarted
// worker joined past it and trained nothing). Now each forged call is
// refused, says why and is counted, and the worker's run is what it
// would have been alone: every step pushed and applied once.
func TestASecondClientCannotSpendAWorkersSteps(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	model, err := nn.New(nn.Spec{Arch: "mlp", Hidden: []int{8}, Channels: 1, Height: 4, Width: 4, Classes: 4}, nn.NewCPU())
	require.NoError(t, err)
	initial := make([]float32, model.Layout().Size())
	model.Init(initial, 1)
	const batch, steps = 4, 8
	train, _, err := data.Synthetic(data.SyntheticConfig{Train: batch * steps, Test: 1, C: 1, H: 4, W: 4, Classes: 4, Seed: 1, Noise: 1})
	require.NoError(t, err)
	pcfg := ps.DefaultConfig()
	pcfg.Mode, pcfg.Workers = consistency.Async, 2
	pcfg.Optimizer = optim.DefaultConfig()
	pcfg.Optimizer.Algorithm, pcfg.Optimizer.LR = optim.SGD, 0.1
	cores := testcluster.CoresWith(t, pcfg, model.Layout(), initial, 2, 16)
	c := testcluster.Start(t, cores...)
	real, err := client.Dial(ctx, c.Addrs(), client.WithDialOptions(c.DialOption()))
	require.NoError(t, err)
	defer real.Close()
	forger, err := client.Dial(ctx, c.Addrs(), client.WithDialOptions(c.DialOption()))
	require.NoError(t, err)
	defer forger.Close()

	start, err := psclient.Join(ctx, real, 0, 1, time.Minute)
	require.NoError(t, err)
	require.Equal(t, int64(0), start)
	n := model.Layout().Size()
	var forged atomic.Int64
	forge := func() {
		grads := make([]float32, n)
		for i := range grads {
			grads[i] = 1
		}
		_, err := forger.Push(ctx, client.PushArgs{WorkerID: 0, Step: ps.MaxStepGap - 1, Grads: grads})
		assert.Error(t, err, "a push for worker 0 at step 1023")
		assert.True(t, client.NotYours(err), "%v", err)
		assert.Equal(t, codes.PermissionDenied, status.Code(err))
		assert.ErrorContains(t, err, "without a session: worker 0 joined shard")
		_, err = forger.PushPull(ctx, client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: 0, Step: ps.MaxStepGap - 1, Grads: grads}, Pull: true, Dst: make([]float32, n)})
		assert.Error(t, err, "a push-pull for worker 0")
		assert.True(t, client.NotYours(err), "%v", err)
		_, err = forger.PullFor(ctx, client.PullArgs{WorkerID: 0}, make([]float32, n))
		assert.Error(t, err, "a pull as worker 0")
		assert.True(t, client.NotYours(err), "%v", err)
		forged.Add(1)
	}
	cfg := worker.Config{Rank: 0, WorldSize: 1, Batch: batch, Steps: steps, StartStep: start, Seed: 1,
		OnStep: func(step int64, _ worker.StepTimes) {
			if step == 2 {
				forge()
			}
		}}
	st, err := worker.NewAsync(psclient.New(real), n, 2, worker.AsyncConfig{WorkerID: 0})
	require.NoError(t, err)
	w, err := worker.New(cfg, model, train, st)
	require.NoError(t, err)
	res, err := w.Run(ctx)
	w.Close()
	require.NoError(t, err)
	require.Equal(t, int64(1), forged.Load(), "the forger tried")

	assert.Equal(t, int64(steps), res.Steps)
	assert.Equal(t, int64(batch*steps), res.Samples)
	for i, core := range cores {
		assert.Equal(t, int64(steps), core.Clock(), "shard %d: every real push applied, and nothing else", i)
		assert.Equal(t, int64(steps), core.StepsPushed(0), "shard %d: worker 0's record is its own", i)
		st := core.Stats()
		assert.Equal(t, int64(0), st.Duplicates, "shard %d: no real push taken for a duplicate", i)
		assert.Equal(t, int64(2), st.RejectedBy[ps.RejectedSession], "shard %d: the forged push and push-pull, counted", i)
		assert.Equal(t, int64(1), st.RejectedPullsBy[ps.RejectedSession], "shard %d: the forged pull, counted", i)
	}

	// Worker 0 restarted now begins after its last step, not past a
	// forged one.
	again, err := psclient.Join(ctx, real, 0, 1, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, int64(steps), again)
}
