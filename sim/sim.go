package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
)

// Config is one job to simulate. Times are seconds, sizes bytes.
type Config struct {
	Mode consistency.Mode
	// Workers and Servers (PS modes); BackupWorkers (sync) and Staleness
	// (SSP) as the flags of shoal train.
	Workers, Servers int
	BackupWorkers    int
	Staleness        int64
	// Batch is per worker and step; Steps is how many each worker runs.
	Batch, Steps int
	// Layers are the model's tensors' sizes in bytes, in layout order
	// (the order of the parameter vector); their sum is the vector.
	Layers []int64
	// LayerWork, when set, is each layer's share of backward (any unit:
	// nn.TensorWork's multiply-adds per sample), in the order of Layers.
	// Backward produces the gradients last layer first, each once its
	// share of the backward time is done, and the ring reduces a bucket
	// as soon as its gradients are there. Without it a layer's share is
	// its size, which has a CNN's large last layers ready near the end of
	// backward although its convolutions, small in bytes, do most of it.
	LayerWork []float64
	// ChunkBytes is the shard plan's chunk size (default 1 MiB);
	// FusionBytes the ring's bucket size (0: one allreduce after
	// backward).
	ChunkBytes, FusionBytes int64
	// Allreduce is the ring mode's algorithm, as shoal worker
	// --allreduce-algorithm: collective.Ring (the default), Tree
	// (recursive doubling), Hierarchical (by hosts of RanksPerHost) or
	// Auto (collective.ChooseAlgorithmOnHosts, bucket by bucket).
	Allreduce collective.Algorithm
	// RanksPerHost (ring mode), when > 1, puts the ranks on hosts of that
	// many (in rank order), which share one NIC of NICGbps and Latency
	// and reach each other over links of IntraGbps per direction (0:
	// infinite) and IntraLatency. Hierarchical runs its host phases on
	// those links and its cross-host rings through the NIC, the host's L
	// rings at once; the ring crosses each NIC once per direction, so a
	// round is the slower of a NIC hop and a host hop, each of 1/N of the
	// bucket. Tree, where N and RanksPerHost are powers of two, runs its
	// rounds of a distance under RanksPerHost on the host's links and
	// the others through the NIC, every rank of a host at once (the NIC
	// carries RanksPerHost vectors a round); elsewhere it is priced as
	// without hosts, every rank at NIC speed (optimistic). Where N is no
	// multiple of RanksPerHost, Hierarchical is the ring, as collective
	// runs it on hosts of different sizes.
	RanksPerHost            int
	IntraGbps, IntraLatency float64
	// Forward and Backward are one step's compute; Jitter, when > 0, is
	// the standard deviation of a log-normal factor on each step's
	// compute (mean 1), drawn from Seed.
	Forward, Backward float64
	Jitter            float64
	Seed              uint64
	// NICGbps per direction of every process (0: infinite), Latency one
	// way.
	NICGbps, Latency float64
	// NICBurst is the depth, in bytes, of a token bucket on each
	// direction of every NIC (with NICGbps): a direction that was idle
	// lets that much through at once before the line rate holds it, as
	// the NIC model of shoal bench train does (internal/netshape: 2 ms of
	// line time). 0, a real line's behaviour: never faster than the rate.
	// The bucket favours the first of two messages that meet on an idle
	// line, which walks workers that push together into taking turns.
	NICBurst float64
	// ApplyBytesPerSec is how fast a shard, or a ring rank, applies the
	// optimizer step to the weights (0: at once).
	ApplyBytesPerSec float64
	// CPUPerByte is what a parameter-server transfer costs the CPU per
	// byte at each end (gRPC's framing and copies, the kernel's): a piece
	// takes that long on a core of its sender before it leaves and on one
	// of its receiver once it is in. HostCores, when > 0, puts every
	// process on one host of that many cores, which they share for it;
	// 0 gives each process a core of its own. The ring's transfers are
	// not charged (raw TCP or shared memory, a fraction of gRPC's cost),
	// nor is compute, whose measured time already includes what sharing
	// the cores did to it.
	CPUPerByte float64
	HostCores  int
	// LocalSteps (sync, async), when > 1, is low-communication training
	// (shoal train --local-steps): a worker pushes and pulls once every
	// LocalSteps steps (and on its last), computing alone in between; the
	// shards' clock counts those rounds. 0 and 1: every step.
	LocalSteps int
	// Fragments, when > 1 with LocalSteps, is streaming fragments (shoal
	// train --fragments): a worker exchanges one fragment, 1/Fragments of
	// each shard's share, every LocalSteps/Fragments steps (a divisor),
	// and the shards' clock counts those exchanges. FragmentOverlap is
	// how many steps the worker computes while an exchange is in flight
	// before it needs its reply (--fragment-overlap, less than
	// LocalSteps/Fragments; 0 waits for it).
	Fragments, FragmentOverlap int
	// Colocated (PS modes) puts the shards on the workers' hosts, as
	// BytePS's colocated layout does: shard s runs on the host of worker
	// s·Workers/Servers and shares that worker's NIC, both directions, so
	// the shards' traffic and the workers' meet on the same lines; a
	// worker's transfers to the shard on its own host cross no NIC and
	// take no latency (its requests and acknowledgements keep theirs).
	// Servers at most Workers. With Pieces and a shard on every worker's
	// host, shards simulated as one (a class) share their hosts' NICs as
	// a pool (with fewer shards each is simulated alone): a
	// piece of a host's worker passes its own line and takes its share of
	// the pool's, and the class's traffic to its own hosts is counted as
	// crossing the NIC too (1/count of it does not, in the exact layout).
	Colocated bool
	// Overlap (async): each step's push and the next step's pull go at
	// once, as shoal train --overlap-push-pull sends them; the pull gets
	// the weights the shard has when it comes, the push applied or not.
	Overlap bool
	// Start is when each worker begins its first step, in seconds after
	// the first (a worker past the list's end starts at 0): a launcher's
	// processes come up one after another, and that stagger shapes the
	// first steps of a PS job. The ring waits for its slowest rank.
	Start []float64
	// Trace records, in Result.Schedule, the order in which shard 0
	// applied the pushes and answered the reads (PS modes).
	Trace bool
	// Pieces, when > 0, lets the PS modes simulate fewer, larger pieces
	// (a planner's what-if at a thousand workers; 0: exact): shards with
	// alike chunks (as many, each within 0.1%: the shard plan's differ by
	// a float) are simulated as one shard with their NICs and cores
	// together (each a copy of the others, they see the same traffic from
	// every worker), and a message to them goes in Pieces
	// pieces, or in pieces of 256 KiB for each shard if those are larger.
	// Ignored, exact, with Trace, NICBurst, CPUPerByte or HostCores,
	// whose effects depend on each shard and piece. DefaultPieces is what
	// shoal bench plan uses.
	Pieces int
}

