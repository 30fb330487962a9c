package sim_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/sim"
)

// job is a model of m bytes in one layer, compute c seconds a step split
// a third forward, a NIC of 1 Gbit/s, no latency, no apply cost.
func job(mode consistency.Mode, workers, servers int, m int64, c float64) sim.Config {
	return sim.Config{Mode: mode, Workers: workers, Servers: servers, Batch: 64, Steps: 20, Layers: []int64{m},
		Forward: c / 3, Backward: 2 * c / 3, NICGbps: 1}
}

const gbit = 1e9 / 8 // bytes per second

func run(t *testing.T, cfg sim.Config) sim.Result {
	t.Helper()
	r, err := sim.Run(cfg)
	require.NoError(t, err)
	return r
}

// The ring's step is compute plus 2(N−1)/N·M/B without fusion.
func TestTheRingMatchesItsFormula(t *testing.T) {
	const m = 4 << 20
	for _, n := range []int{2, 4, 16, 256} {
		r := run(t, job(consistency.Ring, n, 0, m, 0.01))
		want := 0.01 + 2*float64(n-1)/float64(n)*m/gbit
		assert.InEpsilon(t, want, r.StepSeconds, 1e-9, "N=%d", n)
		assert.InEpsilon(t, 2*float64(n-1)/float64(n)*m, r.BytesSent, 1e-9)
	}
}

// One worker and one shard, the vector in one chunk: compute, the push,
// the reply, one after the other.
func TestOneWorkerPushesThenPulls(t *testing.T) {
	const m = 1 << 20
	for _, mode := range []consistency.Mode{consistency.Async, consistency.Sync, consistency.SSP} {
		r := run(t, job(mode, 1, 1, m, 0.002))
		assert.InEpsilon(t, 0.002+2*m/gbit, r.StepSeconds, 1e-9, "%s", mode)
		assert.InEpsilon(t, float64(m), r.BytesSent, 1e-9)
	}
}

// N workers on S shards: the busiest NIC carries max(M, N·M/S) each way
// per step, so no step can be shorter than that one way; the harness's
// analytic model, 2·max(M/B, N·M/(S·B)) plus compute, has the two
// directions one after the other, and a sync step comes close to it
// (measured, 4 sync workers on one shard at 1 Gbit/s took 54.4 ms a step
// against the model's 61.3). Where every worker talks to every shard
// (N = S = 8) the pieces that contend for the NICs at both ends of each
// stream cost a little more than the model: at most 15%.
func TestManyWorkersShareAShardsNIC(t *testing.T) {
	const m = 8 << 20 // 8 chunks
	for _, tc := range []struct{ n, s int }{{2, 1}, {4, 1}, {8, 2}, {8, 8}, {16, 4}} {
		r := run(t, job(consistency.Sync, tc.n, tc.s, m, 0.001))
		oneWay := max(m/gbit, float64(tc.n)*m/(float64(tc.s)*gbit))
		model := 0.001 + 2*oneWay
		assert.True(t, r.StepSeconds >= oneWay && r.StepSeconds <= 1.15*model, "N=%d S=%d: step %.4fs, one way %.4fs, model %.4fs",
			tc.n, tc.s, r.StepSeconds, oneWay, model)
		assert.InEpsilon(t, float64(m), r.BytesSent, 1e-9)
	}
	// Without the shards' NICs as the bottleneck the step falls to the
	// workers' own: one vector each way.
	r := run(t, job(consistency.Sync, 4, 4, 8<<20, 0.001))
	one := run(t, job(consistency.Sync, 4, 1, 8<<20, 0.001))
	assert.Less(t, r.StepSeconds, one.StepSeconds/3)
}

// Fusion overlaps the allreduce of the last layers with the backward of
// the first: the step is shorter than compute plus communication.
func TestFusionOverlapsBackward(t *testing.T) {
	cfg := job(consistency.Ring, 4, 0, 0, 0.03)
	cfg.Layers = []int64{1 << 20, 1 << 20, 1 << 20, 1 << 20}
	whole := run(t, cfg)
	cfg.FusionBytes = 1 << 20
	fused := run(t, cfg)
	assert.Less(t, fused.StepSeconds, whole.StepSeconds)
	assert.InEpsilon(t, whole.BytesSent, fused.BytesSent, 1e-9, "the same bytes")
	// Each 1 MiB bucket's allreduce (1.5 MiB per rank on the wire) takes
	// longer than the quarter of backward that makes the next: the first
	// starts a quarter into backward and the four follow back to back.
	assert.InEpsilon(t, 0.01+0.02/4+4*1.5*(1<<20)/gbit, fused.StepSeconds, 1e-6)
}

