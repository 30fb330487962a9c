package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/bench"
)

// TestBenchSimulate predicts a small grid: the results load under the
// harness's schema, every record is marked simulated under the ID bench
// train would give it, and the report and plots say they are simulated. Simulated results are refused
// as a calibration.
func TestBenchSimulate(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	dir := t.TempDir()
	out, err := exec.CommandContext(ctx, shoalBin, "bench", "simulate", "--models", "mlp", "--modes", "ring,sync,async-overlap", "--workers", "1,2",
		"--steps", "20", "--jitter", "0", "--apply-gbps", "1000", "--out", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	res, err := bench.Load(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	assert.True(t, res.Simulated)
	var ids []string
	for _, r := range res.Runs {
		ids = append(ids, r.ID)
		assert.True(t, r.Simulated, r.ID)
		assert.Positive(t, r.StepTime.Compute.Mean, r.ID)
	}
	assert.ElementsMatch(t, []string{"mlp/ring/w1/s0/nic1", "mlp/ring/w2/s0/nic1", "mlp/sync/w1/s1/nic1", "mlp/sync/w2/s1/nic1",
		"mlp/async-overlap/w1/s1/nic1", "mlp/async-overlap/w2/s1/nic1"}, ids)
	for _, r := range res.Runs {
		if r.ID != "mlp/ring/w2/s0/nic1" {
			continue
		}
		// Fusion overlaps backward with the allreduce: the step is no
		// longer than the two one after the other, no shorter than either.
		ring := float64(r.VectorBytes) / (1e9 / 8)
		assert.LessOrEqual(t, r.StepTime.Step.Mean, r.StepTime.Compute.Mean+ring*1.0001)
		assert.GreaterOrEqual(t, r.StepTime.Step.Mean, max(r.StepTime.Compute.Mean, ring))
		require.NotNil(t, r.ScalingEfficiency, "the 1-worker run gives the efficiency")
	}
	report, err := os.ReadFile(filepath.Join(dir, "report.md"))
	require.NoError(t, err)
	assert.Contains(t, string(report), "**Simulated**")
	assert.FileExists(t, filepath.Join(dir, "throughput-mlp.png"))

	out, err = exec.CommandContext(ctx, shoalBin, "bench", "simulate", "--calibrate", filepath.Join(dir, "results.json"), "--out", t.TempDir()).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "these results are simulated")
	// A measured run's workers start when it recorded they did: here the
	// second of two 5 s after the first, so the job ends 5 s later (less
	// a few ms: its first pull and push no longer share the shard's NIC).
	for _, late := range []float64{0, 5} {
		measured := *res
		measured.Simulated = false
		measured.Runs = nil
		for _, r := range res.Runs {
			if r.ID == "mlp/sync/w2/s1/nic1" {
				r.Simulated, r.StartOffsets = false, []float64{0, late}
				measured.Runs = append(measured.Runs, r)
			}
		}
		require.Len(t, measured.Runs, 1)
		calib := filepath.Join(t.TempDir(), "results.json")
		js, err := json.Marshal(&measured)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(calib, js, 0o644))
		pdir := t.TempDir()
		out, err = exec.CommandContext(ctx, shoalBin, "bench", "simulate", "--calibrate", calib, "--models", "mlp", "--modes", "sync", "--workers", "2",
			"--steps", "20", "--jitter", "0", "--apply-gbps", "1000", "--out", pdir).CombinedOutput()
		require.NoError(t, err, "%s", out)
		p, err := bench.Load(filepath.Join(pdir, "results.json"))
		require.NoError(t, err)
		require.Len(t, p.Runs, 1)
		assert.InEpsilon(t, measured.Runs[0].StepTime.Compute.Mean, p.Runs[0].StepTime.Compute.Mean, 1e-9, "the compute, calibrated")
		assert.InDelta(t, measured.Runs[0].TrainSeconds+late, p.Runs[0].TrainSeconds, 0.05, "second worker %g s late", late)
	}
	// A grid in epochs: each worker's steps are its batches of its share
	// of the training set, so 2 workers take half the steps of one.
	dir = t.TempDir()
	out, err = exec.CommandContext(ctx, shoalBin, "bench", "simulate", "--models", "mlp", "--modes", "async", "--workers", "1,2",
		"--epochs", "1", "--dataset", "synthetic", "--jitter", "0", "--apply-gbps", "1000", "--out", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	res, err = bench.Load(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	require.Len(t, res.Runs, 2)
	one, two := res.Runs[0], res.Runs[1]
	require.Equal(t, []int{1, 2}, []int{one.Workers, two.Workers})
	assert.Positive(t, two.Steps)
	assert.InDelta(t, float64(one.Steps), float64(2*two.Steps), 1, "steps of one worker %d, of each of two %d", one.Steps, two.Steps)

	// The host's CPU per byte is fitted to a loopback async run: one twice
	// as slow as the simulator's with no cost gives a cost, and that cost
	// makes the prediction of a run through the NIC slower. A file with
	// no such run cannot be fitted to.
	dir = t.TempDir()
	out, err = exec.CommandContext(ctx, shoalBin, "bench", "simulate", "--models", "mlp", "--modes", "async", "--workers", "2", "--nic-gbps", "0",
		"--steps", "20", "--jitter", "0", "--apply-gbps", "1000", "--out", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "CPU per byte of a PS transfer: not modelled")
	loop, err := bench.Load(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	require.Len(t, loop.Runs, 1)
	require.Equal(t, "mlp/async/w2/s1", loop.Runs[0].ID)
	// measuredAs writes the loopback run, as if measured, changed by edit.
	measuredAs := func(edit func(*bench.Record)) string {
		measured := *loop
		measured.Simulated = false
		r := loop.Runs[0]
		r.Simulated = false
		edit(&r)
		measured.Runs = []bench.Record{r}
		calib := filepath.Join(t.TempDir(), "results.json")
		js, err := json.Marshal(&measured)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(calib, js, 0o644))
		return calib
	}
	predict := func(slower float64) (float64, string) {
		calib := measuredAs(func(r *bench.Record) { r.StepTime.Step.Mean *= slower })
		pdir := t.TempDir()
		out, err := exec.CommandContext(ctx, shoalBin, "bench", "simulate", "--calibrate", calib, "--models", "mlp", "--modes", "async", "--workers", "2",
			"--steps", "20", "--jitter", "0", "--apply-gbps", "1000", "--out", pdir).CombinedOutput()
		require.NoError(t, err, "%s", out)
		p, err := bench.Load(filepath.Join(pdir, "results.json"))
		require.NoError(t, err)
		require.Len(t, p.Runs, 1)
		return p.Runs[0].StepTime.Step.Mean, string(out)
	}
	free, said := predict(1)
	assert.Contains(t, said, "CPU per byte of a PS transfer: 0.000 ns, fitted to mlp/async/w2/s1")
	costly, said := predict(2)
	assert.Regexp(t, `CPU per byte of a PS transfer: [0-9.]+ ns, fitted to mlp/async/w2/s1 of \S+ \([0-9.]+ ms a step\), on a host of \d+ cores`, said)
	assert.NotContains(t, said, "0.000 ns")
	assert.Greater(t, costly, free, "the fitted cost slows the prediction")
	throughNIC := measuredAs(func(r *bench.Record) { r.NICGbps = 1 })
	out, err = exec.CommandContext(ctx, shoalBin, "bench", "simulate", "--cpu-calibrate", throughNIC, "--out", t.TempDir()).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "no async run of 2 or more workers without the NIC model to fit the CPU per byte to")

	out, err = exec.CommandContext(ctx, shoalBin, "bench", "simulate", "--apply-gbps", "-1").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "--apply-gbps -1")
}