// DefaultPieces is the Config.Pieces of shoal bench plan: 8 pieces a
// message (TestCoarsePiecesKeepTheAnswer holds its answer within 5% of
// the exact one at 64 workers; it was within 3% of it at every server
// count of shoal bench plan's 25.4M-parameter model).
const DefaultPieces = 8

// Op is one thing shard 0 did for a worker: applied (sync: took in) its
// push of Step, or gave it the weights it computes Step with (Read).
// Reads for a step past the last are not recorded.
type Op struct {
	Worker int   `json:"worker"`
	Step   int64 `json:"step"`
	Read   bool  `json:"read,omitempty"`
}

// Result is what a simulated job did.
type Result struct {
	// Seconds is when the last worker finished; StepSeconds the mean step
	// of a worker (its steps over its time).
	Seconds, StepSeconds float64
	// SteadyStepSeconds is the mean of every worker's steps but its first
	// (which, in the PS modes, waits for the first pull of the weights),
	// as shoal bench train's step time is measured; StepSeconds when
	// there is one step.
	SteadyStepSeconds float64
	// SamplesPerSec counts every worker's samples over Seconds.
	SamplesPerSec float64
	// Efficiency is SamplesPerSec against N workers that only compute.
	Efficiency float64
	// ComputeSeconds and CommSeconds split a worker's mean step: its own
	// compute, and the rest (communication and waiting).
	ComputeSeconds, CommSeconds float64
	// BytesSent and BytesReceived are per worker and step.
	BytesSent, BytesReceived float64
	// Staleness counts pushes by how many updates their shard had applied
	// since the worker's values were read (async and SSP; shard 0).
	Staleness consistency.Staleness
	// Schedule is shard 0's order of pushes and reads (Config.Trace).
	Schedule []Op `json:"-"`
	// StepDurations are every worker's steps but its first, and
	// ComputeDurations their compute, worker after worker.
	StepDurations, ComputeDurations []float64 `json:"-"`
}