// A CNN holds its bytes in its last layers and its work in its first.
// By size, the last layer's gradient is ready only when backward ends;
// by work it is ready a tenth of the way in, and its allreduce runs under
// the rest of backward.
func TestLayerWorkDecidesWhenABucketIsReady(t *testing.T) {
	cfg := job(consistency.Ring, 2, 0, 0, 0.03)
	cfg.Layers = []int64{4 << 10, 4 << 20} // "convolutions", then "fc"
	cfg.FusionBytes = 1 << 20
	bySize := run(t, cfg)
	comm := 4 * float64(1<<20) / gbit // half of 4 MiB each way, both rounds
	fcReady := 0.01 + 0.02*float64(4<<20)/float64(4<<20+4<<10)
	assert.InEpsilon(t, fcReady+comm+float64(4<<10)/gbit, bySize.StepSeconds, 1e-6, "the fc bucket at the end of backward")
	cfg.LayerWork = []float64{9, 1}
	byWork := run(t, cfg)
	// The fc bucket is ready at 0.01 + 0.002 and reduced by then + comm
	// (34 ms at 1 Gbit/s), past the end of backward at 0.03; the small
	// bucket follows.
	assert.InEpsilon(t, 0.012+comm+float64(4<<10)/gbit, byWork.StepSeconds, 1e-6)
	assert.Less(t, byWork.StepSeconds, bySize.StepSeconds)
}

// Async workers of equal speed push in turn: each push finds the other
// workers' pushes applied since its read, N−1 in the steady state; SSP
// with bound 0 waits like sync and sees none. A looser bound can at most
// overlap the two directions of the shard's NIC, which sync leaves one
// after the other: a step no shorter than half the bound-0 step.
func TestStaleness(t *testing.T) {
	r := run(t, job(consistency.Async, 4, 1, 1<<20, 0.001))
	assert.InDelta(t, 3, r.Staleness.Mean(), 0.5, "%v", r.Staleness)
	cfg := job(consistency.SSP, 4, 1, 1<<20, 0.001)
	cfg.Jitter, cfg.Seed = 0.5, 7
	tight := run(t, cfg)
	cfg.Staleness = 8
	loose := run(t, cfg)
	assert.LessOrEqual(t, tight.StepSeconds, loose.StepSeconds*2)
	assert.Less(t, loose.StepSeconds, tight.StepSeconds, "a looser bound waits less for the slowest")
}

// A backup worker lets sync steps go on without the slowest.
func TestABackupWorkerHidesAStraggler(t *testing.T) {
	cfg := job(consistency.Sync, 8, 2, 1<<20, 0.01)
	cfg.Jitter, cfg.Seed = 0.8, 3
	none := run(t, cfg)
	cfg.BackupWorkers = 1
	one := run(t, cfg)
	assert.Less(t, one.StepSeconds, none.StepSeconds)
}

// A worker starts when Config.Start says: alone, its job ends that much
// later and its steps do not change; in a ring, every rank waits for the
// last. Where workers contend for one shard's NIC, starting them apart
// makes their transfers take turns (as the launcher's processes, which
// come up a few hundred milliseconds apart, do), and the steps after the
// first are shorter than those of workers that all start at once.
func TestWorkersStartWhenTold(t *testing.T) {
	const m = 4 << 20
	for _, c := range []struct {
		mode    consistency.Mode
		workers int
	}{{consistency.Async, 1}, {consistency.Sync, 1}, {consistency.Ring, 2}} {
		cfg := job(c.mode, c.workers, 1, m, 0.01)
		together := run(t, cfg)
		cfg.Start = []float64{0.5} // the ring's second rank starts at 0
		if c.workers == 2 {
			cfg.Start = []float64{0, 0.5}
		}
		late := run(t, cfg)
		assert.InDelta(t, together.Seconds+0.5, late.Seconds, 1e-9, "%s", c.mode)
		assert.InDelta(t, together.SteadyStepSeconds, late.SteadyStepSeconds, 1e-9, "%s", c.mode)
	}
	cfg := job(consistency.Async, 4, 1, m, 0.01)
	cfg.Steps = 4
	together := run(t, cfg)
	cfg.Start = []float64{0, 0, 0.1, 0.1}
	apart := run(t, cfg)
	assert.Less(t, apart.SteadyStepSeconds, together.SteadyStepSeconds)
}

