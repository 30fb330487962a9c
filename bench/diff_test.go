package bench

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/record"
)

func ptr[T any](v T) *T { return &v }

// diffPair is two small results files: "x" in both (faster in B), "y" only
// in A, "z" only in B, "f" failed in B, "c" with a changed batch.
func diffPair() (a, b *Results) {
	machine := Machine{Hostname: "h", OS: "linux", Arch: "amd64", CPUModel: "AMD EPYC 7B13", CPUs: 16, GEMM: "cpu/openblas", Go: "go1.26.0"}
	rec := func(id string, sps, p50, p95, comm, sent, acc float64, toTarget *float64) Record {
		r := Record{
			ID: id, Mode: "sync", Model: "mlp", Workers: 2, Servers: 1, Run: record.Run{Batch: 64, Steps: 100, TestAccuracy: acc},
			SamplesPerSec: sps, BytesSentPerStep: sent, SecondsToTarget: toTarget,
			StepTime: StepTime{Step: Quantiles{Mean: p50, P50: p50, P95: p95}},
		}
		if comm > 0 {
			r.Comm = &Comm{MeasuredSeconds: comm, AnalyticSeconds: comm / 2, Ratio: 2}
		}
		return r
	}
	a = &Results{Schema: SchemaVersion, Revision: "aaaa111", Started: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC), Machine: machine,
		Runs: []Record{
			rec("x", 1000, 0.010, 0.020, 0.004, 1<<20, 0.90, ptr(20.0)),
			rec("y", 500, 0.030, 0.040, 0, 2<<20, -1, nil),
			rec("f", 800, 0.012, 0.020, 0.004, 1<<20, 0.91, ptr(25.0)),
			rec("c", 800, 0.012, 0.020, 0.004, 1<<20, 0.91, nil),
		}}
	machineB := machine
	machineB.CPUs = 8
	b = &Results{Schema: SchemaVersion, Revision: "bbbb222+dirty", Started: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC), Machine: machineB,
		Runs: []Record{
			rec("z", 700, 0.011, 0.015, 0, 1<<20, 0.88, nil),
			rec("x", 1250, 0.008, 0.012, 0.003, 1<<20, 0.92, ptr(15.0)),
			{ID: "f", Mode: "sync", Model: "mlp", Workers: 2, Servers: 1, Run: record.Run{Batch: 64, Steps: 100, TestAccuracy: -1}, Error: "worker 1: exit status 2"},
			rec("c", 900, 0.012, 0.020, 0, 1<<20, 0.91, nil),
		}}
	b.Runs[3].Batch = 128
	return a, b
}

func TestDiff(t *testing.T) {
	a, b := diffPair()
	rows := Diff(a, b)
	require.Len(t, rows, 5)
	ids := make([]string, len(rows))
	sides := make([]Side, len(rows))
	for i, r := range rows {
		ids[i], sides[i] = r.ID, r.Side
	}
	assert.Equal(t, []string{"x", "y", "f", "c", "z"}, ids, "A's order, then B's own")
	assert.Equal(t, []Side{Both, OnlyA, Both, Both, OnlyB}, sides)

	x := rows[0]
	assert.Same(t, &a.Runs[0], x.A)
	assert.Same(t, &b.Runs[1], x.B)
	tests := []struct {
		name       string
		c          Change
		a, b, d, p float64
	}{
		{"samples/s", x.SamplesPerSec, 1000, 1250, 250, 25},
		{"step p50", x.StepP50, 0.010, 0.008, -0.002, -20},
		{"step p95", x.StepP95, 0.020, 0.012, -0.008, -40},
		{"comm", x.CommSeconds, 0.004, 0.003, -0.001, -25},
		{"bytes sent", x.BytesSentPerStep, 1 << 20, 1 << 20, 0, 0},
		{"test accuracy", x.TestAccuracy, 0.90, 0.92, 0.02, 2.0 / 0.9},
		{"seconds to target", x.SecondsToTarget, 20, 15, -5, -25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.True(t, tt.c.OK)
			assert.Equal(t, tt.a, tt.c.A)
			assert.Equal(t, tt.b, tt.c.B)
			assert.InDelta(t, tt.d, tt.c.Delta(), 1e-12)
			assert.InDelta(t, tt.p, tt.c.Percent(), 1e-9)
		})
	}
	assert.Empty(t, x.Notes)

	f := rows[2]
	assert.False(t, f.SamplesPerSec.OK, "B failed: nothing to compare")
	assert.Equal(t, 800.0, f.SamplesPerSec.A, "A's value is kept")
	assert.True(t, math.IsNaN(f.SamplesPerSec.Delta()))
	assert.True(t, math.IsNaN(f.SamplesPerSec.Percent()))

	c := rows[3]
	assert.True(t, c.SamplesPerSec.OK)
	assert.False(t, c.CommSeconds.OK, "B has no comm")
	assert.Equal(t, 0.004, c.CommSeconds.A)
	assert.False(t, c.SecondsToTarget.OK, "neither reached the target")
	assert.Equal(t, []string{"batch 64 → 128"}, c.Notes)

	assert.Nil(t, rows[1].B)
	assert.Nil(t, rows[4].A)
}

