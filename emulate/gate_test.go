package emulate

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/sim"
	"github.com/shoalml/shoal/worker"
)

// A worker asking for an op the schedule does not have next, with no
// other worker left to take it, fails with both named instead of
// waiting for ever.
func TestADisagreementIsAnErrorNotAHang(t *testing.T) {
	tr := &turns{ops: []sim.Op{{Worker: 1, Step: 0, Read: true}}, live: 1, asks: map[int]sim.Op{}, steps: 10}
	tr.cond = sync.NewCond(&tr.mu)
	g := &gate{t: tr, w: 0}
	_, err := g.Pull(context.Background(), worker.PullArgs{WorkerID: 0, Steps: []int64{0}}, make([]float32, 1))
	assert.ErrorContains(t, err, "the schedule has worker 1's read for step 0 next, and every worker waits for something else: worker 0's read for step 0")
}

// A push the shard refuses because it could grow the weights past the
// shard's bound is the job diverging (worker.ErrDiverged, reported with
// the curve so far), not a failure of the emulation.
func TestARefusedMagnitudeIsDivergence(t *testing.T) {
	var l nn.Layout
	l.Add("w", 2)
	plan, err := shard.New(2, 1, 8)
	require.NoError(t, err)
	srv, err := ps.New(ps.Config{Mode: consistency.Async, Plan: plan, Layout: l, Optimizer: optim.DefaultConfig(), Workers: 1}, []float32{0, 0})
	require.NoError(t, err)
	defer srv.Close()
	tr := &turns{srv: srv, ranges: srv.Ranges(), ops: []sim.Op{{Worker: 0, Step: 0}}, live: 1, asks: map[int]sim.Op{}, steps: 1, evalAt: 100}
	tr.cond = sync.NewCond(&tr.mu)
	sess, err := srv.Rebind(0)
	require.NoError(t, err)
	g := &gate{t: tr, w: 0, session: sess}
	_, err = g.Push(context.Background(), worker.PushArgs{WorkerID: 0, Step: 0, Clocks: []int64{0}, Grads: []float32{1e38, 1}})
	assert.ErrorIs(t, err, worker.ErrDiverged)
	assert.ErrorContains(t, err, "refused whole")
}