// A NIC's token bucket (NICBurst) lets a message that finds a direction
// idle through its first bucketful at once: alone, a worker's push and
// the reply each gain the bucket's time. Two workers that start together
// on one shard share its NIC piece by piece, and how the pieces of two
// equal messages fall decides whether they stay in lockstep, both pushes
// and then both replies on the shard's line (4M/B a step), as they do
// here without a bucket. With one, the first push to reach the idle line
// finishes a bucket ahead of the other, the gap grows each step, and
// within a few steps they take turns, one pushing while the other is
// answered (2M/B a step, less what the buckets give back), as the workers of shoal bench train do through
// the NIC model.
func TestANICsBucketWalksWorkersIntoTurns(t *testing.T) {
	const m = 900_000 // 3.4 pieces
	const c = 0.0007
	const burst = 0.002 * gbit // internal/netshape's default: 2 ms of line time
	cfg := job(consistency.Async, 1, 1, m, c)
	cfg.NICBurst = burst
	alone := run(t, cfg)
	assert.InEpsilon(t, c+2*m/gbit-2*0.002, alone.StepSeconds, 1e-9)

	cfg = job(consistency.Async, 2, 1, m, c)
	cfg.Steps = 40
	const T = m / gbit // one message on the line
	lockstep := run(t, cfg).SteadyStepSeconds
	assert.True(t, lockstep > c+3.5*T && lockstep <= c+4*T, "without a bucket: %.2f ms a step, want lockstep, %.2f to %.2f ms", 1e3*lockstep, 1e3*(c+3.5*T), 1e3*(c+4*T))
	cfg.NICBurst = burst
	turns := run(t, cfg).SteadyStepSeconds
	assert.True(t, turns > 2*T-2*0.002 && turns <= c+2*T, "with a bucket: %.2f ms a step, want turns, %.2f to %.2f ms", 1e3*turns, 1e3*(2*T-2*0.002), 1e3*(c+2*T))
}

// CPU per byte: a piece takes its time on a core of the sender before it
// leaves and on one of the receiver once it is in; the sender prepares a
// message piece after piece while the pieces before travel.
func TestCPUPerByte(t *testing.T) {
	const m, piece, perByte = 1 << 20, 256 << 10, 1e-9
	// No NIC limit: the transfer is the sender's CPU over the whole
	// message, then the receiver's over its last piece.
	cfg := job(consistency.Async, 1, 1, m, 0.002)
	cfg.NICGbps, cfg.CPUPerByte = 0, perByte
	r := run(t, cfg)
	assert.InEpsilon(t, 0.002+2*(m+piece)*perByte, r.StepSeconds, 1e-9)
	// At 1 Gbit/s (8 ns a byte) the CPU keeps ahead of the wire: only the
	// first piece's preparing and the last one's receiving add to it.
	cfg.NICGbps = 1
	r = run(t, cfg)
	assert.InEpsilon(t, 0.002+2*(m/gbit+2*piece*perByte), r.StepSeconds, 1e-9)
	// Processes that share a host's cores wait for each other's.
	cfg = job(consistency.Async, 4, 2, 4*m, 0.002)
	cfg.NICGbps, cfg.CPUPerByte = 0, perByte
	own := run(t, cfg)
	cfg.HostCores = 1
	shared := run(t, cfg)
	assert.Greater(t, shared.SteadyStepSeconds, 1.5*own.SteadyStepSeconds)
	// A cost far below the line rate costs a NIC-bound job of many
	// workers little: the egress is not held while a piece is prepared.
	// (Two async workers on one shard drift into taking turns, one's push
	// with the other's reply; a held egress kept them in step, 1.5× as
	// slow.)
	cfg = job(consistency.Async, 2, 1, 940584, 0.0012)
	cfg.Steps, cfg.Jitter, cfg.Seed, cfg.ApplyBytesPerSec = 900, 0.36, 1, 7.5e9
	free := run(t, cfg)
	cfg.CPUPerByte, cfg.HostCores = 1.35e-9, 2
	costly := run(t, cfg)
	assert.Less(t, costly.SteadyStepSeconds, 1.1*free.SteadyStepSeconds)
}