// VectorBytes is the sum of the layers.
func (c Config) VectorBytes() int64 {
	var n int64
	for _, l := range c.Layers {
		n += l
	}
	return n
}

func (c Config) validate() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("sim: %d workers, want >= 1", c.Workers)
	case c.Mode.UsesServers() && c.Servers < 1:
		return fmt.Errorf("sim: %d servers, want >= 1 in %s mode", c.Servers, c.Mode)
	case c.Batch < 1 || c.Steps < 1:
		return fmt.Errorf("sim: batch %d, steps %d: want both >= 1", c.Batch, c.Steps)
	case len(c.Layers) == 0 || c.VectorBytes() < 4:
		return errors.New("sim: no layers: want the model's tensor sizes in bytes")
	case c.Forward < 0 || c.Backward < 0 || c.Forward+c.Backward <= 0:
		return fmt.Errorf("sim: forward %gs, backward %gs: want >= 0 and some compute", c.Forward, c.Backward)
	case c.NICGbps < 0 || c.Latency < 0 || !(c.NICBurst >= 0) || math.IsInf(c.NICBurst, 1) || c.ApplyBytesPerSec < 0 || c.Jitter < 0 || !(c.CPUPerByte >= 0) || c.HostCores < 0:
		return errors.New("sim: NIC rate, latency, NIC burst (finite), apply rate, jitter, CPU per byte and host cores must be >= 0")
	case c.BackupWorkers < 0 || c.BackupWorkers >= c.Workers:
		return fmt.Errorf("sim: %d backup workers of %d, want 0..workers-1", c.BackupWorkers, c.Workers)
	case c.Staleness < 0:
		return fmt.Errorf("sim: staleness %d, want >= 0", c.Staleness)
	case len(c.Start) > c.Workers:
		return fmt.Errorf("sim: %d start times for %d workers, want at most one each", len(c.Start), c.Workers)
	case c.LocalSteps < 0:
		return fmt.Errorf("sim: %d local steps, want >= 0", c.LocalSteps)
	case c.LocalSteps > 1 && c.Mode != consistency.Sync && c.Mode != consistency.Async:
		return fmt.Errorf("sim: local steps in %s mode: only sync and async take them", c.Mode)
	case c.Fragments < 0 || c.Fragments > 1 && (c.LocalSteps < c.Fragments || c.LocalSteps%c.Fragments != 0):
		return fmt.Errorf("sim: %d fragments with %d local steps: want a divisor of the local steps", c.Fragments, c.LocalSteps)
	case c.FragmentOverlap < 0 || c.FragmentOverlap > 0 && c.FragmentOverlap >= c.LocalSteps/max(c.Fragments, 1):
		return fmt.Errorf("sim: a fragment overlap of %d steps with %d local steps in %d fragments: want 0..H/F-1", c.FragmentOverlap, c.LocalSteps, c.Fragments)
	case c.LocalSteps > 1 && c.Overlap:
		return errors.New("sim: local steps with overlapped push and pull: a worker of local steps pushes once a round")
	case c.Allreduce < collective.Ring || c.Allreduce > collective.Hierarchical:
		return fmt.Errorf("sim: allreduce algorithm %v, want Ring, Tree, Auto or Hierarchical", c.Allreduce)
	case c.RanksPerHost < 0 || !(c.IntraGbps >= 0) || !(c.IntraLatency >= 0):
		return fmt.Errorf("sim: %d ranks a host, host links of %g Gbit/s and %gs latency: want all >= 0", c.RanksPerHost, c.IntraGbps, c.IntraLatency)
	case c.Pieces < 0:
		return fmt.Errorf("sim: %d pieces, want >= 0 (0: exact)", c.Pieces)
	case c.Colocated && (!c.Mode.UsesServers() || c.Servers > c.Workers):
		return fmt.Errorf("sim: colocated shards in %s mode, %d servers on %d workers' hosts: want a parameter-server mode and at most one server a worker", c.Mode, c.Servers, c.Workers)
	case c.Overlap && c.Mode != consistency.Async:
		return fmt.Errorf("sim: overlapped push and pull in %s mode: only async overlaps them", c.Mode)
	}
	for i, t := range c.Start {
		if !(t >= 0) || math.IsInf(t, 1) {
			return fmt.Errorf("sim: worker %d starts at %gs, want a finite time >= 0", i, t)
		}
	}
	for _, l := range c.Layers {
		if l <= 0 || l%4 != 0 {
			return fmt.Errorf("sim: a layer of %d bytes, want a positive multiple of 4 (float32)", l)
		}
	}
	if c.LayerWork != nil {
		if len(c.LayerWork) != len(c.Layers) {
			return fmt.Errorf("sim: %d layer works for %d layers, want one each", len(c.LayerWork), len(c.Layers))
		}
		var sum float64
		for i, w := range c.LayerWork {
			if !(w >= 0) || math.IsInf(w, 1) {
				return fmt.Errorf("sim: layer %d's work is %g, want a finite number >= 0", i, w)
			}
			sum += w
		}
		if !(sum > 0) {
			return errors.New("sim: the layers' work adds up to 0, want some")
		}
	}
	return nil
}

