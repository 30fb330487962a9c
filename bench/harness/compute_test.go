package harness

import (
	"context"
	"testing"

	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/nn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestComputeResident times a model on a device (the host's
// reference device here, a GPU's Device in production) through the
// resident step, and refuses to observe it.
func TestComputeResident(t *testing.T) {
	dm, err := nn.NewOnDevice(nn.Spec{Arch: "mlp", Hidden: []int{16}}, nn.NewHostDevice(nn.NewCPU()))
	require.NoError(t, err)
	defer dm.Close()
	rec, err := Compute(context.Background(), dm, ComputeConfig{Batch: 8, Warmup: 1, Steps: 3, Seed: 1})
	require.NoError(t, err)
	assert.Equal(t, 3, rec.Steps)
	assert.Positive(t, rec.SamplesPerSec)
	// The device holds weights the steps moved from their initial values.
	got, init := make([]float32, dm.Layout().Size()), make([]float32, dm.Layout().Size())
	require.NoError(t, dm.Store(got))
	dm.Init(init, 1)
	assert.NotEqual(t, init, got)

	_, err = Compute(context.Background(), dm, ComputeConfig{Batch: 8, Warmup: 1, Steps: 3, Seed: 1,
		Observer: Observer{Metrics: metrics.NewWorker(metrics.NewRegistry(), 0, metrics.WorkerSources{})}})
	assert.ErrorContains(t, err, "--metrics and --timeline: not with a model on host/")
}