func TestBadConfigsAreRefused(t *testing.T) {
	good := job(consistency.Sync, 2, 1, 1<<20, 0.01)
	for name, mut := range map[string]func(*sim.Config){
		"no workers":              func(c *sim.Config) { c.Workers = 0 },
		"no servers":              func(c *sim.Config) { c.Servers = 0 },
		"no layers":               func(c *sim.Config) { c.Layers = nil },
		"odd layer":               func(c *sim.Config) { c.Layers = []int64{6} },
		"no compute":              func(c *sim.Config) { c.Forward, c.Backward = 0, 0 },
		"all backup":              func(c *sim.Config) { c.BackupWorkers = 2 },
		"negative NIC":            func(c *sim.Config) { c.NICGbps = -1 },
		"negative NIC burst":      func(c *sim.Config) { c.NICBurst = -1 },
		"NIC burst at NaN":        func(c *sim.Config) { c.NICBurst = math.NaN() },
		"infinite NIC burst":      func(c *sim.Config) { c.NICBurst = math.Inf(1) },
		"more shards than floats": func(c *sim.Config) { c.Layers, c.Servers = []int64{4}, 2 },
		"a start too many":        func(c *sim.Config) { c.Start = []float64{0, 0, 0} },
		"a start before 0":        func(c *sim.Config) { c.Start = []float64{0, -1} },
		"a start at NaN":          func(c *sim.Config) { c.Start = []float64{math.NaN()} },
		"negative CPU per byte":   func(c *sim.Config) { c.CPUPerByte = -1e-9 },
		"CPU per byte at NaN":     func(c *sim.Config) { c.CPUPerByte = math.NaN() },
		"negative host cores":     func(c *sim.Config) { c.HostCores = -1 },
		"a layer work too many":   func(c *sim.Config) { c.LayerWork = []float64{1, 2} },
		"a negative layer work":   func(c *sim.Config) { c.LayerWork = []float64{-1} },
		"no layer work at all":    func(c *sim.Config) { c.LayerWork = []float64{0} },
		"negative local steps":    func(c *sim.Config) { c.LocalSteps = -1 },
		"local steps in ssp":      func(c *sim.Config) { c.Mode, c.LocalSteps = consistency.SSP, 10 },
		"local steps overlapped":  func(c *sim.Config) { c.Mode, c.LocalSteps, c.Overlap = consistency.Async, 10, true },
		"negative pieces":         func(c *sim.Config) { c.Pieces = -1 },
	} {
		cfg := good
		mut(&cfg)
		_, err := sim.Run(cfg)
		assert.Error(t, err, name)
	}
}

// bigModel is shoal bench plan --model big: the MLP 784-16384-768-10
// (25.4M parameters), batch 16, as plan simulates it at 25 Gbit/s with
// the compute and optimizer speed it measured once here.
func bigModel(mode consistency.Mode, workers, servers int) sim.Config {
	layers := []int64{784 * 16384 * 4, 16384 * 4, 16384 * 768 * 4, 768 * 4, 768 * 10 * 4, 10 * 4}
	return sim.Config{Mode: mode, Workers: workers, Servers: servers, Staleness: 1, Batch: 16, Steps: 10, Layers: layers, FusionBytes: 65536,
		Forward: 0.1, Backward: 0.2, Jitter: 0.1, Seed: 1, NICGbps: 25, Latency: 25e-6, ApplyBytesPerSec: 5e9}
}