func TestChangePercentOfZero(t *testing.T) {
	c := Change{A: 0, B: 5, OK: true}
	assert.Equal(t, 5.0, c.Delta())
	assert.True(t, math.IsNaN(c.Percent()))
}

func TestWriteDiff(t *testing.T) {
	a, b := diffPair()
	var sb strings.Builder
	require.NoError(t, WriteDiff(&sb, a, b))
	out := sb.String()
	t.Log("\n" + out)

	assert.Contains(t, out, "A: revision aaaa111, started 2026-11-01 09:00 UTC, h: 16× AMD EPYC 7B13")
	assert.Contains(t, out, "B: revision bbbb222+dirty, started 2026-11-02 09:00 UTC, h: 8× AMD EPYC 7B13")
	assert.Contains(t, out, "WARNING: the machines differ (cpus 16 vs 8)")

	lines := strings.Split(out, "\n")
	find := func(prefix, metric string) []string {
		t.Helper()
		inRun := false
		for _, l := range lines {
			// A run's block starts at its samples/s line, which has its id.
			if f := strings.Fields(l); strings.Contains(l, "samples/s") && len(f) > 0 {
				inRun = f[0] == prefix
			}
			if inRun && strings.Contains(l, metric) {
				return strings.Fields(strings.SplitN(l, metric, 2)[1])
			}
		}
		t.Fatalf("no %q line for run %q in\n%s", metric, prefix, out)
		return nil
	}
	assert.Equal(t, []string{"1,000", "1,250", "+250", "+25.0%"}, find("x", "samples/s"))
	assert.Equal(t, []string{"10.0", "8.00", "-2.00", "-20.0%"}, find("x", "step p50 (ms)"))
	assert.Equal(t, []string{"20.0", "12.0", "-8.00", "-40.0%"}, find("x", "step p95 (ms)"))
	assert.Equal(t, []string{"4.00", "3.00", "-1.00", "-25.0%"}, find("x", "comm measured (ms/step)"))
	assert.Equal(t, []string{"1.00", "1.00", "0", "0.0%"}, find("x", "sent (MiB/step/worker)"))
	assert.Equal(t, []string{"90.0", "92.0", "+2.00", "pp", "+2.2%"}, find("x", "test accuracy (%)"))
	assert.Equal(t, []string{"20.0", "15.0", "-5.00", "-25.0%"}, find("x", "time to target (s)"))
	assert.Equal(t, []string{"800", "—", "—", "—", "B", "failed:", "worker", "1:", "exit", "status", "2"}, find("f", "samples/s"))
	assert.Equal(t, []string{"4.00", "—", "—", "—"}, find("c", "comm measured (ms/step)"))
	assert.Contains(t, out, "differs: batch 64 → 128")

	assert.Contains(t, out, "Runs only in A (1):\n  y  500 samples/s, step p50 30.0 ms\n")
	assert.Contains(t, out, "Runs only in B (1):\n  z  700 samples/s, step p50 11.0 ms\n")
}

func TestWriteDiffSameMachine(t *testing.T) {
	a, _ := diffPair()
	var sb strings.Builder
	require.NoError(t, WriteDiff(&sb, a, a))
	assert.NotContains(t, sb.String(), "WARNING")
	assert.NotContains(t, sb.String(), "only in")
}

func TestWriteDiffNothingInCommon(t *testing.T) {
	a, b := diffPair()
	b.Runs = []Record{b.Runs[0]}
	a.Runs = []Record{a.Runs[1]}
	var sb strings.Builder
	require.NoError(t, WriteDiff(&sb, a, b))
	assert.Contains(t, sb.String(), "No run is in both files.")
	assert.Contains(t, sb.String(), "Runs only in A (1):")
	assert.Contains(t, sb.String(), "Runs only in B (1):")
}
