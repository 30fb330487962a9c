package launch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/record"
	"github.com/shoalml/shoal/worker"
)

// TestTally feeds a run's events to a tally, as shoal train does, and
// checks the result.
func TestTally(t *testing.T) {
	tl := &Tally{Result: Result{Parameters: 10, Batch: 4, Optimizer: "momentum", LR: 0.1, Staleness: map[int64]int64{}}}
	for _, e := range []Event{
		{Event: Progress, Rank: 1, Step: 3}, // the board's, not the tally's
		{Event: Eval, Rank: 0, Steps: 2, Seconds: 0.5, TestAccuracy: 0.4, TestLoss: 1.5},
		{Event: Done, Rank: 1, Steps: 5, Samples: 20, Seconds: 2, Staleness: map[int64]int64{0: 3, 1: 2}, Dropped: 1,
			Times: stepLog(1000.25, []float64{9, 1, 3}, []float64{9, 0.5, 1.5}, 10, 70, 0, 40)},
		{Event: Done, Rank: 0, Steps: 4, Samples: 16, Seconds: 3, Staleness: map[int64]int64{0: 4}, Stopped: true,
			Times: stepLog(1000, []float64{2}, []float64{1}, 8, 8, 8, 8)},
	} {
		tl.Add(e)
	}
	r := &tl.Result
	assert.Equal(t, int64(5), r.Steps, "the most any worker ran")
	assert.Equal(t, int64(36), r.Samples)
	assert.Equal(t, consistency.Staleness{0: 7, 1: 2}, r.Staleness)
	assert.Equal(t, int64(1), r.Dropped)
	assert.Equal(t, 3.0, r.WorkerSeconds, "the longest")
	assert.True(t, r.StoppedAtTarget, "rank 0 stopped at its target")
	assert.Equal(t, []record.CurvePoint{{Seconds: 0.5, Step: 2, Accuracy: 0.4, Loss: 1.5}}, r.Curve)
	assert.Nil(t, r.StepTime, "no summary before SummariseSteps")

	tl.SummariseSteps()
	require.NotNil(t, r.StepTime)
	// Rank 1's first step (9 s) is warm-up; rank 0 ran one step, which counts.
	assert.InDelta(t, 2.0, r.StepTime.Step.Mean, 1e-12, "(1+3+2)/3")
	assert.Equal(t, 2.0, r.StepTime.Step.P50)
	assert.Equal(t, 3.0, r.StepTime.Step.P95)
	assert.InDelta(t, 1-1.0/2.0, r.IdleFraction, 1e-12, "compute (0.5+1.5+1)/3 = 1 of a 2 s step")
	// Per worker per step after the first: rank 1 (70−10)/2 = 30 sent,
	// 40/2 = 20 received; rank 0 (one step) 8 and 8.
	assert.InDelta(t, (30+8)/2.0, r.BytesSentPerStep, 1e-12)
	assert.InDelta(t, (20+8)/2.0, r.BytesReceivedPerStep, 1e-12)
	assert.Equal(t, []float64{0, 0.25}, r.StartOffsets, "rank 0 began first, rank 1 a quarter second after, in rank order")
}

// stepLog is a worker's log of len(step) steps from start (Unix seconds)
// that computed for compute and waited for nothing else, with the byte
// counters after the first step and the last.
func stepLog(start float64, step, compute []float64, firstSent, sent, firstReceived, received int64) *StepLog {
	zero := make([]float64, len(step))
	return &StepLog{Start: start, Step: step, Compute: compute, Data: zero, Wait: zero, Pull: zero, Push: zero, Reduce: zero,
		FirstSent: firstSent, Sent: sent, FirstReceived: firstReceived, Received: received}
}

// TestTallyWithoutStats: no step logs, no step summary.
func TestTallyWithoutStats(t *testing.T) {
	var tl Tally
	tl.Add(Event{Event: Done, Steps: 3, Samples: 12})
	tl.SummariseSteps()
	assert.Nil(t, tl.Result.StepTime)
	assert.Zero(t, tl.Result.BytesSentPerStep)
}

// A step log's Start is when its first step began: the end of the call
// that adds it less the step's length, on the wall clock.
func TestStepLogStart(t *testing.T) {
	var l StepLog
	before := time.Now()
	l.Add(worker.StepTimes{Step: 2 * time.Second})
	after := time.Now()
	assert.GreaterOrEqual(t, l.Start, float64(before.Add(-2*time.Second).UnixMicro())/1e6)
	assert.LessOrEqual(t, l.Start, float64(after.Add(-2*time.Second).UnixMicro())/1e6)
	first := l.Start
	l.Add(worker.StepTimes{Step: time.Second})
	assert.Equal(t, first, l.Start, "the first step's start, kept")
}
