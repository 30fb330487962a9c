package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/bench/harness"
)

// emulateJSON runs shoal bench emulate with args and --json and returns
// its jobs.
func emulateJSON(t *testing.T, args ...string) []harness.EmulateRun {
	t.Helper()
	ctx := ctxT(t, 4*time.Minute)
	cmd := exec.CommandContext(ctx, shoalBin, append([]string{"bench", "emulate", "--json"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	var runs []harness.EmulateRun
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r harness.EmulateRun
		require.NoError(t, json.Unmarshal([]byte(l), &r), l)
		runs = append(runs, r)
	}
	return runs
}

// TestTheEmulatorMatchesRealRuns is the emulator's check against the
// system it stands for, real shoal train runs (processes, gRPC, the
// order this machine's scheduling gives) of a job on Fashion-MNIST at 2
// and 4 workers.
//
// Async and SSP: the real run records its pushes (--record-pushes) and
// the emulator replays that order (--replay): every push has the
// staleness it had in the real run, and the final test accuracy is the
// real run's. The order itself is the machine's: the same job here had a
// mean staleness of 2.3 one day and 3.0 another, and 1.9 points of
// accuracy between them at N = 4, which is why the simulated schedules
// of shoal bench emulate are not compared with real runs here: how far
// a real run's order is from a simulated one is this machine's load, not
// the emulator. Sync is one computation in any order: the simulated
// schedule gives the real run's accuracy.
func TestTheEmulatorMatchesRealRuns(t *testing.T) {
	if _, err := os.Stat(fashionDir + "/train-images-idx3-ubyte.gz"); err != nil {
		t.Skipf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	job := []string{"--epochs", "2", "--hidden", "128", "--lr", "0.02", "--seed", "1"}
	for _, n := range []int{2, 4} {
		for _, mode := range []string{"sync", "async", "ssp"} {
			// One GEMM thread, as the emulator's workers compute.
			args := append([]string{"--mode", mode, "--workers", fmt.Sprint(n), "--threads", "1"}, job...)
			if mode == "ssp" {
				args = append(args, "--staleness", "1") // the other modes refuse it
			}
			dir := t.TempDir()
			var e []harness.EmulateRun
			if mode == "sync" {
				r, _ := trainJSON(t, nil, args...)
				e = emulateJSON(t, append([]string{"--modes", mode, "--workers", fmt.Sprint(n)}, job...)...)
				require.Len(t, e, 1)
				t.Logf("N=%d %s: test accuracy %.4f emulated, %.4f real", n, mode, e[0].Accuracy, r.TestAccuracy)
				assert.InDelta(t, r.TestAccuracy, e[0].Accuracy, 0.002, "N=%d %s: the emulated job's final test accuracy against the real run's", n, mode)
				continue
			}
			r, _ := trainJSON(t, nil, append(args, "--record-pushes", dir)...)
			e = emulateJSON(t, append([]string{"--replay", dir}, job...)...)
			require.Len(t, e, 1)
			t.Logf("N=%d %s: test accuracy %.4f replayed (%d updates, staleness mean %.2f), %.4f real (staleness mean %.2f)",
				n, mode, e[0].Accuracy, e[0].Updates, e[0].Pushes.Mean(), r.TestAccuracy, r.Staleness.Mean())
			assert.Equal(t, mode, e[0].Mode)
			assert.Equal(t, n, e[0].Workers)
			assert.Equal(t, r.Staleness, e[0].Pushes, "N=%d %s: every push's staleness, replayed against real", n, mode)
			assert.InDelta(t, r.TestAccuracy, e[0].Accuracy, 0.002, "N=%d %s: the replayed run's final test accuracy against the real run's", n, mode)
		}
	}
}

// TestBenchEmulateWritesPlots: --out writes results.json and one plot per
// worker count.
func TestBenchEmulateWritesPlots(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	dir := t.TempDir()
	out, err := exec.CommandContext(ctx, shoalBin, "bench", "emulate", "--dataset", "synthetic", "--workers", "2,8", "--modes", "async,ssp,sync",
		"--staleness", "1,4", "--epochs", "1", "--hidden", "16", "--compute", "1ms", "--out", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	text := string(out)
	for _, row := range []string{"async        staleness N=2", "ssp    s=1   average   N=2", "ssp    s=4   average   N=8", "sync                   N=8"} {
		assert.Contains(t, text, row)
	}
	for _, f := range []string{"results.json", "accuracy-n2.png", "accuracy-n8.png"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.Positive(t, st.Size())
	}
	var res struct {
		Simulated bool
		Emulated  []harness.EmulateRun
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &res))
	assert.True(t, res.Simulated)
	assert.Len(t, res.Emulated, 8)
}

// TestBenchEmulateSweepsTheRules: --update-rules emulates async and ssp
// once per rule, sync once, and names each job's rule.
func TestBenchEmulateSweepsTheRules(t *testing.T) {
	runs := emulateJSON(t, "--dataset", "synthetic", "--workers", "4", "--modes", "async,ssp,sync", "--staleness", "2", "--update-rules", "full,staleness,dcasgd",
		"--epochs", "1", "--hidden", "16", "--compute", "1ms")
	var got []string
	for _, r := range runs {
		got = append(got, strings.TrimSpace(r.Mode+" "+r.Update))
		assert.Equal(t, 4, r.Workers)
	}
	assert.Equal(t, []string{"async full", "async staleness", "async dcasgd", "ssp full", "ssp staleness", "ssp dcasgd", "sync"}, got)
}

// TestBenchEmulateSweepsTheLocalSteps: --local-steps emulates every sync
// and async job again with each H (ssp once), one update a round.
func TestBenchEmulateSweepsTheLocalSteps(t *testing.T) {
	runs := emulateJSON(t, "--dataset", "synthetic", "--workers", "2", "--modes", "async,ssp,sync", "--staleness", "2", "--local-steps", "4,100",
		"--update-rules", "average", "--outer-optimizer", "sgd", "--outer-lr", "1", "--epochs", "1", "--hidden", "16", "--compute", "1ms")
	var got []string
	updates := map[string]int64{}
	for _, r := range runs {
		label := strings.TrimSpace(fmt.Sprintf("%s H=%d", r.Mode, r.LocalSteps))
		got = append(got, label)
		updates[label] = r.Updates
		assert.Greater(t, r.Accuracy, 0.5, "%s learns (10 classes)", label)
	}
	assert.Equal(t, []string{"async H=0", "async H=4", "async H=100", "ssp H=0", "sync H=0", "sync H=4", "sync H=100"}, got)
	steps := updates["sync H=0"]
	assert.Equal(t, (steps+3)/4, updates["sync H=4"], "sync: one update a round of 4 steps")
	assert.Equal(t, 2*((steps+3)/4), updates["async H=4"], "async: one update per worker and round")
}

func TestBenchEmulateErrors(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	for _, tc := range []struct{ args, want string }{
		{"--modes ring", "only the parameter-server modes are emulated"},
		{"--workers 0", `--workers "0": want positive integers`},
		{"--staleness x", `--staleness "x": want positive integers`},
		{"--epochs 0", "want batch, epochs, servers >= 1"},
		{"--replay /nonexistent --workers 2 --jitter 1", "--replay /nonexistent with --jitter, --workers: a replay follows the recorded run's"},
		{"--replay /nonexistent", "--replay /nonexistent: no worker-*.pushes.json in it"},
		{"--update-rules full,fast", `--update-rules: update rule "fast": unknown`},
		{"--update-rules dcasgd --dc-lambda -1", "--dc-lambda -1: want a finite value >= 0"},
		{"--replay /nonexistent --update-rules full,average", "a replay is one run; give one rule"},
		{"--local-steps 10,0", `--local-steps "10,0": want positive integers`},
		{"--local-steps 2000000", "--local-steps 2000000: want 1..1048576"},
		{"--local-steps 10 --outer-lr -1", "--outer-optimizer, --outer-lr, --outer-momentum:"},
		{"--replay /nonexistent --local-steps 10", "--replay /nonexistent with --local-steps 10: a recording of gradient pushes cannot order pseudo-gradients"},
	} {
		out, err := exec.CommandContext(ctx, shoalBin, append([]string{"bench", "emulate", "--dataset", "synthetic"}, strings.Fields(tc.args)...)...).CombinedOutput()
		assert.Error(t, err, tc.args)
		assert.Contains(t, string(out), tc.want, tc.args)
	}
}

// TestARecordingReplacesTheLastOne: shoal train --record-pushes into a
// folder that holds an earlier, larger run's recording removes it, so the
// replay finds this run alone and gives its accuracy.
func TestARecordingReplacesTheLastOne(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "worker-3.pushes.json")
	require.NoError(t, os.WriteFile(stale, []byte(`{"rank":3,"world_size":4}`), 0o644))
	job := []string{"--dataset", "synthetic", "--epochs", "1", "--hidden", "16", "--seed", "3"}
	r, _ := trainJSON(t, nil, append([]string{"--mode", "ssp", "--staleness", "2", "--workers", "2", "--threads", "1", "--record-pushes", dir}, job...)...)
	assert.NoFileExists(t, stale)
	e := emulateJSON(t, append([]string{"--replay", dir}, job...)...)
	require.Len(t, e, 1)
	assert.Equal(t, harness.EmulateRun{Mode: "ssp", Workers: 2, Staleness: 2}, harness.EmulateRun{Mode: e[0].Mode, Workers: e[0].Workers, Staleness: e[0].Staleness})
	assert.Equal(t, r.Staleness, e[0].Pushes)
	assert.InDelta(t, r.TestAccuracy, e[0].Accuracy, 0.002)
}
