package emulate

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"

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