// The planner's fast path (Config.Pieces: alike shards as one, a message
// in DefaultPieces pieces) answers within 5% of the exact simulation, at
// 64 workers and each of shoal bench plan's server counts.
// So does the colocated layout, where the shards simulated as one share
// their hosts' NICs as a pool.
func TestCoarsePiecesKeepTheAnswer(t *testing.T) {
	for _, colocated := range []bool{false, true} {
		for _, mode := range []consistency.Mode{consistency.Async, consistency.Sync, consistency.SSP} {
			for _, servers := range []int{1, 4, 16, 64} {
				exact := bigModel(mode, 64, servers)
				exact.Colocated = colocated
				fast := exact
				fast.Pieces = sim.DefaultPieces
				want, got := run(t, exact), run(t, fast)
				assert.InEpsilon(t, want.StepSeconds, got.StepSeconds, 0.05, "%s, %d servers, colocated %v", mode, servers, colocated)
				assert.InEpsilon(t, want.BytesSent, got.BytesSent, 1e-9, "%s, %d servers, colocated %v", mode, servers, colocated)
				t.Logf("%s, %d servers, colocated %v: exact %.2f ms, fast %.2f ms (%+.1f%%)", mode, servers, colocated,
					want.StepSeconds*1e3, got.StepSeconds*1e3, 100*(got.StepSeconds/want.StepSeconds-1))
			}
		}
	}
	// The ring is worked out step by step, not piece by piece: the fast
	// path is the exact one.
	for _, alg := range []collective.Algorithm{collective.Ring, collective.Tree, collective.Auto} {
		exact := bigModel(consistency.Ring, 64, 0)
		exact.Allreduce = alg
		fast := exact
		fast.Pieces = sim.DefaultPieces
		assert.Equal(t, run(t, exact).StepSeconds, run(t, fast).StepSeconds, "ring/%s", alg)
	}
}

// Where the fast path cannot stand for each shard and piece (a NIC's
// burst, CPU per byte, a traced schedule), it is not taken.
func TestCoarsePiecesStepAsideForPerPieceEffects(t *testing.T) {
	for name, mut := range map[string]func(*sim.Config){
		"NIC burst":    func(c *sim.Config) { c.NICBurst = 1 << 20 },
		"CPU per byte": func(c *sim.Config) { c.CPUPerByte = 1e-9 },
		"trace":        func(c *sim.Config) { c.Trace = true },
	} {
		exact := bigModel(consistency.Async, 8, 4)
		exact.Steps = 3
		mut(&exact)
		fast := exact
		fast.Pieces = 1
		assert.Equal(t, run(t, exact).StepSeconds, run(t, fast).StepSeconds, name)
	}
}

func TestReadLayers(t *testing.T) {
	l, err := sim.ReadLayers(strings.NewReader("# a model\n10\n\n 3 \n"))
	require.NoError(t, err)
	assert.Equal(t, []int64{40, 12}, l)
	for in, want := range map[string]string{
		"10\nx\n":  `line 2: "x": want a tensor's number of floats`,
		"0\n":      `line 1: "0"`,
		"# only\n": "no tensor sizes",
	} {
		_, err := sim.ReadLayers(strings.NewReader(in))
		assert.ErrorContains(t, err, want, in)
	}
	// The files in sim/models add up to the models' published sizes.
	for file, floats := range map[string]int64{"vgg16.txt": 138357544, "resnet101.txt": 44549160, "inception_v3.txt": 27161264} {
		f, err := os.Open(filepath.Join("models", file))
		require.NoError(t, err)
		l, err := sim.ReadLayers(f)
		f.Close()
		require.NoError(t, err, file)
		var sum int64
		for _, b := range l {
			sum += b
		}
		assert.Equal(t, 4*floats, sum, file)
	}
}

// TestLocalStepsPushOnceARound: with H local steps a worker pushes and
// pulls once every H steps, so it sends 1/H of the bytes per step, and a
// round is H computes and one exchange: in sync, 4 workers on one shard
// at 1 Gbit/s, a step of compute plus a tenth of the exchange.
func TestLocalStepsPushOnceARound(t *testing.T) {
	const m, c = 8 << 20, 0.001
	for _, mode := range []consistency.Mode{consistency.Sync, consistency.Async} {
		every := run(t, job(mode, 4, 1, m, c))
		cfg := job(mode, 4, 1, m, c)
		cfg.LocalSteps = 10
		local := run(t, cfg)
		assert.InEpsilon(t, every.BytesSent/10, local.BytesSent, 1e-9, "%s", mode)
		if mode == consistency.Sync {
			exchange := every.StepSeconds - c
			assert.InEpsilon(t, c+exchange/10, local.StepSeconds, 0.1, "step %.4fs, every step's %.4fs", local.StepSeconds, every.StepSeconds)
		} else {
			// Async's pushes meet at the shard's NIC in another pattern;
			// a round still carries one exchange.
			assert.Less(t, local.StepSeconds, every.StepSeconds/5)
		}
	}
	// A run whose length is no multiple of H ends with a shorter round,
	// pushed too: 25 steps of H = 10 are 3 pushes.
	cfg := job(consistency.Sync, 2, 1, 1<<20, c)
	cfg.Steps, cfg.LocalSteps = 25, 10
	r := run(t, cfg)
	assert.InEpsilon(t, 3*float64(1<<20)/25, r.BytesSent, 1e-9)
}

