package bench

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
)

// A record's JSON keeps its keys and values whichever types its fields
// live in (package record's Run is embedded): the populated and the
// minimal record against the keys and values results.json has always
// held, and both valid against results.schema.json. The values are set
// by assignment, which reaches an embedded struct's fields as well as the
// record's own.
func TestRecordJSON(t *testing.T) {
	full := func() Record {
		var r Record
		r.ID, r.Peer, r.Command, r.Mode, r.Model = "peer/mlp/ssp/w2/s1/nic10", "peer", []string{"shoal", "train"}, "ssp", "mlp"
		r.Parameters, r.VectorBytes, r.Workers, r.Servers, r.Batch, r.Seed = 10, 40, 2, 1, 64, 1
		r.Optimizer, r.LR, r.NICGbps, r.RTTMillis, r.Lanes, r.ParallelStep = "momentum", 0.01, 10, 0.5, 3, true
		r.Steps, r.Samples, r.TrainSeconds, r.SamplesPerSec = 100, 12800, 10, 1280
		eff, secs, steps := 0.75, 4.0, int64(40)
		r.ScalingEfficiency = &eff
		r.StepTime = StepTime{Step: Quantiles{Mean: 0.1, P50: 0.09, P95: 0.2}}
		r.IdleFraction, r.StartOffsets, r.BytesSentPerStep, r.BytesReceivedPerStep = 0.25, []float64{0, 0.5}, 1000, 2000
		r.Comm = &Comm{MeasuredSeconds: 0.02, AnalyticSeconds: 0.01, Ratio: 2}
		r.Staleness = consistency.Staleness{0: 150, 1: 50}
		r.Curve = []CurvePoint{{Seconds: 5, Step: 50, Accuracy: 0.8, Loss: 0.5}}
		r.TestAccuracy, r.TargetAccuracy, r.SecondsToTarget, r.StepsToTarget = 0.9, 0.8, &secs, &steps
		r.Error, r.Simulated = "failed", true
		return r
	}
	minimal := func() Record {
		var r Record
		r.ID, r.Command, r.Mode, r.Model, r.Workers, r.Batch, r.TestAccuracy = "mlp/ring/w1/s0", []string{"shoal"}, "ring", "mlp", 1, 1, -1
		return r
	}
	zeroStepTime := `"step_time":{"step":{"mean":0,"p50":0,"p95":0},"compute":{"mean":0,"p50":0,"p95":0},"data":{"mean":0,"p50":0,"p95":0},
		"wait":{"mean":0,"p50":0,"p95":0},"pull":{"mean":0,"p50":0,"p95":0},"push":{"mean":0,"p50":0,"p95":0},"reduce":{"mean":0,"p50":0,"p95":0}}`
	tests := []struct {
		name string
		r    Record
		want string
	}{
		{name: "every field set", r: full(), want: `{"id":"peer/mlp/ssp/w2/s1/nic10","peer":"peer","command":["shoal","train"],"mode":"ssp","model":"mlp",
			"parameters":10,"vector_bytes":40,"workers":2,"servers":1,"batch":64,"seed":1,"optimizer":"momentum","lr":0.01,"nic_gbps":10,"rtt_ms":0.5,
			"lanes":3,"parallel_step":true,"steps":100,"samples":12800,"train_seconds":10,"samples_per_sec":1280,"scaling_efficiency":0.75,
			"step_time":{"step":{"mean":0.1,"p50":0.09,"p95":0.2},"compute":{"mean":0,"p50":0,"p95":0},"data":{"mean":0,"p50":0,"p95":0},
				"wait":{"mean":0,"p50":0,"p95":0},"pull":{"mean":0,"p50":0,"p95":0},"push":{"mean":0,"p50":0,"p95":0},"reduce":{"mean":0,"p50":0,"p95":0}},
			"idle_fraction":0.25,"start_offsets":[0,0.5],"bytes_sent_per_step":1000,"bytes_received_per_step":2000,
			"comm":{"measured_seconds":0.02,"analytic_seconds":0.01,"ratio":2},"staleness":{"0":150,"1":50},
			"curve":[{"seconds":5,"step":50,"accuracy":0.8,"loss":0.5}],"test_accuracy":0.9,"target_accuracy":0.8,
			"seconds_to_target":4,"steps_to_target":40,"error":"failed","simulated":true}`},
		{name: "omitempty fields empty", r: minimal(), want: `{"id":"mlp/ring/w1/s0","command":["shoal"],"mode":"ring","model":"mlp",
			"parameters":0,"vector_bytes":0,"workers":1,"servers":0,"batch":1,"seed":0,"optimizer":"","lr":0,"nic_gbps":0,"rtt_ms":0,
			"steps":0,"samples":0,"train_seconds":0,"samples_per_sec":0,` + zeroStepTime + `,"idle_fraction":0,
			"bytes_sent_per_step":0,"bytes_received_per_step":0,"test_accuracy":-1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.r)
			require.NoError(t, err)
			assert.JSONEq(t, tt.want, string(got))
			var back Record
			require.NoError(t, json.Unmarshal(got, &back))
			assert.Equal(t, tt.r, back, "read back as written")
			doc := marshalResults(t, &Results{Schema: SchemaVersion, Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
				Command: []string{"shoal", "bench", "train"}, Revision: "unknown", Machine: Machine{OS: "linux", Arch: "amd64", CPUs: 1},
				Runs: []Record{tt.r}})
			assert.NoError(t, Validate(doc), "valid against results.schema.json")
		})
	}
}
