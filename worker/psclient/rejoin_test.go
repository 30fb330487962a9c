package psclient_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// TestTrainRejoiningAfterTheShardsDroppedTheWorker: a sync worker that the
// shards drop from their live set mid-run (as membership does to one cut
// off for too long) joins again and trains to the end with a fresh
// strategy, and its result counts the samples of both runs.
func TestTrainRejoiningAfterTheShardsDroppedTheWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	model, err := nn.New(nn.Spec{Arch: "mlp", Hidden: []int{8}, Channels: 1, Height: 4, Width: 4, Classes: 4}, nn.NewCPU())
	require.NoError(t, err)
	initial := make([]float32, model.Layout().Size())
	model.Init(initial, 1)
	const batch, steps = 4, 6
	train, _, err := data.Synthetic(data.SyntheticConfig{Train: batch * steps, Test: 1, C: 1, H: 4, W: 4, Classes: 4, Seed: 1, Noise: 1})
	require.NoError(t, err)
	pcfg := ps.DefaultConfig()
	pcfg.Mode, pcfg.Workers = consistency.Sync, 1
	pcfg.Optimizer = optim.DefaultConfig()
	pcfg.Optimizer.Algorithm, pcfg.Optimizer.LR = optim.SGD, 0.1
	cores := testcluster.CoresWith(t, pcfg, model.Layout(), initial, 2, 16)
	c := testcluster.Start(t, cores...)
	cl, err := client.Dial(ctx, c.Addrs(), client.WithDialOptions(c.DialOption()))
	require.NoError(t, err)
	defer cl.Close()

	start, err := psclient.Join(ctx, cl, 0, 1, time.Minute)
	require.NoError(t, err)
	var dropped atomic.Bool
	cfg := worker.Config{Rank: 0, WorldSize: 1, Batch: batch, Steps: steps, StartStep: start, Seed: 1,
		OnStep: func(step int64, _ worker.StepTimes) {
			if step == 2 && !dropped.Swap(true) {
				for _, core := range cores {
					core.WorkerGone(0) // membership declared it dead
				}
			}
		}}
	strategies := 0
	r := psclient.Rejoining{Client: cl, JoinTimeout: time.Minute, Strategy: func() (worker.Strategy, error) {
		strategies++
		return worker.NewSync(psclient.New(cl), 0, 2), nil
	}}
	res, err := r.TrainRejoining(ctx, cfg, model, train)
	require.NoError(t, err)
	assert.True(t, dropped.Load())
	assert.Equal(t, 2, strategies, "a fresh strategy for the second join")
	assert.Equal(t, int64(steps), res.Steps)
	assert.Equal(t, int64(batch*steps), res.Samples, "the samples of both runs: steps 0..2, then 3..5 after the join")
}

// TestRejoiningWithLocalSteps: a worker of local steps (H = 2) dropped in
// the middle of a round joins again at the round the shards name, counted
// in its own steps (StepsPerClock), and keeps its inner optimizer: the
// optimizer's steps run on across the join (4 before it, the last of them
// in the round the shards never took, 6 after), and the shards apply each
// of the run's 4 rounds once.
func TestRejoiningWithLocalSteps(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	model, err := nn.New(nn.Spec{Arch: "mlp", Hidden: []int{8}, Channels: 1, Height: 4, Width: 4, Classes: 4}, nn.NewCPU())
	require.NoError(t, err)
	initial := make([]float32, model.Layout().Size())
	model.Init(initial, 1)
	const batch, steps, h = 4, 8, 2
	train, _, err := data.Synthetic(data.SyntheticConfig{Train: batch * steps, Test: 1, C: 1, H: 4, W: 4, Classes: 4, Seed: 1, Noise: 1})
	require.NoError(t, err)
	pcfg := ps.DefaultConfig()
	pcfg.Mode, pcfg.Workers, pcfg.LocalSteps = consistency.Sync, 1, h
	pcfg.Optimizer = optim.DefaultConfig()
	pcfg.Optimizer.Algorithm, pcfg.Optimizer.LR = optim.SGD, 1
	cores := testcluster.CoresWith(t, pcfg, model.Layout(), initial, 2, 16)
	c := testcluster.Start(t, cores...)
	cl, err := client.Dial(ctx, c.Addrs(), client.WithDialOptions(c.DialOption()))
	require.NoError(t, err)
	defer cl.Close()

	inner, err := optim.New(optim.Config{Algorithm: optim.Momentum, LR: 0.05, Momentum: 0.9}, model.Layout().Size())
	require.NoError(t, err)
	var dropped atomic.Bool
	cfg := worker.Config{Rank: 0, WorldSize: 1, Batch: batch, Steps: steps, Seed: 1,
		OnStep: func(step int64, _ worker.StepTimes) {
			if step == 2 && !dropped.Swap(true) { // the first step of round 1
				for _, core := range cores {
					core.WorkerGone(0)
				}
			}
		}}
	strategies := 0
	r := psclient.Rejoining{Client: cl, JoinTimeout: time.Minute, StepsPerClock: h, Strategy: func() (worker.Strategy, error) {
		strategies++
		return worker.NewLocal(worker.NewSync(psclient.New(cl), 0, 2), inner, h)
	}}
	res, err := r.TrainRejoining(ctx, cfg, model, train)
	require.NoError(t, err)
	assert.True(t, dropped.Load())
	assert.Equal(t, 2, strategies)
	assert.Equal(t, int64(steps), res.Steps)
	assert.Equal(t, int64(4+6), inner.Steps(), "the inner optimizer's state went on across the join")
	for _, core := range cores {
		assert.Equal(t, int64(steps/h), core.Clock(), "each round applied once")
	}
}