// The ring mode's allreduce by recursive doubling (collective.Tree):
// log2(N) rounds of the whole bucket, two more where N is not a power of
// two; Auto takes it for small buckets on many ranks.
func TestTreeAllreduceMatchesItsFormula(t *testing.T) {
	const m = 4 << 10
	for _, tc := range []struct {
		n      int
		rounds float64
	}{{2, 1}, {8, 3}, {12, 5}, {1024, 10}} {
		cfg := job(consistency.Ring, tc.n, 0, m, 0.01)
		cfg.Latency = 25e-6
		cfg.Allreduce = collective.Tree
		r := run(t, cfg)
		assert.InEpsilon(t, 0.01+tc.rounds*(25e-6+m/gbit), r.StepSeconds, 1e-9, "N=%d", tc.n)
		assert.InEpsilon(t, tc.rounds*m, r.BytesSent, 1e-9, "N=%d", tc.n)
		cfg.Allreduce = collective.Auto
		if tc.n > 2 {
			assert.InEpsilon(t, r.StepSeconds, run(t, cfg).StepSeconds, 1e-12, "auto at N=%d, 4 KiB", tc.n)
		}
	}
	big := job(consistency.Ring, 8, 0, 64<<20, 0.01)
	ring := run(t, big)
	big.Allreduce = collective.Auto
	assert.Equal(t, ring.StepSeconds, run(t, big).StepSeconds, "auto at 64 MiB on 8 ranks: the ring")

	// On 2 hosts of 4 ranks the first two rounds (distances 1 and 2)
	// stay on the host, and in the third the host's four ranks swap with
	// the other host's at once: four vectors through each NIC each way.
	hosts := job(consistency.Ring, 8, 0, m, 0.01)
	hosts.Latency, hosts.RanksPerHost, hosts.IntraGbps, hosts.IntraLatency = 25e-6, 4, 8, 2e-6
	hosts.Allreduce = collective.Tree
	r := run(t, hosts)
	assert.InEpsilon(t, 2*(2e-6+m/(8*gbit))+25e-6+4*m/gbit, r.StepSeconds-0.01, 1e-6, "tree on 2 hosts of 4: its allreduce")
	assert.InEpsilon(t, 3*m, r.BytesSent, 1e-9)
}

// Hierarchical on hosts of L ranks (collective.Hierarchical): 2(L−1)
// rounds of M/L over the hosts' links, then 2(H−1) rounds through each
// host's NIC, where its L cross-host rings carry M/H a round; the flat
// ring on the same hosts is 2(N−1) rounds of M/N, each the slower of a
// NIC hop and a host hop; where N is no multiple of L, hierarchical is
// the ring. Auto takes it for a large bucket on 2×4.
func TestHierarchicalAllreduceMatchesItsFormula(t *testing.T) {
	const (
		m       = 4 << 20
		alpha   = 25e-6
		intraA  = 2e-6
		intraGb = 8.0 // Gbit/s: the host's links 8 times the NIC's
	)
	for _, tc := range []struct{ n, l int }{{8, 4}, {8, 2}, {512, 4}, {4, 4}, {8, 1}} {
		cfg := job(consistency.Ring, tc.n, 0, m, 0.01)
		cfg.Latency, cfg.IntraLatency, cfg.IntraGbps, cfg.RanksPerHost = alpha, intraA, intraGb, tc.l
		cfg.Allreduce = collective.Hierarchical
		r := run(t, cfg)
		l, n := float64(tc.l), float64(tc.n)
		h := n / l
		comm := 2*(l-1)*(intraA+m/l/(intraGb*gbit)) + 2*(h-1)*(alpha+m/h/gbit)
		assert.InEpsilon(t, 0.01+comm, r.StepSeconds, 1e-9, "N=%d, L=%d", tc.n, tc.l)
		assert.InEpsilon(t, 2*(l-1)*m/l+2*(h-1)*m/n, r.BytesSent, 1e-9, "N=%d, L=%d", tc.n, tc.l)

		cfg.Allreduce = collective.Ring
		ring := run(t, cfg)
		round := max(alpha+m/n/gbit, intraA+m/n/(intraGb*gbit))
		assert.InEpsilon(t, 0.01+2*(n-1)*round, ring.StepSeconds, 1e-9, "ring on hosts, N=%d, L=%d", tc.n, tc.l)
	}
	uneven := job(consistency.Ring, 6, 0, m, 0.01)
	uneven.RanksPerHost, uneven.IntraGbps = 4, intraGb
	ring := run(t, uneven)
	uneven.Allreduce = collective.Hierarchical
	assert.Equal(t, ring.StepSeconds, run(t, uneven).StepSeconds, "6 ranks on hosts of 4: the ring")
	auto := job(consistency.Ring, 8, 0, m, 0.01)
	auto.RanksPerHost, auto.IntraGbps, auto.Latency = 4, intraGb, alpha
	auto.Allreduce = collective.Hierarchical
	hier := run(t, auto)
	auto.Allreduce = collective.Auto
	assert.Equal(t, hier.StepSeconds, run(t, auto).StepSeconds, "auto at 4 MiB on 2x4: hierarchical")
}