// maxEvents bounds a run, far above what the largest plan needs.
const maxEvents = 1 << 31

// Run simulates cfg.
func Run(cfg Config) (Result, error) {
	if cfg.ChunkBytes == 0 {
		cfg.ChunkBytes = 1 << 20
	}
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	if cfg.Mode == consistency.SSP && cfg.Staleness == 0 {
		cfg.Mode = consistency.Sync // as the shards do: SSP's bound 0 is the sync barrier
	}
	j := &job{cfg: cfg, e: &engine{}, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5349_4d55))}
	j.net = &network{e: j.e, latency: cfg.Latency, piece: pieceBytes}
	if cfg.NICGbps > 0 {
		j.net.bps = cfg.NICGbps * 1e9 / 8
		j.net.burst = cfg.NICBurst / j.net.bps
	}
	j.net.perByte = cfg.CPUPerByte
	j.workers = make([]*simWorker, cfg.Workers)
	for i := range j.workers {
		j.workers[i] = &simWorker{id: i, nic: nic{cores: j.cores()}}
	}
	var err error
	if cfg.Mode == consistency.Ring {
		err = j.startRing()
	} else {
		err = j.startPS()
	}
	if err != nil {
		return Result{}, err
	}
	if !j.e.run(maxEvents) {
		return Result{}, errors.New("sim: the job did not end within its event budget")
	}
	return j.result()
}

// job is one simulation's state.
type job struct {
	cfg     Config
	e       *engine
	net     *network
	rng     *rand.Rand
	workers []*simWorker
	shards  []*simShard
	ps      []psWorker
	stale   consistency.Staleness
	// Ring: the buckets' sizes and when in backward each is ready.
	bucketSizes, bucketReady []float64
	ring                     *ringState
	schedule                 []Op
	host                     *cores // the shared host's (Config.HostCores)
}

// cores is where a new process spends CPU per byte: the shared host's
// (Config.HostCores), else a core of its own.
func (j *job) cores() *cores {
	if j.cfg.HostCores == 0 {
		return newCores(1)
	}
	if j.host == nil {
		j.host = newCores(j.cfg.HostCores)
	}
	return j.host
}

// trace records op of shard s when the schedule is kept (shard 0 only).
func (j *job) trace(s *simShard, op Op) {
	if j.cfg.Trace && s.id == 0 && (!op.Read || op.Step < int64(j.cfg.Steps)) {
		j.schedule = append(j.schedule, op)
	}
}

type simWorker struct {
	id      int
	nic     nic
	cpu     cpu
	step    int     // steps done
	compute float64 // total compute time
	end     float64 // when its last step ended
	// The steps after the first: how long each took, and its compute.
	steady, steadyCompute []float64
	stepCompute           float64 // the current step's compute
}

