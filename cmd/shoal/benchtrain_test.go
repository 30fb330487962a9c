package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/launch"
)

// TestBenchTrain runs a small grid through the real binary on synthetic
// data with the NIC model on, and checks what it wrote: results that
// validate against the schema, one record per run with its measurements,
// the report and the plots; then bench diff of the file against itself.
func TestBenchTrain(t *testing.T) {
	out := t.TempDir()
	cmd := exec.CommandContext(ctxT(t, 5*time.Minute), shoalBin, "bench", "train", "--dataset", "synthetic", "--models", "mlp",
		"--modes", "sync,ring", "--workers", "1,2", "--servers", "1", "--steps", "12", "--eval-every", "5", "--target-accuracy", "0.2",
		"--nic-gbps", "2", "--peers", "", "--out", out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	t.Log(stdout.String())
	assert.Contains(t, stdout.String(), "NIC model: 2 Gbit/s configured")

	res, err := bench.Load(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	require.NotNil(t, res.Shaper)
	assert.Equal(t, 2.0, res.Shaper.ConfiguredGbps)
	assert.Equal(t, bench.SchemaVersion, res.Schema)
	assert.Equal(t, []string{"mlp/sync/w1/s1/nic2", "mlp/sync/w2/s1/nic2", "mlp/ring/w1/s0/nic2", "mlp/ring/w2/s0/nic2"}, ids(res.Runs))
	for _, r := range res.Runs {
		require.Empty(t, r.Error, r.ID)
		assert.Equal(t, int64(12), r.Steps, r.ID)
		assert.Positive(t, r.SamplesPerSec, r.ID)
		assert.Positive(t, r.StepTime.Step.P50, r.ID)
		assert.Positive(t, r.StepTime.Compute.Mean, r.ID)
		assert.GreaterOrEqual(t, r.StepTime.Step.P95, r.StepTime.Step.P50, r.ID)
		assert.Equal(t, "shoal", r.Command[0], r.ID)
		// Worker 0 evaluated after steps 5, 10 and the last.
		require.Len(t, r.Curve, 3, r.ID)
		assert.Equal(t, []int64{5, 10, 12}, []int64{r.Curve[0].Step, r.Curve[1].Step, r.Curve[2].Step})
		if r.Workers == 1 && r.Mode == "ring" {
			assert.Zero(t, r.BytesSentPerStep, "one rank sends nothing")
			assert.Nil(t, r.Comm, "one rank has no communication to model")
			continue
		}
		require.NotNil(t, r.Comm, r.ID)
		assert.Positive(t, r.Comm.AnalyticSeconds, r.ID)
		assert.Positive(t, r.Comm.MeasuredSeconds, r.ID)
		// Every step moves at least one vector each way (PS: a push, and
		// the next step's weights with it; ring of 2: 2(N−1)/N = 1
		// vector). The counters are read as a step ends, over the 11
		// steps after the first, and the NIC counts a piece (256 KiB at
		// most) once its write returns, which can be a moment after the
		// server has it: one piece of slack. A PS worker's last step
		// fetches nothing (no step follows it), and the weights of the
		// first counted step came with the uncounted first one: 10
		// vectors in for the 11 steps.
		slack := float64(256<<10) / 11
		in := float64(r.VectorBytes)
		if r.Mode != "ring" {
			in = in * 10 / 11
		}
		assert.GreaterOrEqual(t, r.BytesSentPerStep, float64(r.VectorBytes)-slack, r.ID)
		assert.GreaterOrEqual(t, r.BytesReceivedPerStep, in-slack, r.ID)
		assert.Less(t, r.BytesSentPerStep, 1.1*float64(r.VectorBytes), r.ID)
		if r.Mode != "ring" {
			// And no more: a last step that pulled weights nobody uses
			// would bring 11 vectors for the 11 counted steps.
			assert.Less(t, r.BytesReceivedPerStep, in+0.05*float64(r.VectorBytes), r.ID)
		}
		if r.Workers == 2 {
			require.NotNil(t, r.ScalingEfficiency, r.ID)
		}
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	for _, want := range []string{"## Throughput", "## Step-time breakdown", "## Traffic"} {
		assert.Contains(t, string(report), want)
	}
	pngs, _ := filepath.Glob(filepath.Join(out, "*.png"))
	assert.NotEmpty(t, pngs)
	for _, p := range pngs {
		assert.Contains(t, string(report), filepath.Base(p), "the report embeds %s", p)
	}

	var diff bytes.Buffer
	require.NoError(t, run(ctxT(t, time.Minute), []string{"bench", "diff", filepath.Join(out, "results.json"), filepath.Join(out, "results.json")}, nil, &diff, &diff))
	for _, r := range res.Runs {
		assert.Contains(t, diff.String(), r.ID)
	}
}

func ids(runs []bench.Record) []string {
	var s []string
	for _, r := range runs {
		s = append(s, r.ID)
	}
	return s
}

func TestBenchTrainErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--models", "rnn"}, `unknown model "rnn"`},
		{[]string{"--modes", "gossip"}, `unknown mode "gossip"`},
		{[]string{"--workers", "0"}, `--workers "0"`},
		{[]string{"--nic-gbps", "-1"}, "--nic-gbps -1"},
		{[]string{"--target-accuracy", "2"}, "--target-accuracy 2"},
		{[]string{"--eval-every", "0"}, "--eval-every 0"},
		{[]string{"--local-steps", "-1"}, "--local-steps -1: want 1.."},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(ctxT(t, time.Minute), append([]string{"bench", "train", "--dataset", "synthetic", "--out", t.TempDir()}, tc.args...), nil, &stdout, &stderr)
			require.Error(t, err)
			assert.Contains(t, err.Error()+stderr.String(), tc.want)
		})
	}
	var stdout, stderr bytes.Buffer
	err := run(ctxT(t, time.Minute), []string{"bench", "diff", "only-one.json"}, nil, &stdout, &stderr)
	require.Error(t, err)
	assert.Contains(t, stderr.String(), "want two results.json files")
	err = run(ctxT(t, time.Minute), []string{"bench", "diff", "/nonexistent/a.json", "/nonexistent/b.json"}, nil, &stdout, &stderr)
	assert.ErrorContains(t, err, "/nonexistent/a.json")
}