// Per-host aggregation: the shards see the hosts, every step pays the
// host's reduce and broadcast, 2(k−1)(α + M/(kβ)) + (k−1)α + M/β, and
// the traffic per worker is the hosts' shared by their workers.
func TestHostsAggregateBeforePushing(t *testing.T) {
	const m = 4 << 20
	h := sim.Hosts{PerHost: 2, BytesPerSec: 4e9, Latency: 1e-6}
	assert.InEpsilon(t, 2*(1e-6+m/2/4e9)+1e-6+m/4e9, h.StepSeconds(m), 1e-12)
	assert.Zero(t, sim.Hosts{PerHost: 1, BytesPerSec: 1}.StepSeconds(m), "a host of one has nothing to reduce")

	// Without a network, a sync step is compute plus the host's share.
	cfg := job(consistency.Sync, 4, 1, m, 0.01)
	cfg.NICGbps = 0
	r, err := sim.RunHosts(cfg, h)
	require.NoError(t, err)
	assert.InEpsilon(t, 0.01+h.StepSeconds(m), r.SteadyStepSeconds, 1e-9)
	assert.InEpsilon(t, 0.01, r.ComputeSeconds, 1e-9)

	// Free aggregation: the hosts' job, with every worker's samples and
	// half the bytes per worker (the others send nothing).
	cfg = job(consistency.Sync, 4, 1, m, 0.01)
	got, err := sim.RunHosts(cfg, sim.Hosts{PerHost: 2})
	require.NoError(t, err)
	hosts := run(t, job(consistency.Sync, 2, 1, m, 0.01))
	alone := run(t, cfg)
	assert.InEpsilon(t, hosts.StepSeconds, got.StepSeconds, 1e-9)
	assert.InEpsilon(t, 2*hosts.SamplesPerSec, got.SamplesPerSec, 1e-9)
	assert.InEpsilon(t, alone.BytesSent/2, got.BytesSent, 1e-6, "a host pushes what one worker does, for two")
	assert.Less(t, got.StepSeconds, alone.StepSeconds, "two pushes through the shard's NIC instead of four")

	for _, tc := range []struct {
		name string
		cfg  sim.Config
		h    sim.Hosts
		want string
	}{
		{"ring", job(consistency.Ring, 4, 0, m, 0.01), sim.Hosts{PerHost: 2}, "only the parameter-server modes"},
		{"uneven", job(consistency.Sync, 3, 1, m, 0.01), sim.Hosts{PerHost: 2}, "3 workers in hosts of 2"},
		{"none", job(consistency.Sync, 4, 1, m, 0.01), sim.Hosts{}, "0 workers per host"},
	} {
		_, err := sim.RunHosts(tc.cfg, tc.h)
		assert.ErrorContains(t, err, tc.want, tc.name)
	}
}

