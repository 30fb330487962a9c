package launch

import (
	"encoding/json"
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
	tl := &Tally{Result: Result{Run: record.Run{Parameters: 10, Batch: 4, Optimizer: "momentum", LR: 0.1}, Staleness: map[int64]int64{}}}
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

// The result's JSON keeps its keys and values whichever types its fields
// live in (package record's Run is embedded): the populated and the
// empty result against the keys and values shoal train --json has
// always printed. The values are set by assignment, which reaches an
// embedded struct's fields as well as the result's own.
func TestResultJSON(t *testing.T) {
	full := func() Result {
		var r Result
		r.Mode, r.Model, r.Parameters, r.Dataset, r.TestDataset = consistency.SSP, "mlp 784-256-10", 203530, "mnist", "mnist-test"
		r.Workers, r.Servers, r.Threads, r.CPUs, r.Lanes, r.ParallelStep = 2, 1, 4, []string{"0-3", "4-7"}, 3, true
		r.Device, r.Precision, r.Epochs, r.Steps, r.Batch, r.Optimizer, r.LR = "cuda:0", "bf16", 1, 100, 64, "momentum", 0.01
		r.TestAccuracy, r.TestLoss, r.TrainAccuracy, r.TrainLoss = 0.9, 0.3, 0.95, 0.2
		r.Samples, r.SamplesPerSec, r.TrainSeconds, r.WallSeconds = 12800, 1280, 10, 12
		r.Staleness, r.Dropped, r.FailedWorkers = consistency.Staleness{0: 150, 1: 50}, 2, []int{1}
		r.MembershipEvents = []MembershipEvent{{Role: "worker", Rank: 1, Change: "died", Step: 40, Live: 1, Seconds: 4, Cause: "signal killed"}}
		r.Saved, r.WorkerSeconds = "model.ckpt", 9.5
		r.StepTime = &record.StepTime{Step: record.Quantiles{Mean: 0.1, P50: 0.09, P95: 0.2}}
		r.IdleFraction, r.StartOffsets, r.BytesSentPerStep, r.BytesReceivedPerStep = 0.25, []float64{0, 0.5}, 1000, 2000
		r.Curve = []record.CurvePoint{{Seconds: 5, Step: 50, Accuracy: 0.8, Loss: 0.5}}
		r.StoppedAtTarget = true
		return r
	}
	empty := func() Result {
		var r Result
		r.Mode = consistency.Async
		return r
	}
	tests := []struct {
		name string
		r    Result
		want string
	}{
		{name: "every field set", r: full(), want: `{"mode":"ssp","model":"mlp 784-256-10","parameters":203530,"dataset":"mnist","test_dataset":"mnist-test",
			"workers":2,"servers":1,"threads":4,"cpus":["0-3","4-7"],"lanes":3,"parallel_step":true,"device":"cuda:0","precision":"bf16",
			"epochs":1,"steps":100,"batch":64,"optimizer":"momentum","lr":0.01,"test_accuracy":0.9,"test_loss":0.3,"train_accuracy":0.95,"train_loss":0.2,
			"samples":12800,"samples_per_sec":1280,"train_seconds":10,"wall_seconds":12,"staleness":{"0":150,"1":50},"dropped_pushes":2,"failed_workers":[1],
			"membership_events":[{"role":"worker","rank":1,"change":"died","step":40,"live":1,"seconds":4,"cause":"signal killed"}],
			"saved":"model.ckpt","worker_seconds":9.5,
			"step_time":{"step":{"mean":0.1,"p50":0.09,"p95":0.2},"compute":{"mean":0,"p50":0,"p95":0},"data":{"mean":0,"p50":0,"p95":0},
				"wait":{"mean":0,"p50":0,"p95":0},"pull":{"mean":0,"p50":0,"p95":0},"push":{"mean":0,"p50":0,"p95":0},"reduce":{"mean":0,"p50":0,"p95":0}},
			"idle_fraction":0.25,"start_offsets":[0,0.5],"bytes_sent_per_step":1000,"bytes_received_per_step":2000,
			"curve":[{"seconds":5,"step":50,"accuracy":0.8,"loss":0.5}],"stopped_at_target":true}`},
		{name: "omitempty fields empty", r: empty(), want: `{"mode":"async","model":"","parameters":0,"dataset":"","workers":0,"servers":0,
			"epochs":0,"steps":0,"batch":0,"optimizer":"","lr":0,"test_accuracy":0,"test_loss":0,"train_accuracy":0,"train_loss":0,
			"samples":0,"samples_per_sec":0,"train_seconds":0,"wall_seconds":0,"staleness":null,"dropped_pushes":0,"failed_workers":null,
			"membership_events":null}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.r)
			require.NoError(t, err)
			assert.JSONEq(t, tt.want, string(got))
			var back Result
			require.NoError(t, json.Unmarshal(got, &back))
			assert.Equal(t, tt.r, back, "read back as written")
		})
	}
}
