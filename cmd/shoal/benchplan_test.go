package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBenchPlan predicts a 16-worker job with the compute and optimizer
// given: every mode and server count gets a row, and the fastest is
// named; --json gives the same setups as objects.
func TestBenchPlan(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	args := []string{"bench", "plan", "--workers", "16", "--nic-gbps", "10", "--compute", "2ms", "--apply-gbps", "4", "--servers", "1,4"}
	out, err := exec.CommandContext(ctx, shoalBin, args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	text := string(out)
	assert.Contains(t, text, "mlp 784-256-128-10 (0.9 MB), 16 workers of batch 64, NICs of 10 Gbit/s")
	assert.Contains(t, text, "compute 2.00 ms a step, optimizer 4.00 GB/s")
	// Each PS mode at each server count, and again with a server on
	// every worker's host (the colocated layout, by default).
	for _, row := range [][2]string{{"async", "1"}, {"async", "4"}, {"sync", "1"}, {"sync", "4"}, {"ssp", "1"}, {"ssp", "4"}, {"ring", "-"}, {"ring/tree", "-"}, {"ring/auto", "-"},
		{"async-colo", "16"}, {"sync-colo", "16"}, {"ssp-colo", "16"}} {
		assert.Contains(t, text, fmt.Sprintf("%-12s %7s", row[0], row[1]))
	}
	assert.Contains(t, text, "fastest: ")

	out, err = exec.CommandContext(ctx, shoalBin, append(args, "--json")...).Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 12) // the ring mode thrice (ring, tree, auto), each PS mode colocated
	for _, l := range lines {
		var row struct {
			Mode    string
			Servers int
			Result  struct{ StepSeconds, SamplesPerSec, Efficiency float64 }
		}
		require.NoError(t, json.Unmarshal([]byte(l), &row), l)
		assert.Positive(t, row.Result.StepSeconds, l)
		assert.True(t, row.Result.Efficiency > 0 && row.Result.Efficiency <= 1, l)
	}

	out, err = exec.CommandContext(ctx, shoalBin, "bench", "plan", "--workers", "0").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "--workers 0")
	out, err = exec.CommandContext(ctx, shoalBin, "bench", "plan", "--modes", "sync,fast").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "--modes")
	out, err = exec.CommandContext(ctx, shoalBin, "bench", "plan", "--workers", "8", "--colocated-servers", "16").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "16 servers on 8 workers' hosts, want at most one a worker")
}

// TestBenchPlanLocalSteps: --local-steps adds each sync and async setup
// again with local steps, whose traffic per step is 1/H of the other's;
// --target, which cannot emulate them, is refused with it.
func TestBenchPlanLocalSteps(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	args := []string{"bench", "plan", "--workers", "8", "--nic-gbps", "1", "--compute", "2ms", "--apply-gbps", "4", "--servers", "2",
		"--modes", "sync,async,ssp", "--local-steps", "10", "--steps", "20", "--json"}
	out, err := exec.CommandContext(ctx, shoalBin, args...).Output()
	require.NoError(t, err)
	sent := map[string]float64{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var row struct {
			Mode   string
			Result struct{ BytesSent float64 }
		}
		require.NoError(t, json.Unmarshal([]byte(l), &row), l)
		sent[row.Mode] = row.Result.BytesSent
	}
	require.Len(t, sent, 5, "sync, sync-h10, async, async-h10, ssp: %v", sent)
	assert.InEpsilon(t, sent["sync"]/10, sent["sync-h10"], 1e-9)
	assert.InEpsilon(t, sent["async"]/10, sent["async-h10"], 1e-9)

	// --fragments makes those rows streaming fragments: the same bytes
	// per step, in F times as many exchanges of 1/F.
	out, err = exec.CommandContext(ctx, shoalBin, append(args, "--fragments", "5")...).Output()
	require.NoError(t, err)
	frags := map[string]float64{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var row struct {
			Mode   string
			Result struct{ BytesSent float64 }
		}
		require.NoError(t, json.Unmarshal([]byte(l), &row), l)
		frags[row.Mode] = row.Result.BytesSent
	}
	require.Contains(t, frags, "sync-h10-f5", "%v", frags)
	require.Contains(t, frags, "async-h10-f5", "%v", frags)
	assert.InEpsilon(t, sent["sync-h10"], frags["sync-h10-f5"], 1e-6)
	assert.InEpsilon(t, sent["async-h10"], frags["async-h10-f5"], 1e-6)

	out, err = exec.CommandContext(ctx, shoalBin, "bench", "plan", "--local-steps", "10", "--fragments", "5", "--target", "0.8").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "--fragments 5 with --target: the emulator has no streaming fragments")
}

