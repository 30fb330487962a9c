package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/record"
)

// TestCommModel checks the analytic communication times against hand
// computation: M = 1e8 bytes at 1 Gbit/s (B = 1.25e8 bytes/s), M/B = 0.8 s.
func TestCommModel(t *testing.T) {
	for _, tc := range []struct {
		mode             string
		workers, servers int
		want             float64
		localSteps       int
	}{
		{"ring", 2, 0, 0.8, 0},          // 2·1/2·0.8
		{"ring", 4, 0, 1.2, 0},          // 2·3/4·0.8
		{"sync", 4, 1, 6.4, 0},          // 2·4·0.8
		{"async", 4, 2, 3.2, 0},         // 2·(4/2)·0.8
		{"ssp", 2, 4, 1.6, 0},           // 2·max(0.8, 0.4)
		{"async-overlap", 4, 4, 0.8, 0}, // max(0.8, 0.8): both directions at once
		{"sync", 4, 1, 0.64, 10},        // 2·4·0.8, one step in 10
	} {
		rec := Record{Mode: tc.mode, Workers: tc.workers, Servers: tc.servers, VectorBytes: 1e8, LocalSteps: tc.localSteps}
		rec.StepTime.Reduce.Mean, rec.StepTime.Pull.Mean, rec.StepTime.Push.Mean = 1, 0.5, 1.5
		c := CommModel(&rec, 1)
		assert.InDelta(t, tc.want, c.AnalyticSeconds, 1e-9, "%+v", tc)
		measured := 2.0 // pull + push
		if tc.mode == "ring" {
			measured = 1
		}
		assert.InDelta(t, measured, c.MeasuredSeconds, 1e-12)
		assert.InDelta(t, measured/tc.want, c.Ratio, 1e-9)
	}
}

func TestToTargetAndScaling(t *testing.T) {
	rec := Record{TargetAccuracy: 0.8, Run: record.Run{Curve: []CurvePoint{{Seconds: 1, Step: 100, Accuracy: 0.7}, {Seconds: 2, Step: 200, Accuracy: 0.81}, {Seconds: 3, Step: 300, Accuracy: 0.85}}}}
	ToTarget(&rec)
	require.NotNil(t, rec.SecondsToTarget)
	assert.Equal(t, 2.0, *rec.SecondsToTarget)
	assert.Equal(t, int64(200), *rec.StepsToTarget)
	never := Record{TargetAccuracy: 0.9, Run: record.Run{Curve: rec.Curve}}
	ToTarget(&never)
	assert.Nil(t, never.SecondsToTarget)

	runs := []Record{
		{Mode: "sync", Model: "mlp", Workers: 1, Servers: 1, SamplesPerSec: 100},
		{Mode: "sync", Model: "mlp", Workers: 4, Servers: 1, SamplesPerSec: 300},
		{Mode: "sync", Model: "mlp", Workers: 4, Servers: 2, SamplesPerSec: 300}, // no 1-worker run with 2 servers
		{Mode: "ring", Model: "mlp", Workers: 2, SamplesPerSec: 300},             // no 1-worker ring run
	}
	ScalingEfficiency(runs)
	require.NotNil(t, runs[0].ScalingEfficiency)
	assert.Equal(t, 1.0, *runs[0].ScalingEfficiency)
	require.NotNil(t, runs[1].ScalingEfficiency)
	assert.Equal(t, 0.75, *runs[1].ScalingEfficiency)
	assert.Nil(t, runs[2].ScalingEfficiency)
	assert.Nil(t, runs[3].ScalingEfficiency)
}

// TestNoLoopbackTwinsWithoutANIC: without a NIC model every run is on
// loopback, so the plans' loopback runs that repeat another run are
// dropped (they would be the same run under the same id, which the
// schema refuses); the others stay.
func TestNoLoopbackTwinsWithoutANIC(t *testing.T) {
	for _, quick := range []bool{true, false} {
		plan := DefaultPlan(quick)
		kept := DropLoopbackTwins(plan.Runs)
		seen := map[Run]bool{}
		for _, r := range kept {
			r.Loopback = false
			assert.False(t, seen[r], "quick %v: %+v twice", quick, r)
			seen[r] = true
		}
		for _, r := range plan.Runs {
			r.Loopback = false
			assert.True(t, seen[r], "quick %v: %+v dropped altogether", quick, r)
		}
		assert.Less(t, len(kept), len(plan.Runs), "quick %v: the plan has a loopback twin", quick)
	}
}

func TestParseGrid(t *testing.T) {
	p, err := ParseGrid("mlp,cnn", "sync,ring", "1,2", "1,2", 10, 0)
	require.NoError(t, err)
	// Ring ignores the server counts: 2 models × (sync 2×2 + ring 2).
	assert.Len(t, p.Runs, 2*(4+2))
	assert.Equal(t, Run{Model: "mlp", Mode: "sync", Workers: 1, Servers: 1, Steps: 10}, p.Runs[0])
	assert.Equal(t, "mlp-25m/async/w2/s1/nic1", Run{Model: "big", Mode: "async", Workers: 2, Servers: 1}.ID("", 1))
	assert.Equal(t, "pytorch-ddp-gloo/mlp/ddp/w4/s0", Run{Model: "mlp", Mode: "ddp", Workers: 4}.ID("pytorch-ddp-gloo", 0))

	p, err = ParseGrid("", "", "", "", 0, 3)
	require.NoError(t, err)
	for _, r := range p.Runs {
		assert.Equal(t, 3, r.Epochs)
		assert.Zero(t, r.Steps, "--epochs replaces --steps")
	}
	for _, tc := range []struct {
		name                            string
		models, modes, workers, servers string
		steps                           int64
		want                            string
	}{
		{"unknown model", "rnn", "", "", "", 1, `--models: unknown model "rnn"`},
		{"unknown mode", "", "gossip", "", "", 1, `--modes: unknown mode "gossip"`},
		{"zero workers", "", "", "0", "", 1, `--workers "0": want positive integers`},
		{"not a number", "", "", "", "1,x", 1, `--servers "1,x": want positive integers`},
		{"no length", "", "", "", "", 0, "--steps 0, --epochs 0: want one of them >= 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseGrid(tc.models, tc.modes, tc.workers, tc.servers, tc.steps, 0)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// TestWithLocalSteps: each sync and async run is followed by the same
// with local steps, under an id of its own; H 0 changes nothing.
func TestWithLocalSteps(t *testing.T) {
	runs := []Run{{Model: "mlp", Mode: "sync", Workers: 2, Servers: 1}, {Model: "mlp", Mode: "ring", Workers: 2},
		{Model: "mlp", Mode: "async", Workers: 2, Servers: 1}, {Model: "mlp", Mode: "ssp", Workers: 2, Servers: 1}}
	assert.Equal(t, runs, WithLocalSteps(runs, 0))
	got := WithLocalSteps(runs, 10)
	var ids []string
	for _, r := range got {
		ids = append(ids, r.ID("", 1))
	}
	assert.Equal(t, []string{"mlp/sync/w2/s1/nic1", "mlp/sync/w2/s1/h10/nic1", "mlp/ring/w2/s0/nic1", "mlp/async/w2/s1/nic1", "mlp/async/w2/s1/h10/nic1", "mlp/ssp/w2/s1/nic1"}, ids)
	assert.Equal(t, 10, got[1].LocalSteps)
	assert.Zero(t, got[0].LocalSteps, "the plain run stays")
}
