package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/record"
)

// reportResults is a small hand-made Results with known numbers: a sync
// run, a PyTorch peer, and a failed ring run whose error has a '|'.
func reportResults() *Results {
	return &Results{
		Schema:   SchemaVersion,
		Started:  time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
		Command:  []string{"shoal", "bench", "train", "--models=mlp", "--note=two words"},
		Revision: "9dce25c",
		Machine:  Machine{Hostname: "bench-1", OS: "linux", Arch: "amd64", CPUModel: "AMD EPYC 7B13", CPUs: 16, MemBytes: 64 << 30, Go: "go1.26.0", GEMM: "cpu/openblas", LoadAvg: 0.5},
		Shaper:   &ShaperCheck{ConfiguredGbps: 10, MeasuredGbps: 9.9, Bytes: 64 << 20, Ratio: 0.99},
		Runs: []Record{
			{
				ID: "mlp/sync/w2/s1/nic10", Mode: "sync", Model: "mlp", Workers: 2, Servers: 1,
				Run: record.Run{Batch: 64, Steps: 100, Samples: 12800, TestAccuracy: 0.96,
					Curve: []CurvePoint{{Seconds: 0.5, Step: 40, Accuracy: 0.9, Loss: 0.3}, {Seconds: 1.25, Step: 100, Accuracy: 0.96, Loss: 0.1}}},
				VectorBytes: 1 << 20, NICGbps: 10, RTTMillis: 0.2,
				TrainSeconds: 1.25, SamplesPerSec: 10240, ScalingEfficiency: ptr(0.8),
				StepTime: StepTime{
					Step:    Quantiles{Mean: 0.0125, P50: 0.012, P95: 0.02},
					Compute: Quantiles{Mean: 0.005, P50: 0.005, P95: 0.006},
					Wait:    Quantiles{Mean: 0.001, P50: 0.0008, P95: 0.003},
					Pull:    Quantiles{Mean: 0.003, P50: 0.003, P95: 0.004},
					Push:    Quantiles{Mean: 0.003, P50: 0.003, P95: 0.004},
				},
				IdleFraction: 0.6, BytesSentPerStep: 1.5 * (1 << 20), BytesReceivedPerStep: 1 << 20,
				Comm:           &Comm{MeasuredSeconds: 0.006, AnalyticSeconds: 0.004, Ratio: 1.5},
				Staleness:      consistency.Staleness{0: 200},
				TargetAccuracy: 0.95, SecondsToTarget: ptr(1.25), StepsToTarget: ptr(int64(100)),
			},
			{
				ID: "pytorch-ddp-gloo/mlp/ddp/w2/s0/nic10", Peer: "pytorch-ddp-gloo", Mode: "ddp", Model: "mlp", Workers: 2,
				Run:         record.Run{Batch: 64, Steps: 100, TestAccuracy: 0.955},
				VectorBytes: 1 << 20, NICGbps: 10, SamplesPerSec: 9000, TrainSeconds: 1.42,
				StepTime:     StepTime{Step: Quantiles{Mean: 0.014, P50: 0.014, P95: 0.016}, Compute: Quantiles{Mean: 0.006, P50: 0.006, P95: 0.007}, Reduce: Quantiles{Mean: 0.007, P50: 0.007, P95: 0.008}},
				IdleFraction: 0.57, TargetAccuracy: 0.95,
			},
			{
				ID: "mlp/ring/w4/s0/nic10", Mode: "ring", Model: "mlp", Workers: 4, Run: record.Run{Batch: 64, TestAccuracy: -1},
				Error: "rank 2: dial tcp: connection refused | retried 3 times",
			},
		},
	}
}

func TestWriteReport(t *testing.T) {
	r := reportResults()
	var sb strings.Builder
	require.NoError(t, WriteReport(&sb, r, []string{"throughput-mlp.png", "breakdown-mlp.png", "extra.png"}))
	out := sb.String()
	t.Log("\n" + out)

	for _, want := range []string{
		"- **Command:** `shoal bench train --models=mlp '--note=two words'`\n",
		"- **Revision:** 9dce25c\n",
		"- **Machine:** bench-1: 16× AMD EPYC 7B13, 64.0 GiB memory, linux/amd64, go1.26.0, GEMM cpu/openblas, load average 0.50 at the start\n",
		"- **NIC shaper self-check:** configured 10 Gbit/s, measured 9.9 Gbit/s over 64.0 MiB (ratio 0.990; runs need [0.9, 1.1])\n",
		"- **Runs:** 3 (1 failed, 1 by peers)\n",
		// Failed runs, with the '|' escaped.
		"| `mlp/ring/w4/s0/nic10` | ring | rank 2: dial tcp: connection refused \\| retried 3 times |\n",
		// Throughput.
		"| model | system | workers | servers | samples/s | scaling efficiency | steps | train time (s) |\n",
		"| mlp | sync | 2 | 1 | 10,240 | 80.0% | 100 | 1.25 |\n",
		"| mlp | PyTorch DDP (gloo), peer | 2 | — | 9,000 | — | 100 | 1.42 |\n",
		"| mlp | ring | 4 | — | **failed** (see Failed runs) | — | — | — |\n",
		"![Throughput vs workers, model mlp, NIC 10 Gbit/s](throughput-mlp.png)\n",
		// Step-time breakdown: p50 / p95 in ms, "—" for phases never used.
		"| mlp | sync | 2 | 1 | 12.0 / 20.0 | 5.00 / 6.00 | — | 0.800 / 3.00 | 3.00 / 4.00 | 3.00 / 4.00 | — | 60.0% |\n",
		"| mlp | PyTorch DDP (gloo), peer | 2 | — | 14.0 / 16.0 | 6.00 / 7.00 | — | — | — | — | 7.00 / 8.00 | 57.0% |\n",
		"![Step-time breakdown, model mlp (mean per step)](breakdown-mlp.png)\n",
		// Traffic in MiB per worker per step.
		"| mlp | sync | 2 | 1 | 1.00 | 1.50 | 1.00 | 1.50 | 1.00 |\n",
		// Measured vs analytic.
		"| mlp | sync | 2 | 1 | 10 | 0.2 | 6.00 | 4.00 | 1.50 |\n",
		"_Plot not rendered: Communication time per step: measured vs analytic (comm.png)._\n",
		// Time to accuracy.
		"| mlp | sync | 2 | 1 | 95.0% | 1.25 | 100 | 96.00% |\n",
		"| mlp | PyTorch DDP (gloo), peer | 2 | — | 95.0% | never | never | 95.50% |\n",
		// Staleness.
		"| mlp | sync | 2 | 1 | 200 | 0.00 | 0 | 0 | 0 | 100.0% |\n",
		// A plot no section claims still shows.
		"## Other plots\n\n![extra.png](extra.png)\n",
	} {
		assert.Contains(t, out, want)
	}
	// The failed run has no row in the measurement tables.
	assert.Equal(t, 1, strings.Count(out, "| mlp | ring | 4 |"), "only in Throughput")
}

