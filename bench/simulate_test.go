package bench

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// simIn is a 1 MiB model in four layers, 2 ms of compute a step, no
// jitter, on 1 Gbit/s NICs.
func simIn() SimInput {
	return SimInput{Layers: []int64{1 << 18, 1 << 18, 1 << 18, 1 << 18}, Batch: 32, StepsPerEpoch: 25, Compute: 0.002,
		NICGbps: 1, Command: []string{"shoal", "bench", "simulate"}}
}

// A simulated record has the measured one's ID and schema, is marked,
// and its ring step is compute plus the ring's formula (one layer: its
// allreduce cannot overlap backward).
func TestSimulateRing(t *testing.T) {
	in := simIn()
	in.Layers = []int64{1 << 20}
	rec, err := Simulate(Run{Model: "mlp", Mode: "ring", Workers: 4, Steps: 20}, in)
	require.NoError(t, err)
	assert.Equal(t, "mlp/ring/w4/s0/nic1", rec.ID)
	assert.True(t, rec.Simulated)
	assert.Equal(t, int64(1<<20), rec.VectorBytes)
	assert.Equal(t, 1<<18, rec.Parameters)
	assert.Equal(t, int64(20*4*32), rec.Samples)
	assert.Equal(t, -1.0, rec.TestAccuracy)
	ring := 2 * 3.0 / 4 * (1 << 20) / (1e9 / 8)
	assert.InEpsilon(t, 0.002+ring, rec.StepTime.Step.Mean, 1e-6)
	assert.InEpsilon(t, ring, rec.StepTime.Reduce.Mean, 1e-6)
	assert.Zero(t, rec.StepTime.Push.Mean)
	require.NotNil(t, rec.Comm)
	assert.InEpsilon(t, 1, rec.Comm.Ratio, 1e-6, "the simulated ring moves what the formula says")
}

// The PS modes: communication shows as Push, async has staleness, and
// a run in epochs takes StepsPerEpoch a epoch.
func TestSimulatePS(t *testing.T) {
	rec, err := Simulate(Run{Model: "mlp", Mode: "async", Workers: 2, Servers: 1, Epochs: 2}, simIn())
	require.NoError(t, err)
	assert.Equal(t, "mlp/async/w2/s1/nic1", rec.ID)
	assert.Equal(t, int64(50), rec.Steps)
	assert.Positive(t, rec.StepTime.Push.Mean)
	assert.Zero(t, rec.StepTime.Reduce.Mean)
	assert.Positive(t, rec.Staleness.Pushes())
	assert.InDelta(t, 1-rec.StepTime.Compute.Mean/rec.StepTime.Step.Mean, rec.IdleFraction, 1e-12)
	assert.InEpsilon(t, 1<<20, rec.BytesSentPerStep, 1e-9)

	sync, err := Simulate(Run{Model: "mlp", Mode: "sync", Workers: 2, Servers: 1, Steps: 20}, simIn())
	require.NoError(t, err)
	assert.Greater(t, sync.StepTime.Step.Mean, rec.StepTime.Step.Mean, "sync waits for both pushes before either reply")
}

// One worker on one shard: async's push and reply go one after the
// other, async-overlap's push and pull at once, about halving the
// communication.
func TestSimulateOverlap(t *testing.T) {
	async, err := Simulate(Run{Model: "mlp", Mode: "async", Workers: 1, Servers: 1, Steps: 20}, simIn())
	require.NoError(t, err)
	overlap, err := Simulate(Run{Model: "mlp", Mode: "async-overlap", Workers: 1, Servers: 1, Steps: 20}, simIn())
	require.NoError(t, err)
	assert.Equal(t, "mlp/async-overlap/w1/s1/nic1", overlap.ID)
	oneWay := float64(1<<20) / (1e9 / 8)
	assert.InEpsilon(t, 2*oneWay, async.StepTime.Push.P50, 0.01)
	assert.InEpsilon(t, oneWay, overlap.StepTime.Push.P50, 0.01)
}

func TestSimulateRefuses(t *testing.T) {
	_, err := Simulate(Run{Model: "mlp", Mode: "ddp", Workers: 2, Steps: 5}, simIn())
	assert.ErrorContains(t, err, "not ddp")
	in := simIn()
	in.Compute = 0
	_, err = Simulate(Run{Model: "mlp", Mode: "sync", Workers: 2, Servers: 1, Steps: 5}, in)
	assert.ErrorContains(t, err, "compute 0s")
	_, err = Simulate(Run{Model: "mlp", Mode: "sync", Workers: 2, Servers: 0, Steps: 5}, simIn())
	assert.ErrorContains(t, err, "0 servers")
}

// Calibrate reads the mean and a log-normal's σ from a compute phase,
// and leaves Jitter alone where the phase shows no spread.
func TestCalibrate(t *testing.T) {
	in := simIn()
	in.Jitter = 0.3
	in.Calibrate(Quantiles{Mean: 0.01, P50: 0.01, P95: 0.01 * math.Exp(1.645*0.2)})
	assert.Equal(t, 0.01, in.Compute)
	assert.InDelta(t, 0.2, in.Jitter, 1e-12)
	in.Calibrate(Quantiles{Mean: 0.02, P50: 0.02, P95: 0.02})
	assert.Equal(t, 0.02, in.Compute)
	assert.InDelta(t, 0.2, in.Jitter, 1e-12)
}