// pieceBytes is the unit in which the network moves a message: the NIC
// model's (internal/netshape) largest piece, so that the streams sharing a
// NIC take turns as finely as the measured runs' do.
const pieceBytes = 256 << 10

// stepDone ends w's current step now.
func (j *job) stepDone(w *simWorker) {
	if w.step > 0 {
		w.steady = append(w.steady, j.e.now-w.end)
		w.steadyCompute = append(w.steadyCompute, w.stepCompute)
	}
	w.step++
	w.end = j.e.now
}

// applyTime is how long the optimizer takes over bytes of weights (0:
// no apply cost configured).
func (j *job) applyTime(bytes float64) float64 {
	if r := j.cfg.ApplyBytesPerSec; r > 0 {
		return bytes / r
	}
	return 0
}

// start is when worker w begins (Config.Start).
func (j *job) start(w int) float64 {
	if w < len(j.cfg.Start) {
		return j.cfg.Start[w]
	}
	return 0
}

// computeTime is one step's forward and backward, with jitter.
func (j *job) computeTime() (fwd, bwd float64) {
	f := 1.0
	if s := j.cfg.Jitter; s > 0 {
		f = math.Exp(s*j.rng.NormFloat64() - s*s/2)
	}
	return j.cfg.Forward * f, j.cfg.Backward * f
}

func (j *job) result() (Result, error) {
	var r Result
	var steps, compute, sent, received float64
	for _, w := range j.workers {
		if w.step != j.cfg.Steps {
			return Result{}, fmt.Errorf("sim: worker %d ended after %d of %d steps: the simulation deadlocked (a bug)", w.id, w.step, j.cfg.Steps)
		}
		r.Seconds = max(r.Seconds, w.end)
		steps += float64(w.step)
		compute += w.compute
		r.StepDurations = append(r.StepDurations, w.steady...)
		r.ComputeDurations = append(r.ComputeDurations, w.steadyCompute...)
		sent += w.nic.sent
		received += w.nic.received
	}
	n := float64(j.cfg.Workers)
	perWorker := steps / n
	r.StepSeconds = r.Seconds / perWorker
	r.SteadyStepSeconds = r.StepSeconds
	if len(r.StepDurations) > 0 {
		var sum float64
		for _, d := range r.StepDurations {
			sum += d
		}
		r.SteadyStepSeconds = sum / float64(len(r.StepDurations))
	}
	r.SamplesPerSec = steps * float64(j.cfg.Batch) / r.Seconds
	r.Efficiency = r.SamplesPerSec / (n * float64(j.cfg.Batch) / (j.cfg.Forward + j.cfg.Backward))
	r.ComputeSeconds = compute / steps
	r.CommSeconds = max(r.StepSeconds-r.ComputeSeconds, 0)
	r.BytesSent, r.BytesReceived = sent/steps, received/steps
	r.Staleness = j.stale
	r.Schedule = j.schedule
	return r, nil
}

// maxMessages bounds the messages of one push (or reply) to one shard:
// a shard's chunks are grouped into at most this many, in order. A
// chunk is the unit a shard applies and sends back in async mode, so
// grouping coarsens that pipeline a little where a shard owns many
// chunks, and keeps a job of a thousand workers and shards simulable.
const maxMessages = 8

// plan is the shard plan of the vector as shoal ps cuts it: each
// shard's chunks, in bytes, grouped into at most maxMessages messages.
func (c Config) plan() ([][]float64, error) {
	p, err := shard.New(int(c.VectorBytes()/4), c.Servers, int(c.ChunkBytes))
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	out := make([][]float64, c.Servers)
	for s := range out {
		rs := p.Ranges(s)
		sizes := make([]float64, len(rs))
		for i, r := range rs {
			sizes[i] = 4 * float64(r.Len)
		}
		out[s] = group(sizes, maxMessages)
	}
	return out, nil
}

// group adds consecutive sizes into at most n groups, as even in count
// as they come.
func group(sizes []float64, n int) []float64 {
	n = min(len(sizes), n)
	out := make([]float64, n)
	for i, b := range sizes {
		out[i*n/len(sizes)] += b
	}
	return out
}

