package main

import (
	"encoding/json"
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
	for _, row := range []string{"async        1", "async        4", "sync         1", "sync         4", "ssp          1", "ssp          4", "ring         -"} {
		assert.Contains(t, text, row)
	}
	assert.Contains(t, text, "fastest: ")

	out, err = exec.CommandContext(ctx, shoalBin, append(args, "--json")...).Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 7)
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
}
