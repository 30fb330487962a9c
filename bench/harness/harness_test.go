package harness

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/internal/netshape"
	"github.com/shoalml/shoal/record"
	"github.com/shoalml/shoal/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerCounts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		list    string
		workers int
		want    []int
		err     string
	}{
		{"default, few workers", "", 2, []int{1, 2}, ""},
		{"default, one worker", "", 1, []int{1}, ""},
		{"default, ×4 up to the workers, then theirs", "", 20, []int{1, 4, 16, 20}, ""},
		{"default, a power of 4", "", 1024, []int{1, 4, 16, 64, 256, 1024}, ""},
		{"given", "2, 3", 8, []int{2, 3}, ""},
		{"not a count", "1,x", 8, nil, `--servers "1,x": want positive integers separated by commas, e.g. 1,4,16`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ServerCounts(tc.list, tc.workers)
			if tc.err != "" {
				assert.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestColocatedCounts(t *testing.T) {
	for _, tc := range []struct {
		name, list string
		want       []int
		err        string
	}{
		{"default: a server a worker", "", []int{16}, ""},
		{"none", "none", nil, ""},
		{"given", "4,16", []int{4, 16}, ""},
		{"more than the workers", "32", nil, `--colocated-servers "32": 32 servers on 16 workers' hosts, want at most one a worker`},
		{"not a count", "x", nil, `--colocated-servers "x": want positive integers`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ColocatedCounts(tc.list, 16)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseModes(t *testing.T) {
	ms, err := ParseModes("async, ring")
	require.NoError(t, err)
	assert.Equal(t, []consistency.Mode{consistency.Async, consistency.Ring}, ms)
	_, err = ParseModes("async,fast")
	assert.ErrorContains(t, err, "--modes: ")
}

func TestValidate(t *testing.T) {
	emu := EmulateConfig{Net: DefaultSimJob(), Modes: []consistency.Mode{consistency.Async}, Servers: 1, Job: Job{Batch: 1, Epochs: 1}}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"compute", ComputeConfig{Batch: 1, Steps: 0}.Validate(1), "--batch 1, --steps 0, --warmup 0, --threads 1: want batch, steps, threads >= 1 and warmup >= 0"},
		{"sim job", SimJob{NICGbps: 0}.Validate(), "--nic-gbps 0, --latency 0s, --compute 0s, --jitter 0: want a positive NIC rate, the rest >= 0"},
		{"emulate ring", func() error { e := emu; e.Modes = []consistency.Mode{consistency.Ring}; return e.Validate() }(), "--modes ring: only the parameter-server modes"},
		{"emulate epochs", func() error { e := emu; e.Job.Epochs = 0; return e.Validate() }(), "--batch 1, --epochs 0, --servers 1, --eval-every 0: want"},
		{"simulate", SimulateConfig{Jitter: -1}.Validate(), "--apply-gbps 0, --jitter -1: want >= 0"},
		{"train target", TrainConfig{Target: 2, EvalEvery: 1}.Validate(), "--target-accuracy 2: want 0 to 1"},
		{"train eval", TrainConfig{EvalEvery: 0}.Validate(), "--eval-every 0: want >= 1"},
		{"collective op", CollectiveConfig{Op: "gather"}.Validate(), `--op "gather": want allreduce`},
		{"collective np", CollectiveConfig{Op: "allreduce", Iters: 1, MaxProcsPerCore: 1}.Validate(), "--np 0, --iters 1, --warmup 0: want np >= 1"},
		{"collective hosts", CollectiveConfig{Op: "allreduce", NP: 2, Iters: 1, Hosts: 3, MaxProcsPerCore: 8}.Validate(), "--hosts 3: want 1 to --np (2)"},
		{"collective NIC on one host", CollectiveConfig{Op: "allreduce", NP: 2, Iters: 1, Hosts: 1, NICGbps: 1, MaxProcsPerCore: 8}.Validate(),
			"--nic-gbps 1 with --hosts 1: want a rate >= 0 (0: no NIC model), and with a rate 2 or more hosts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorContains(t, tc.err, tc.want)
		})
	}
	assert.NoError(t, emu.Validate())
	assert.NoError(t, DefaultComputeConfig().Validate(1))
}

func TestFastest(t *testing.T) {
	row := func(mode string, servers int, sps float64) PlanRow {
		return PlanRow{Mode: mode, Servers: servers, Result: sim.Result{SamplesPerSec: sps}}
	}
	rows := []PlanRow{row("async", 1, 100), row("async", 4, 300), row("sync", 1, 200), row("ring", 0, 150)}
	var out bytes.Buffer
	printFastest(&out, rows)
	assert.Equal(t, "fastest: async with 4 servers, 300 samples/s, 1.50× the best other mode (sync with 1 servers)", out.String())
	fastest, order := fastestPerMode(rows)
	assert.Equal(t, []string{"async", "sync", "ring"}, order)
	assert.Equal(t, 4, fastest["async"].Servers)

	results := []TargetRow{{Mode: "async", Epochs: 1, Seconds: 3}, {Mode: "sync", Epochs: 1, Seconds: 2}, {Mode: "ring"}}
	out.Reset()
	targetJob{cfg: PlanConfig{Target: 0.8, Epochs: 3}}.printFirst(&out, results)
	assert.Equal(t, "first to 80.0%: sync, 1.50× sooner than async\n", out.String())
	out.Reset()
	targetJob{cfg: PlanConfig{Target: 0.8, Epochs: 3}}.printFirst(&out, results[2:])
	assert.Equal(t, "first to 80.0%: none within 3 epochs\n", out.String())
}

func TestAccuracyCurves(t *testing.T) {
	runs := []EmulateRun{{Mode: "async", Workers: 2, Update: "full"}, {Mode: "async", Workers: 2, Update: "staleness"},
		{Mode: "ssp", Workers: 2, Staleness: 4, Update: "average", Diverged: "NaN", Updates: 7}, {Mode: "ssp", Workers: 2, Staleness: 4, Update: "staleness"},
		{Mode: "sync", Workers: 8}, {Mode: "sync", Workers: 8, LocalSteps: 10}}
	byN, order := accuracyCurves(runs)
	assert.Equal(t, []int{2, 8}, order)
	require.Len(t, byN[2], 4)
	for i, want := range []struct {
		label string
		dash  int
	}{{"async (full)", 0}, {"async (staleness)", 1}, {"ssp (s = 4), diverged after 7 updates", 0}, {"ssp (s = 4, staleness)", 1}} {
		assert.Equal(t, want.label, byN[2][i].Label)
		assert.Equal(t, want.dash, byN[2][i].Dash, want.label)
	}
	assert.Equal(t, "sync", byN[8][0].Label)
	assert.Equal(t, "sync (H = 10)", byN[8][1].Label)
	assert.Equal(t, 1, byN[8][1].Dash)
}

func TestTrainArgs(t *testing.T) {
	cfg := TrainConfig{EvalEvery: 50, Data: "/d", Dataset: "synthetic", NIC: netshape.Config{Gbps: 2, RTT: time.Millisecond}, NICArgs: []string{"--nic-gbps", "2", "--rtt", "1ms"},
		UpdateArgs: []string{"--update-rule=staleness"}}
	args := cfg.trainArgs(bench.Run{Mode: "async-overlap", Workers: 2, Servers: 1, Model: "mlp", Steps: 10}, cfg.NICArgs)
	assert.Equal(t, []string{"train", "--mode", "async", "--overlap-push-pull", "--workers", "2", "--servers", "1", "--update-rule=staleness"}, args[:9])
	assert.NotContains(t, cfg.trainArgs(bench.Run{Mode: "ring", Workers: 2, Model: "mlp", Steps: 10}, nil), "--update-rule=staleness", "the ring has no shards")
	assert.Subset(t, args, []string{"--steps", "10", "--eval-every", "50", "--dataset", "synthetic", "--nic-gbps", "--rtt", "1ms"})
	ring := cfg.trainArgs(bench.Run{Mode: "ring", Workers: 2, Model: "mlp", Epochs: 1}, nil)
	assert.NotContains(t, ring, "--servers")
	assert.NotContains(t, ring, "--nic-gbps")
	assert.Contains(t, ring, "--epochs")
	local := cfg.trainArgs(bench.Run{Mode: "sync", Workers: 2, Servers: 1, Model: "mlp", Steps: 10, LocalSteps: 10}, nil)
	assert.Subset(t, local, []string{"--local-steps", "10"})
	assert.NotContains(t, args, "--local-steps")
}

func TestDescribeRecord(t *testing.T) {
	assert.Equal(t, "a/b: FAILED: first", describeRecord(&bench.Record{ID: "a/b", Error: "first\nsecond"}))
	rec := &bench.Record{ID: "a/b", SamplesPerSec: 1000, Run: record.Run{TestAccuracy: 0.5}}
	rec.StepTime.Step.P50 = 0.002
	assert.Equal(t, "a/b: 1000 samples/s, step p50 2.0 ms, test 50.00%", describeRecord(rec))
}

func TestCalibration(t *testing.T) {
	rec := func(id, model string, compute float64) bench.Record {
		r := bench.Record{ID: id, Model: model}
		r.StepTime.Compute.Mean = compute
		return r
	}
	measured := &bench.Results{Runs: []bench.Record{rec("m/a", "mlp", 0), rec("m/b", "mlp", 1), rec("m/c", "mlp", 2)}}
	c, ok := Calibration(measured, "m/c", "mlp")
	require.True(t, ok)
	assert.Equal(t, "m/c", c.ID, "the run itself")
	c, ok = Calibration(measured, "m/z", "mlp")
	require.True(t, ok)
	assert.Equal(t, "m/b", c.ID, "the model's first run with a compute")
	_, ok = Calibration(measured, "c/z", "cnn")
	assert.False(t, ok)
	_, ok = Calibration(nil, "m/c", "mlp")
	assert.False(t, ok)
}

// A plan measures a short step 30 times after 5 of warm-up, a long one
// about a second's worth, at least 3 times after 1.
func TestMeasureSteps(t *testing.T) {
	for _, tc := range []struct {
		name          string
		probe         float64
		steps, warmup int
	}{
		{"short", 0.002, 30, 5},
		{"unmeasurable", 0, 30, 5},
		{"a tenth of a second", 0.1, 10, 1},
		{"the big model's", 0.33, 3, 1},
		{"ten seconds", 10, 3, 1},
	} {
		steps, warmup := measureSteps(tc.probe)
		assert.Equal(t, tc.steps, steps, tc.name)
		assert.Equal(t, tc.warmup, warmup, tc.name)
	}
}

// Plan simulates its setups at once but prints them in order, each the
// answer of sim.Run on the planner's fast path (sim.DefaultPieces).
func TestPlanPrintsTheSetupsInOrder(t *testing.T) {
	cfg := PlanConfig{Sim: sim.Config{Workers: 8, Batch: 16, Steps: 4, Layers: []int64{3 << 20, 1 << 20}, FusionBytes: 65536, ApplyBytesPerSec: 4e9, Staleness: 1},
		Net:   SimJob{NICGbps: 10, Latency: 25 * time.Microsecond, Compute: 2 * time.Millisecond, Jitter: 0.1, Seed: 1},
		Modes: consistency.All(), Counts: []int{1, 4}, JSON: true}
	var out bytes.Buffer
	require.NoError(t, Plan(t.Context(), cfg, &out))
	var got []PlanRow
	for dec := json.NewDecoder(&out); dec.More(); {
		var r PlanRow
		require.NoError(t, dec.Decode(&r))
		got = append(got, r)
	}
	want := []struct {
		mode    consistency.Mode
		servers int
		alg     collective.Algorithm
	}{{consistency.Async, 1, 0}, {consistency.Async, 4, 0}, {consistency.Sync, 1, 0}, {consistency.Sync, 4, 0}, {consistency.SSP, 1, 0}, {consistency.SSP, 4, 0},
		{consistency.Ring, 0, collective.Ring}, {consistency.Ring, 0, collective.Tree}, {consistency.Ring, 0, collective.Auto}}
	require.Len(t, got, len(want))
	for i, w := range want {
		sc := cfg.Sim
		sc.Mode, sc.Servers, sc.Pieces, sc.Allreduce = w.mode, w.servers, sim.DefaultPieces, w.alg
		sc.Forward, sc.Backward, sc.Jitter, sc.Seed, sc.NICGbps, sc.Latency = 2e-3/3, 4e-3/3, 0.1, 1, 10, 25e-6
		r, err := sim.Run(sc)
		require.NoError(t, err)
		assert.Equal(t, w.mode.String(), got[i].Mode)
		assert.Equal(t, w.servers, got[i].Servers)
		if w.mode == consistency.Ring {
			assert.Equal(t, w.alg.String(), got[i].Allreduce)
		}
		assert.InEpsilon(t, r.StepSeconds, got[i].Result.StepSeconds, 1e-12, "%s with %d servers", w.mode, w.servers)
	}
}

// With Hosts, every PS setup comes again aggregated per host, right after
// it, each the answer of sim.RunHosts.
func TestPlanPricesPerHostAggregation(t *testing.T) {
	hosts := sim.Hosts{PerHost: 4, BytesPerSec: 1e10, Latency: 1e-6}
	cfg := PlanConfig{Sim: sim.Config{Workers: 8, Batch: 16, Steps: 4, Layers: []int64{3 << 20, 1 << 20}, ApplyBytesPerSec: 4e9},
		Net:   SimJob{NICGbps: 10, Latency: 25 * time.Microsecond, Compute: 2 * time.Millisecond, Seed: 1},
		Modes: []consistency.Mode{consistency.Sync}, Counts: []int{1, 2}, JSON: true, Hosts: hosts}
	var out bytes.Buffer
	require.NoError(t, Plan(t.Context(), cfg, &out))
	var got []PlanRow
	for dec := json.NewDecoder(&out); dec.More(); {
		var r PlanRow
		require.NoError(t, dec.Decode(&r))
		got = append(got, r)
	}
	require.Len(t, got, 4)
	for i, s := range []int{1, 1, 2, 2} {
		sc := cfg.Sim
		sc.Mode, sc.Servers, sc.Pieces = consistency.Sync, s, sim.DefaultPieces
		sc.Forward, sc.Backward, sc.NICGbps, sc.Latency, sc.Seed = 2e-3/3, 4e-3/3, 10, 25e-6, 1
		want, mode := sc, "sync"
		var r sim.Result
		var err error
		if i%2 == 1 {
			mode = "sync-host4"
			r, err = sim.RunHosts(want, hosts)
		} else {
			r, err = sim.Run(want)
		}
		require.NoError(t, err)
		assert.Equal(t, mode, got[i].Mode)
		assert.Equal(t, s, got[i].Servers)
		assert.InEpsilon(t, r.StepSeconds, got[i].Result.StepSeconds, 1e-12, "%s with %d servers", mode, s)
	}
	assert.Less(t, got[1].Result.BytesSent, got[0].Result.BytesSent, "a host's workers share its push")
}
