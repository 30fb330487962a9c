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

func TestComputeRecordOnTheCPU(t *testing.T) {
	spec := nn.Spec{Arch: "mlp", Hidden: []int{8}}
	model, where, why, threads, err := CPUModel(spec, "gonum", 4)
	require.NoError(t, err)
	assert.Equal(t, "cpu/gonum", where)
	assert.Equal(t, "gonum: asked for with --backend gonum", why)
	assert.Equal(t, 1, threads, "the gonum path is serial")
	_, _, _, _, err = CPUModel(spec, "mkl", 1)
	assert.EqualError(t, err, `--backend "mkl": want auto, openblas or gonum`)

	rec, err := Compute(context.Background(), model, ComputeConfig{Batch: 2, Steps: 1, Seed: 1})
	require.NoError(t, err)
	rec.Complete(nn.Spec{Arch: "cnn"}, threads, where, why, model, nn.FP32)
	assert.Equal(t, []int{}, rec.Hidden, "never null in --json")
	assert.Equal(t, "fp32", rec.Precision)
	assert.Regexp(t, `^mlp 784-8-10, batch 2, 1 thread\(s\), cpu/gonum: \d+ samples/s \(1 steps in \d+\.\d{3} s\)\ngonum: asked for with --backend gonum\n$`, rec.Text("mlp 784-8-10"))
	rec.Precision = "bf16"
	assert.Contains(t, rec.Text("m"), "cpu/gonum, bf16: ")
}