// TestStopAtAccuracy: with --stop-at-accuracy, a run ends early and
// cleanly once rank 0 measures the target, in every mode: ring ranks agree
// among themselves, PS workers are told by the launcher.
func TestStopAtAccuracy(t *testing.T) {
	for _, mode := range []string{"async", "sync", "ring"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.CommandContext(ctxT(t, 2*time.Minute), shoalBin, "train", "--dataset", "synthetic", "--mode", mode, "--workers", "2",
				"--steps", "100000", "--eval-every", "2", "--stop-at-accuracy", "0.95", "--stats", "--json")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			var sum launch.Result
			require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &sum))
			assert.True(t, sum.StoppedAtTarget)
			assert.Contains(t, stdout.String(), "stopped early")
			require.NotEmpty(t, sum.Curve)
			if mode != "async" {
				// In async mode the other worker runs on while rank 0
				// evaluates, so the shards may be past the target by
				// rank 0's first evaluation; in lockstep modes they are not.
				require.Greater(t, len(sum.Curve), 1, "the target is not reached at the first evaluation")
			}
			last := sum.Curve[len(sum.Curve)-1]
			assert.GreaterOrEqual(t, last.Accuracy, 0.95)
			for _, p := range sum.Curve[:len(sum.Curve)-1] {
				assert.Less(t, p.Accuracy, 0.95, "it went on past the target")
			}
			assert.Less(t, sum.Steps, int64(1000), "it stopped early")
			assert.Empty(t, sum.FailedWorkers)
		})
	}
}

// TestBenchTrainLocalSteps: with --local-steps the harness runs each sync
// setup again with local steps, records them under their own id with the
// bytes each worker sent per sample, and the DiLoCo run sends far fewer.
func TestBenchTrainLocalSteps(t *testing.T) {
	out := t.TempDir()
	cmd := exec.CommandContext(ctxT(t, 5*time.Minute), shoalBin, "bench", "train", "--dataset", "synthetic", "--models", "mlp",
		"--modes", "sync,ring", "--workers", "2", "--servers", "1", "--steps", "20", "--eval-every", "10", "--local-steps", "5",
		"--nic-gbps", "0", "--peers", "", "--out", out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	t.Log(stdout.String())
	res, err := bench.Load(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	require.Equal(t, []string{"mlp/sync/w2/s1", "mlp/sync/w2/s1/h5", "mlp/ring/w2/s0"}, ids(res.Runs))
	sync, local := res.Runs[0], res.Runs[1]
	for _, r := range res.Runs {
		require.Empty(t, r.Error, r.ID)
		assert.Equal(t, int64(20), r.Steps, r.ID)
		assert.Positive(t, r.BytesSentPerSample, r.ID)
		assert.InDelta(t, r.BytesSentPerStep/float64(r.Batch), r.BytesSentPerSample, 1e-9, r.ID)
	}
	assert.Zero(t, sync.LocalSteps)
	assert.Equal(t, 5, local.LocalSteps)
	assert.Contains(t, local.Command, "--local-steps")
	// One push in 5 steps (4 rounds, the first uncounted): under a
	// quarter of sync's bytes per sample, where H/2 would be 2.5× fewer.
	assert.Less(t, local.BytesSentPerSample, sync.BytesSentPerSample/4, "sync %.0f B/sample, H=5 %.0f", sync.BytesSentPerSample, local.BytesSentPerSample)
	assert.Contains(t, stdout.String(), "mlp/sync/w2/s1/h5: ")
	assert.Contains(t, stdout.String(), "B/sample")
}