// shardClass is shards simulated as one (Config.Pieces): count shards
// with the same messages, each of chunks' bytes, piece the bytes of a
// piece of a message to all of them together.
type shardClass struct {
	chunks  []float64
	count   int
	piece   float64
	members []int // the shards of the plan it stands for
}

// coarse says whether the job may be simulated in fewer, larger pieces
// (Config.Pieces).
func (c Config) coarse() bool {
	return c.Pieces > 0 && !c.Trace && c.NICBurst == 0 && c.CPUPerByte == 0 && c.HostCores == 0
}

// classes are the shards to simulate: each shard of the plan alone, or,
// coarse, the shards with alike messages as one (a class), the pieces of
// a message as large as Pieces a message needs. Alike is as many
// messages, each within alikeBytes of the first member's: the shard plan
// cuts chunks of q or q+1 floats, so shards differ by a float a chunk at
// most, and which shards own the longer chunks would otherwise split
// them into many classes of one. A class's messages are its members'
// added up (the bytes are exact; each member's load is their mean, which
// is off a member's by the same 0.1% at most). Shards with alike
// messages receive alike pieces from each worker at the same rate, so
// one of their NICs and cores together (count times one's) passes the
// same bytes at about the same times as they do, up to how the pieces of
// one worker interleave on its NIC. Colocated shards are merged only
// where there is one on every worker's host.
func (c Config) classes() ([]shardClass, error) {
	plan, err := c.plan()
	if err != nil {
		return nil, err
	}
	if !c.coarse() {
		out := make([]shardClass, len(plan))
		for i, chunks := range plan {
			out[i] = shardClass{chunks: chunks, count: 1, piece: pieceBytes, members: []int{i}}
		}
		return out, nil
	}
	var out []shardClass
	first := map[int][]int{} // classes by their messages' count
	// Colocated shards on some of the workers' hosts load those hosts
	// apart from the others, which a pool cannot stand for: only where
	// every worker's host has one are they alike.
	merge := !c.Colocated || c.Servers == c.Workers
next:
	for s, chunks := range plan {
		for _, i := range first[len(chunks)] {
			if !merge {
				break
			}
			if alike(plan[out[i].members[0]], chunks) {
				cl := &out[i]
				cl.count++
				cl.members = append(cl.members, s)
				for k, b := range chunks {
					cl.chunks[k] += b
				}
				continue next
			}
		}
		first[len(chunks)] = append(first[len(chunks)], len(out))
		out = append(out, shardClass{chunks: slices.Clone(chunks), count: 1, members: []int{s}})
	}
	for i := range out {
		cl := &out[i]
		cl.piece = max(pieceBytes*float64(cl.count), math.Ceil(slices.Max(cl.chunks)/float64(c.Pieces)))
	}
	return out, nil
}

// alikeBytes is how far, relative to its size, a message of one shard
// may be from another's for the two to be simulated as one (classes).
const alikeBytes = 1e-3

// alike says whether two shards' messages, as many, are each within
// alikeBytes of each other.
func alike(a, b []float64) bool {
	for k := range a {
		if math.Abs(a[k]-b[k]) > alikeBytes*a[k] {
			return false
		}
	}
	return true
}

// host is the worker on whose host shard s of servers runs in the
// colocated layout (Config.Colocated): the shards spread evenly over the
// workers' hosts.
func host(s, servers, workers int) int { return s * workers / servers }

// MeasureOptimizer times momentum steps on a vector of floats floats (at
// least 1M) here and returns the bytes of weights updated per second,
// the best of three tries (the first touches fresh memory): the apply
// rate of shards and ranks for Config.ApplyBytesPerSec.
func MeasureOptimizer(floats int) float64 {
	n := max(floats, 1<<20)
	cfg := optim.DefaultConfig()
	cfg.Algorithm = optim.Momentum
	o, err := optim.New(cfg, n)
	if err != nil {
		panic(err) // a valid config
	}
	p, g := make([]float32, n), make([]float32, n)
	best := 0.0
	for range 3 {
		start := time.Now()
		for range 5 {
			_ = o.Step(p, g)
		}
		best = max(best, 5*4*float64(n)/time.Since(start).Seconds())
	}
	return best
}