func TestWriteReportSaysWhyPlotsAreMissing(t *testing.T) {
	r := reportResults()
	for i := range r.Runs {
		r.Runs[i].Curve, r.Runs[i].Staleness, r.Runs[i].Comm = nil, nil, nil
	}
	r.Shaper = nil
	var sb strings.Builder
	require.NoError(t, WriteReport(&sb, r, nil))
	out := sb.String()
	for _, want := range []string{
		"- **NIC shaper self-check:** none (no NIC modelled; loopback as it is)\n",
		"_Plot skipped (Test accuracy vs wall time): no run recorded an accuracy curve of at least 3 evaluations._",
		"_Plot skipped (Staleness of pushes): no parameter-server run recorded staleness._",
		"_Plot skipped (Communication time per step: measured vs analytic): no run has both a measured and an analytic communication time (no NIC modelled)._",
		"No run has a communication model (no NIC was modelled).",
		"No run recorded staleness.",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "![")
}

// The report of the full fixture has every section, every rendered plot
// and marks peers.
func TestWriteReportFixture(t *testing.T) {
	r := fabricate()
	plots := []string{"throughput-mlp.png", "throughput-big.png", "breakdown-big.png", "accuracy-mlp.png",
		"accuracy-big.png", "staleness-mlp.png", "staleness-big.png", "comm.png"}
	var sb strings.Builder
	require.NoError(t, WriteReport(&sb, r, plots))
	out := sb.String()
	for _, h := range []string{"## Failed runs", "## Throughput", "## Step-time breakdown", "## Traffic",
		"## Communication time: measured vs analytic", "## Time to accuracy", "## Staleness"} {
		assert.Contains(t, out, "\n"+h+"\n")
	}
	for _, p := range plots {
		assert.Contains(t, out, "]("+p+")")
	}
	assert.NotContains(t, out, "Other plots")
	// 2 models × 3 worker counts in throughput, breakdown, traffic and
	// accuracy; communication lacks the 1-worker runs; staleness is PS only.
	assert.Equal(t, 6*4+4, strings.Count(out, "| PyTorch DDP (gloo), peer |"))
}

func TestMDCode(t *testing.T) {
	assert.Equal(t, "`a b`", mdCode("a b"))
	assert.Equal(t, "`` echo `x` ``", mdCode("echo `x`"))
}

func TestShellJoin(t *testing.T) {
	assert.Equal(t, `shoal train --x=1 'a b' '' 'it'\''s'`, shellJoin([]string{"shoal", "train", "--x=1", "a b", "", "it's"}))
}

// TestWriteReportCrossover: a PS run with a ring run of the same model,
// workers and NIC gets a row comparing their communication times.
func TestWriteReportCrossover(t *testing.T) {
	r := reportResults()
	r.Runs = append(r.Runs, Record{ID: "mlp/ring/w2/s0/nic10", Mode: "ring", Model: "mlp", Workers: 2, Run: record.Run{Batch: 64, Steps: 100, TestAccuracy: 0.96},
		VectorBytes: 1 << 20, NICGbps: 10, SamplesPerSec: 20000, TrainSeconds: 0.64,
		Comm: &Comm{MeasuredSeconds: 0.002, AnalyticSeconds: 0.001, Ratio: 2}})
	var sb strings.Builder
	require.NoError(t, WriteReport(&sb, r, nil))
	out := sb.String()
	assert.Contains(t, out, "## Parameter servers vs ring allreduce\n")
	// sync 2 workers 1 server: measured 6 ms vs 2 ms, analytic 4 ms vs 1 ms.
	assert.Contains(t, out, "| mlp | 2 | sync | 1 | 10 | 6.00 | 2.00 | 3.00 | 4.00 |\n")

	var none strings.Builder
	require.NoError(t, WriteReport(&none, reportResults(), nil))
	assert.NotContains(t, none.String(), "Parameter servers vs ring", "no ring run to compare with")
}
