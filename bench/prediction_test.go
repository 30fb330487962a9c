package bench_test

import (
	"cmp"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/nn"
)

// flagOf returns the value of --name in cmd ("" if absent).
func flagOf(cmd []string, name string) string {
	if i := slices.Index(cmd, "--"+name); i >= 0 && i+1 < len(cmd) {
		return cmd[i+1]
	}
	return ""
}

// layers are the tensor sizes, in bytes, of the model cmd trains.
func layers(t *testing.T, cmd []string) []int64 {
	spec := nn.DefaultSpec(flagOf(cmd, "model"))
	if h := flagOf(cmd, "hidden"); h != "" {
		spec.Hidden = nil
		for _, f := range strings.Split(h, ",") {
			n, err := strconv.Atoi(f)
			require.NoError(t, err)
			spec.Hidden = append(spec.Hidden, n)
		}
	}
	m, err := nn.New(spec, nn.NewCPU())
	require.NoError(t, err)
	return m.Layout().Bytes()
}

// modelKey is the key of bench.Models whose label is label.
func modelKey(t *testing.T, label string) string {
	for k, m := range bench.Models {
		if m.Label == label {
			return k
		}
	}
	t.Fatalf("no harness model labelled %s", label)
	return ""
}

// measuredSteps gathers, by run ID, the mean step of every measurement of
// the runs in results.json and in the repeats (docs/bench-repeat/*/
// results.json: make bench's 25.4M-parameter runs measured again), the
// first from results.json, which it returns.
func measuredSteps(t *testing.T, results string, repeats []string) (*bench.Results, map[string][]float64) {
	t.Helper()
	steps := map[string][]float64{}
	var first *bench.Results
	for _, f := range append([]string{results}, repeats...) {
		r, err := bench.Load(f)
		require.NoError(t, err)
		first = cmp.Or(first, r)
		for _, run := range r.Runs {
			if run.Error == "" && run.StepTime.Step.Mean > 0 {
				steps[run.ID] = append(steps[run.ID], run.StepTime.Step.Mean)
			}
		}
	}
	return first, steps
}

// median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	return (s[(n-1)/2] + s[n/2]) / 2
}

// TestPredictionsAgainstMeasuredRuns predicts every run of the harness's
// committed results (docs/bench-train/results.json: shoal bench train on
// this kind of machine, 2 and 4 workers, 1 to 4 shards, through the NIC
// model at 1 Gbit/s) from its own measured compute (mean and spread), as
// shoal bench simulate --calibrate does, and compares the predicted mean
// step with the measured one. The goal is 15% in every case;
// docs/BENCHMARKS.md has the table and says where it is missed and why
// (4 async or SSP workers on 1 or 2 shards, which the simulator starts
// together and the launcher does not: up to 1.41× slow; 8 processes on
// this machine's 2 cores, which the simulator gives a CPU each: 0.80×).
// This guards what it reaches: every prediction within a factor of 1.5,
// and at least five in six within 15% (29 of 34 are).
//
// A run measured more than once (the 25.4M-parameter runs, 3 steps each
// after the first, repeated by scripts/bench-repeat.sh) is compared with
// the median of its measurements: one measurement of such a run differs
// from another by up to 1.5× on this machine.
func TestPredictionsAgainstMeasuredRuns(t *testing.T) {
	repeats, err := filepath.Glob("../docs/bench-repeat/*/results.json")
	require.NoError(t, err)
	res, measured := measuredSteps(t, "../docs/bench-train/results.json", repeats)
	// The optimizer's speed, as sim.MeasureOptimizer(1<<22) measured it on
	// this machine with nothing else running (7.5 GB/s, 2026-11-24): a
	// constant, so that the comparison does not move with the load or
	// under the race detector.
	const apply = 7.5e9
	var cases, close int
	for _, r := range res.Runs {
		if r.Peer != "" || r.Error != "" || r.StepTime.Step.Mean == 0 || r.NICGbps == 0 || r.Workers < 2 {
			continue
		}
		in := bench.SimInput{Layers: layers(t, r.Command), Batch: r.Batch, NICGbps: r.NICGbps, RTTMillis: r.RTTMillis,
			ApplyBytesPerSec: apply, Command: []string{"test"}}
		in.Calibrate(r.StepTime.Compute)
		p, err := bench.Simulate(bench.Run{Model: modelKey(t, r.Model), Mode: r.Mode, Workers: r.Workers, Servers: r.Servers, Steps: r.Steps}, in)
		require.NoError(t, err, r.ID)
		require.Equal(t, r.ID, p.ID)
		m := median(measured[r.ID])
		ratio := p.StepTime.Step.Mean / m
		t.Logf("%-36s measured %8.2f ms (median of %d)  predicted %8.2f ms  ratio %.2f", r.ID, 1e3*m, len(measured[r.ID]), 1e3*p.StepTime.Step.Mean, ratio)
		assert.True(t, ratio > 1/1.5 && ratio < 1.5, "%s: predicted %.3fs, measured %.3fs (median of %v)", r.ID, p.StepTime.Step.Mean, m, measured[r.ID])
		cases++
		if math.Abs(ratio-1) <= 0.15 {
			close++
		}
	}
	require.Positive(t, cases, "no run to compare with")
	t.Logf("%d of %d predictions within 15%%", close, cases)
	assert.GreaterOrEqual(t, 6*close, 5*cases, "fewer than five in six predictions within 15%%")
}