// TestFragmentsSendAFifthAnExchangeAndOverlap: with H = 10 local steps in
// F = 5 fragments a sync worker exchanges every 2 steps, each exchange
// 1/5 of the vector, so it sends the bytes per step of whole-vector
// DiLoCo in five times as many exchanges; overlapping each exchange
// with the next step (τ = 1) hides a step of compute behind it, so its
// step is shorter than without overlap by about a step's compute every
// 2 steps, while the exchange is longer than the compute.
func TestFragmentsSendAFifthAnExchangeAndOverlap(t *testing.T) {
	const m, c = 8 << 20, 0.02
	cfg := job(consistency.Sync, 4, 1, m, c)
	cfg.LocalSteps = 10
	whole := run(t, cfg)
	cfg.Fragments = 5
	blocking := run(t, cfg)
	cfg.FragmentOverlap = 1
	overlapped := run(t, cfg)
	t.Logf("step: whole %.4fs, 5 fragments %.4fs, overlapped %.4fs; bytes sent per step %.0f, %.0f, %.0f",
		whole.StepSeconds, blocking.StepSeconds, overlapped.StepSeconds, whole.BytesSent, blocking.BytesSent, overlapped.BytesSent)
	assert.InEpsilon(t, whole.BytesSent, blocking.BytesSent, 1e-6, "the same bytes per step")
	assert.InEpsilon(t, whole.BytesSent, overlapped.BytesSent, 1e-6)
	// Without overlap a 2-step window is 2 computes and one exchange of a
	// fifth of the vector; with it, one compute of the two runs beside
	// the exchange.
	exchange := 2 * (blocking.StepSeconds - c)
	assert.Greater(t, exchange, c, "the exchange outlasts a step: the overlap can hide a whole step")
	assert.InEpsilon(t, blocking.StepSeconds-c/2, overlapped.StepSeconds, 0.1, "a step's compute hidden every 2 steps")
	bad := cfg
	bad.FragmentOverlap = 2
	_, err := sim.Run(bad)
	assert.ErrorContains(t, err, "want 0..H/F-1")
	bad = cfg
	bad.Fragments = 3
	_, err = sim.Run(bad)
	assert.ErrorContains(t, err, "want a divisor of the local steps")
}

// The colocated layout (BytePS's): with a shard on every worker's host,
// a sync step moves M(N−1)/N through each NIC per direction to push and
// as much to pull (the 1/N for the host's own shard stays on the host),
// 2(N−1)/N·M/B in all, the ring's bandwidth term; on shards of their
// own each worker's NIC carries all of M each way, 2M/B. With fewer
// shards than workers, the NIC of a host with a shard takes in the
// other N−1 workers' pushes to it, (N−1)·M/S, and sends as much back,
// and every worker waits for it at the barrier: 2(N−1)·M/S against
// the dedicated shards' 2N·M/S.
func TestColocatedShardsShareTheWorkersNICs(t *testing.T) {
	const m, c = 64 << 20, 0.01
	for _, tc := range []struct {
		name      string
		n, s      int
		colocated bool
		comm      float64 // bytes through the busiest NIC, push and pull
	}{
		{"dedicated, a shard a worker", 4, 4, false, 2 * m},
		{"colocated, a shard a worker", 4, 4, true, 2 * 3.0 / 4 * m},
		{"colocated, 8 workers, 2 shards", 8, 2, true, 2 * 7 * m / 2},
		{"dedicated, 8 workers, 2 shards", 8, 2, false, 2 * 8 * m / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := job(consistency.Sync, tc.n, tc.s, m, c)
			cfg.Steps, cfg.Colocated = 4, tc.colocated
			r := run(t, cfg)
			// The second step of worker 0: compute, the push, the barrier,
			// the weights back (the last step has no reply to wait for).
			assert.InEpsilon(t, c+tc.comm/gbit, r.StepDurations[0], 0.01)
		})
	}
	_, err := sim.Run(sim.Config{Mode: consistency.Sync, Workers: 2, Servers: 4, Batch: 1, Steps: 1, Layers: []int64{1 << 20}, Forward: 1, Colocated: true})
	assert.ErrorContains(t, err, "at most one server a worker")
	_, err = sim.Run(sim.Config{Mode: consistency.Ring, Workers: 2, Batch: 1, Steps: 1, Layers: []int64{1 << 20}, Forward: 1, Colocated: true})
	assert.ErrorContains(t, err, "want a parameter-server mode")
}