// TestBenchPlanTimeToTargetWithLocalSteps: --target emulates the
// local-steps setups too (DiLoCo: the shards' outer optimizer from
// --outer-*), each under its own label, beside the setups without.
func TestBenchPlanTimeToTargetWithLocalSteps(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	args := []string{"bench", "plan", "--dataset", "synthetic", "--hidden", "16", "--workers", "4", "--servers", "1", "--compute", "1ms",
		"--apply-gbps", "4", "--epochs", "2", "--target", "0.5", "--modes", "sync,async", "--local-steps", "2",
		"--outer-optimizer", "sgd", "--outer-lr", "1", "--outer-momentum", "0", "--update-rule", "average", "--json"}
	out, err := exec.CommandContext(ctx, shoalBin, args...).Output()
	require.NoError(t, err, "%s", out)
	epochs := map[string]float64{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var row struct {
			Mode   string
			Target float64 `json:"target_accuracy"`
			Epochs float64 `json:"epochs_to_target"`
			Final  float64 `json:"final_accuracy"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &row), l)
		if row.Target != 0 {
			epochs[row.Mode] = row.Epochs
			assert.Positive(t, row.Epochs, "%s reaches 50%% on the synthetic set (final %.3f)", row.Mode, row.Final)
		}
	}
	assert.Len(t, epochs, 4, "sync, async, sync-h2 and async-h2 each emulated: %v", epochs)
	assert.Contains(t, epochs, "sync-h2")
	assert.Contains(t, epochs, "async-h2")
}

// TestBenchPlanTimeToTarget: --target emulates each mode's fastest setup
// and times its epochs to the target at its simulated speed; the ring is
// emulated as sync, so both need the same epochs.
func TestBenchPlanTimeToTarget(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	args := []string{"bench", "plan", "--dataset", "synthetic", "--hidden", "16", "--workers", "4", "--servers", "1,2", "--compute", "1ms",
		"--apply-gbps", "4", "--epochs", "1", "--target", "0.5"}
	out, err := exec.CommandContext(ctx, shoalBin, args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	text := string(out)
	assert.Contains(t, text, "time to 50.0% test accuracy on synthetic")
	assert.Contains(t, text, "first to 50.0%: ")
	assert.NotContains(t, text, "which this does not price in")

	out, err = exec.CommandContext(ctx, shoalBin, append(args, "--json")...).Output()
	require.NoError(t, err)
	epochs := map[string]float64{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var row struct {
			Mode   string
			Target float64 `json:"target_accuracy"`
			Epochs float64 `json:"epochs_to_target"`
			Secs   float64 `json:"seconds_to_target"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &row), l)
		if row.Target == 0 {
			continue // a setup's row
		}
		assert.Positive(t, row.Epochs, "%s reaches 50%% on the synthetic set within an epoch", row.Mode)
		assert.Positive(t, row.Secs)
		epochs[row.Mode] = row.Epochs
	}
	assert.Len(t, epochs, 4)
	assert.Equal(t, epochs["sync"], epochs["ring"], "the ring trains as sync does")

	// --update-rule: the shards' rule of async and ssp's emulations.
	out, err = exec.CommandContext(ctx, shoalBin, append(args, "--json", "--modes", "async,ssp,sync", "--update-rule", "staleness")...).Output()
	require.NoError(t, err)
	rules := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var row struct {
			Mode   string
			Target float64 `json:"target_accuracy"`
			Update string  `json:"update_rule"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &row), l)
		if row.Target != 0 {
			rules[row.Mode] = row.Update
		}
	}
	assert.Equal(t, map[string]string{"async": "staleness", "ssp": "staleness", "sync": ""}, rules)

	for _, tc := range []struct{ args, want string }{
		{"--target 1.5", "want a test accuracy in [0, 1)"},
		{"--target 0.8 --layers ../../sim/models/vgg16.txt --compute 1s", "only Shoal's own models can be emulated"},
	} {
		out, err := exec.CommandContext(ctx, shoalBin, append([]string{"bench", "plan"}, strings.Fields(tc.args)...)...).CombinedOutput()
		assert.Error(t, err, tc.args)
		assert.Contains(t, string(out), tc.want, tc.args)
	}
}

// --model big is the harness's 25.4M-parameter MLP at batch 16, as shoal
// bench train --models names it.
func TestBenchPlanTakesTheHarnessModels(t *testing.T) {
	cfg, err := parseBenchPlan([]string{"--model", "big", "--compute", "1ms"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "mlp 784-16384-768-10", cfg.ModelName)
	assert.Equal(t, 16, cfg.Sim.Batch)
	assert.EqualValues(t, 25_452_810, cfg.Sim.VectorBytes()/4)
}

// With --ranks-per-host above 1 the ring mode gets a fourth row,
// ring/hierarchical; a host of no ranks is refused, saying what is
// wanted.
func TestBenchPlanHierarchical(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	args := []string{"bench", "plan", "--workers", "16", "--modes", "ring", "--nic-gbps", "10", "--compute", "2ms", "--apply-gbps", "4", "--ranks-per-host", "4", "--intra-gbps", "80", "--intra-latency", "2us"}
	out, err := exec.CommandContext(ctx, shoalBin, args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "ring/hierarchical")
	out, err = exec.CommandContext(ctx, shoalBin, "bench", "plan", "--ranks-per-host", "0").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "--ranks-per-host 0")
	assert.Contains(t, string(out), "want at least 1 rank a host")
}

// TestBenchAllreduceHostsBehindANIC: on 2 fake hosts of 2 ranks behind
// the NIC model, every algorithm's results are checked correct, and the
// hosts' NIC files are gone afterwards.
func TestBenchAllreduceHostsBehindANIC(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	tmp := t.TempDir()
	for _, alg := range []string{"ring", "hierarchical", "tree"} {
		cmd := exec.CommandContext(ctx, shoalBin, "bench", "allreduce", "--np", "4", "--hosts", "2", "--nic-gbps", "2", "--sizes", "4KiB,1MiB",
			"--iters", "2", "--warmup", "1", "--allreduce-algorithm", alg, "--json")
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		out, err := cmd.Output()
		require.NoError(t, err, alg)
		var n int
		for l := range strings.Lines(string(out)) {
			var r struct{ Correct bool }
			require.NoError(t, json.Unmarshal([]byte(l), &r), l)
			assert.True(t, r.Correct, "%s: %s", alg, l)
			n++
		}
		assert.Equal(t, 2, n, "%s: one record a size", alg)
	}
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "the hosts' NIC files are removed")
}
