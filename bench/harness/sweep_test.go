package harness

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/nn"
)

func TestParseSweep(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []SweepModel
		err      string
	}{
		{"two models", "mlp:64,256 cnn:64", []SweepModel{{"mlp", []int{64, 256}}, {"cnn", []int{64}}}, ""},
		{"semicolons", "cnn:2;mlp:1", []SweepModel{{"cnn", []int{2}}, {"mlp", []int{1}}}, ""},
		{"no batches", "mlp:", nil, `"mlp:": want a model (mlp or cnn), a colon and batches`},
		{"no colon", "mlp", nil, `"mlp": want a model`},
		{"bad model", "rnn:4", nil, `"rnn:4": want a model`},
		{"bad batch", "mlp:4,x", nil, `batch "x" of mlp: want a positive integer`},
		{"zero batch", "mlp:0", nil, `batch "0" of mlp`},
		{"empty", " ", nil, "no model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSweep(tc.in)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	ps, err := ParsePrecisions("fp32, bf16,fp16")
	require.NoError(t, err)
	assert.Equal(t, []nn.Precision{nn.FP32, nn.BF16, nn.FP16}, ps)
	_, err = ParsePrecisions("fp32,fp8")
	assert.ErrorContains(t, err, `--precisions "fp32,fp8": precision "fp8"`)
}

// hostBuild builds each model on the host's reference device, as a GPU's
// would be built, counting the models built and freed.
func hostBuild(built, freed *int) func(nn.Spec) (Built, error) {
	return func(spec nn.Spec) (Built, error) {
		dm, err := nn.NewOnDevice(spec, nn.NewHostDevice(nn.NewCPU()))
		if err != nil {
			return Built{}, err
		}
		*built++
		return Built{Model: dm, Where: "host", Why: "test", Threads: 1, Close: func() { *freed++; dm.Close() }}, nil
	}
}

// TestSweep times every point in the order a run cut short wants (rounds
// outermost), each model built once, in each precision on a device.
func TestSweep(t *testing.T) {
	cfg := SweepConfig{Models: []SweepModel{{"mlp", []int{2, 4}}, {"cnn", []int{1}}}, Hidden: []int{8},
		Precisions: []nn.Precision{nn.FP32, nn.BF16}, Rounds: 2, Warmup: 1, Steps: 1, Seed: 1}
	var built, freed int
	var got []string
	err := Sweep(context.Background(), cfg, hostBuild(&built, &freed), func(r ComputeRecord) error {
		got = append(got, fmt.Sprintf("%d %s%v %d %s", r.Round, r.Model, r.Hidden, r.Batch, r.Precision))
		assert.Positive(t, r.SamplesPerSec)
		assert.Equal(t, "host", r.Backend)
		assert.Equal(t, "off: host/cpu/gonum does not capture graphs", r.Graphs)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{
		"1 mlp[8] 2 fp32", "1 mlp[8] 4 fp32", "1 mlp[8] 2 bf16", "1 mlp[8] 4 bf16", "1 cnn[] 1 fp32", "1 cnn[] 1 bf16",
		"2 mlp[8] 2 fp32", "2 mlp[8] 4 fp32", "2 mlp[8] 2 bf16", "2 mlp[8] 4 bf16", "2 cnn[] 1 fp32", "2 cnn[] 1 bf16",
	}, got)
	assert.Equal(t, 2, built)
	assert.Equal(t, 2, freed)
}

func TestSweepErrors(t *testing.T) {
	base := SweepConfig{Models: []SweepModel{{"mlp", []int{2}}}, Hidden: []int{8}, Precisions: []nn.Precision{nn.FP32}, Rounds: 1, Steps: 1, Seed: 1}
	never := func(nn.Spec) (Built, error) { return Built{}, errors.New("not built") }

	t.Run("config", func(t *testing.T) {
		cfg := base
		cfg.Rounds = 0
		assert.EqualError(t, Sweep(context.Background(), cfg, never, nil), "--rounds 0: want at least 1")
		cfg = base
		cfg.Precisions = nil
		assert.EqualError(t, Sweep(context.Background(), cfg, never, nil), "--precisions: none")
		cfg = base
		cfg.Steps = 0
		assert.ErrorContains(t, Sweep(context.Background(), cfg, never, nil), "--steps 0")
	})

	t.Run("mixed precision on the CPU", func(t *testing.T) {
		cfg := base
		cfg.Precisions = []nn.Precision{nn.FP32, nn.BF16}
		freed := 0
		cpu := func(spec nn.Spec) (Built, error) {
			m, err := nn.New(spec, nn.NewCPU())
			return Built{Model: m, Where: "cpu/gonum", Threads: 1, Close: func() { freed++ }}, err
		}
		err := Sweep(context.Background(), cfg, cpu, func(ComputeRecord) error { t.Fatal("nothing is timed"); return nil })
		assert.EqualError(t, err, "--precisions bf16: mixed precision runs on a GPU, but mlp computes on cpu/gonum")
		assert.Equal(t, 1, freed)
	})

	t.Run("emit stops it", func(t *testing.T) {
		var built, freed, n int
		stop := errors.New("stop")
		cfg := base
		cfg.Rounds = 3
		err := Sweep(context.Background(), cfg, hostBuild(&built, &freed), func(ComputeRecord) error { n++; return stop })
		assert.ErrorIs(t, err, stop)
		assert.Equal(t, 1, n)
		assert.Equal(t, 1, freed)
	})

	t.Run("canceled", func(t *testing.T) {
		var built, freed int
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := Sweep(ctx, base, hostBuild(&built, &freed), func(ComputeRecord) error { return nil })
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorContains(t, err, "mlp at batch 2 in fp32, round 1: ")
	})
}
