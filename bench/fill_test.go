package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/record"
)

// TestFill takes a record's measurements from shoal train's summary.
func TestFill(t *testing.T) {
	r := launch.Result{Run: record.Run{Parameters: 10, Batch: 4, Optimizer: "momentum", LR: 0.1, Lanes: 3, ParallelStep: true,
		Steps: 5, Samples: 36, StartOffsets: []float64{0, 0.25}, Curve: []CurvePoint{{Seconds: 0.5, Step: 2, Accuracy: 0.4, Loss: 1.5}}, TestAccuracy: 0.9},
		WorkerSeconds: 3, Staleness: consistency.Staleness{0: 7, 1: 2},
		StepTime: &StepTime{Step: Quantiles{Mean: 2, P50: 2, P95: 3}}, IdleFraction: 0.5,
		BytesSentPerStep: 19, BytesReceivedPerStep: 14}
	rec := Record{ID: "mlp/async/w2/s1", Mode: "async-overlap", Model: "mlp", Workers: 2, Servers: 1, Run: record.Run{TestAccuracy: -1}}
	rec.Fill(&r)
	assert.Equal(t, r.Run, rec.Run, "the run both carry, whole")
	assert.Equal(t, Record{ID: "mlp/async/w2/s1", Mode: "async-overlap", Model: "mlp", Workers: 2, Servers: 1},
		Record{ID: rec.ID, Mode: rec.Mode, Model: rec.Model, Workers: rec.Workers, Servers: rec.Servers}, "what names the run is the harness's")
	assert.Equal(t, 3, rec.Lanes, "the lanes the push-pulls went over")
	assert.True(t, rec.ParallelStep)
	assert.Equal(t, int64(40), rec.VectorBytes)
	assert.Equal(t, 12.0, rec.SamplesPerSec, "samples over the workers' own time")
	assert.Equal(t, 3.0, rec.TrainSeconds)
	assert.Equal(t, consistency.Staleness{0: 7, 1: 2}, rec.Staleness)
	assert.Equal(t, *r.StepTime, rec.StepTime)
	assert.Equal(t, r.Curve, rec.Curve)
	assert.Equal(t, r.StartOffsets, rec.StartOffsets)
	assert.Equal(t, 0.9, rec.TestAccuracy)

	rec = Record{}
	rec.Fill(&launch.Result{Staleness: consistency.Staleness{}})
	assert.Nil(t, rec.Staleness, "no pushes counted: no staleness in the record")
}
