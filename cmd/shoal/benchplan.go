package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/shoalml/shoal/bench/harness"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
)

const benchPlanSynopsis = `Predicts, by simulation (package sim), how the modes compare for a job of
--workers workers behind NICs of --nic-gbps: per mode and server count, the step
time, samples/s, scaling efficiency (against the workers computing alone) and
traffic, and which setup wins. The compute per step and the optimizer's speed are
measured on this machine first (shoal bench compute's loop, one thread) unless
--compute and --apply-gbps give them. Simulated, not measured: docs/BENCHMARKS.md
says how close the simulator comes to measured runs. --model also takes the names
of shoal bench train --models (big: --hidden 16384,768 --batch 16, the 25.4M-
parameter MLP; big-6m, mlp-25m, mlp-6m), whose flags yield to those given.`

// benchPlanFlags are shoal bench plan's flags.
type benchPlanFlags struct {
	job       simJobFlags
	cfg       harness.PlanConfig
	modeList  string  // --modes, which parseBenchPlan reads into modes
	apply     float64 // GB/s
	layerFile string
	update    flags.Update // --target's emulations
	local     flags.LocalSteps
	outer     flags.Outer // --target's emulations of the local-steps setups
	// intraLatency is --intra-latency, into Sim.IntraLatency.
	intraLatency time.Duration
	hostGbps     float64 // --host-gbps
	colocated    string  // --colocated-servers
}

func (f *benchPlanFlags) register(fs *flag.FlagSet) {
	f.job.register(fs)
	c := &f.cfg
	fs.IntVar(&c.Sim.Workers, "workers", 64, "workers of the job")
	fs.StringVar(&c.ServerList, "servers", "", "server counts to try in the PS modes, e.g. 1,4,16 (default: 1, then ×4 up to the workers, and the workers' count)")
	fs.StringVar(&f.colocated, "colocated-servers", "", "server counts at which each PS mode is tried again with the servers on the workers' hosts, sharing their NICs, as sync-colo (default: one a worker, BytePS's layout; none: not tried)")
	fs.StringVar(&f.modeList, "modes", "async,sync,ssp,ring", "modes to simulate")
	fs.IntVar(&c.Sim.Batch, "batch", 64, "batch per worker")
	fs.Float64Var(&f.apply, "apply-gbps", 0, "optimizer speed, GB/s of weights updated (0: measure it here)")
	fs.Int64Var(&c.Sim.FusionBytes, "fusion-bytes", 65536, "ring: bucket size (0: one allreduce after backward)")
	fs.IntVar(&c.Sim.RanksPerHost, "ranks-per-host", 1, "ring: ranks on each host, sharing its NIC; above 1 the plan adds ring/hierarchical (Horovod's hierarchical allreduce)")
	fs.Float64Var(&c.Sim.IntraGbps, "intra-gbps", 0, "ring, with --ranks-per-host: the link between two ranks of a host, Gbit/s per direction (0: infinite)")
	fs.DurationVar(&f.intraLatency, "intra-latency", 0, "ring, with --ranks-per-host: one-way latency between two ranks of a host")
	fs.Int64Var(&c.Sim.ChunkBytes, "chunk-bytes", 1<<20, "PS: the shard plan's chunk size")
	fs.Int64Var(&c.Sim.Staleness, "staleness", 1, "ssp: the bound")
	fs.IntVar(&c.Sim.BackupWorkers, "backup-workers", 0, "sync: backup workers")
	fs.IntVar(&c.Sim.Steps, "steps", 10, "steps simulated per worker")
	f.local.Register(fs) // each sync and async setup again with it, as sync-hH and async-hH
	f.outer.Register(fs)
	fs.IntVar(&c.Hosts.PerHost, "workers-per-host", 0, "each PS setup again with per-host aggregation (shoal train --host-aggregate) of this many workers a host, as sync-hostK (0, 1: none)")
	fs.Float64Var(&f.hostGbps, "host-gbps", 80, "--workers-per-host: the bandwidth between a host's workers (shared memory), Gbit/s")
	fs.BoolVar(&c.JSON, "json", false, "print one JSON object per setup")
	fs.StringVar(&c.Plot, "plot", "", "also write a PNG of each mode's efficiency against the worker count (2, 4, 8, ... up to --workers; the PS modes at their best server count)")
	fs.Float64Var(&c.Target, "target", 0, "also emulate each mode's fastest setup (shoal bench emulate) and predict its time to this test accuracy, e.g. 0.8 (Shoal's models only)")
	fs.IntVar(&c.Epochs, "epochs", 3, "--target: epochs each emulated job trains for")
	f.update.Register(fs)
	fs.StringVar(&f.layerFile, "layers", "", "another model: a file of its tensors' sizes, floats one a line in parameter order (sim/models: vgg16.txt, resnet101.txt, inception_v3.txt); needs --compute")
}

// parseBenchPlan reads and checks shoal bench plan's flags, and the
// model's tensors, into the plan to simulate.
func parseBenchPlan(args []string, stderr io.Writer) (harness.PlanConfig, error) {
	fs := flags.NewFlagSet("bench plan", benchPlanSynopsis, stderr)
	p := &benchPlanFlags{}
	p.register(fs)
	if err := flags.Parse(fs, args); err != nil {
		return harness.PlanConfig{}, err
	}
	if err := flags.ExpandHarnessModel(fs); err != nil {
		return harness.PlanConfig{}, err
	}
	c := &p.cfg
	if err := p.job.net().Validate(); err != nil {
		return *c, err
	}
	if c.Sim.RanksPerHost < 1 || c.Sim.IntraGbps < 0 || p.intraLatency < 0 {
		return *c, fmt.Errorf("--ranks-per-host %d, --intra-gbps %g, --intra-latency %v: want at least 1 rank a host and a host link of >= 0 Gbit/s (0: infinite) and latency", c.Sim.RanksPerHost, c.Sim.IntraGbps, p.intraLatency)
	}
	c.Sim.IntraLatency = p.intraLatency.Seconds()
	if c.Sim.Workers < 1 || c.Sim.Batch < 1 || c.Sim.Steps < 1 || p.apply < 0 {
		return *c, fmt.Errorf("--workers %d, --batch %d, --steps %d, --apply-gbps %g: want workers, batch, steps >= 1 and an optimizer speed >= 0",
			c.Sim.Workers, c.Sim.Batch, c.Sim.Steps, p.apply)
	}
	var err error
	if c.Modes, err = harness.ParseModes(p.modeList); err != nil {
		return *c, err
	}
	if err := p.local.Validate(consistency.Sync); err != nil {
		return *c, err
	}
	c.Fragments, c.FragmentOverlap = p.local.F, p.local.OverlapSteps()
	if c.LocalSteps = p.local.H; c.LocalSteps > 0 && c.Target > 0 && c.Fragments > 1 {
		return *c, fmt.Errorf("--fragments %d with --target: the emulator has no streaming fragments (it emulates --local-steps alone); simulate without --target, or leave out --fragments", c.Fragments)
	}
	if h := &c.Hosts; h.PerHost != 0 {
		if h.PerHost < 0 || c.Sim.Workers%h.PerHost != 0 || !(p.hostGbps > 0) || c.Target > 0 {
			return *c, fmt.Errorf("--workers-per-host %d, --host-gbps %g: want a divisor of --workers %d and a bandwidth > 0, without --target (the emulator does not aggregate)", h.PerHost, p.hostGbps, c.Sim.Workers)
		}
		// A hop over shared memory: its bandwidth, and about a
		// microsecond to see the other side's flag.
		h.BytesPerSec, h.Latency = p.hostGbps*1e9/8, 1e-6
	}
	if c.Counts, err = harness.ServerCounts(c.ServerList, c.Sim.Workers); err != nil {
		return *c, err
	}
	if c.Colocated, err = harness.ColocatedCounts(p.colocated, c.Sim.Workers); err != nil {
		return *c, err
	}
	if err := p.layers(); err != nil {
		return *c, err
	}
	return *c, p.check()
}

// layers reads the model's tensors: from --layers, or Shoal's model
// flags (and then their shares of backward).
func (p *benchPlanFlags) layers() error {
	c := &p.cfg
	var err error
	if p.layerFile != "" {
		c.Sim.Layers, c.ModelName, err = harness.ReadLayers(p.layerFile)
		return err
	}
	spec, err := p.job.model.Spec()
	if err != nil {
		return err
	}
	var model nn.Model
	if model, c.Sim.Layers, c.Sim.LayerWork, err = harness.ModelLayers(spec); err != nil {
		return err
	}
	c.ModelName = flags.DescribeModel(model)
	return nil
}

// check checks --target and --epochs, and what --layers rules out, and
// completes the plan with the job's network, compute and emulation.
func (p *benchPlanFlags) check() error {
	c := &p.cfg
	if c.Target < 0 || c.Target >= 1 || c.Epochs < 1 {
		return fmt.Errorf("--target %g, --epochs %d: want a test accuracy in [0, 1) (0: none) and epochs >= 1", c.Target, c.Epochs)
	}
	if c.Target > 0 && p.layerFile != "" {
		return fmt.Errorf("--target with --layers %s: only Shoal's own models can be emulated (their accuracy needs training them)", p.layerFile)
	}
	if p.job.compute == 0 && p.layerFile != "" {
		return fmt.Errorf("--layers %s: give the model's --compute (forward+backward of one step at --batch): shoal measures only its own models", p.layerFile)
	}
	c.Net, c.Sim.ApplyBytesPerSec = p.job.net(), p.apply*1e9
	arch := p.job.model
	c.Model = func() (nn.Model, error) {
		fast, _, err := arch.BuildFast(1)
		return fast, err
	}
	upd, err := p.update.Config()
	if err != nil {
		return err
	}
	outer, err := p.outer.Config()
	if err != nil {
		return err
	}
	c.NewJob = func() (harness.Job, error) {
		j, err := p.job.emulation(c.Sim.Batch, c.Epochs, 0)
		j.Update, j.Outer = upd, outer
		return j, err
	}
	return nil
}

func runBenchPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseBenchPlan(args, stderr)
	if err != nil {
		return err
	}
	return harness.Plan(ctx, cfg, stdout)
}

// simJobFlags are the simulated job (its model, optimizer and data, its
// network and compute), which shoal bench plan and shoal bench emulate
// both take.
type simJobFlags struct {
	model            flags.Model
	opt              flags.Opt
	data             flags.Data
	gbps, jitter     float64
	latency, compute time.Duration
}

func (f *simJobFlags) register(fs *flag.FlagSet) {
	def := harness.DefaultSimJob()
	f.model.Register(fs)
	f.opt.Register(fs, "cosine")
	f.data.Register(fs)
	fs.Float64Var(&f.gbps, "nic-gbps", def.NICGbps, "every process's NIC, Gbit/s per direction")
	fs.DurationVar(&f.latency, "latency", def.Latency, "one-way network latency")
	fs.DurationVar(&f.compute, "compute", def.Compute, "forward+backward time of one step (0: measure it here, one thread)")
	fs.Float64Var(&f.jitter, "jitter", def.Jitter, "standard deviation of each step's compute time, relative (log-normal)")
}

// net is the job's network and compute.
func (f simJobFlags) net() harness.SimJob {
	return harness.SimJob{NICGbps: f.gbps, Latency: f.latency, Compute: f.compute, Jitter: f.jitter, Seed: f.model.Seed}
}

// emulation is f's job to emulate at batch for epochs: its optimizer,
// data and model.
func (f simJobFlags) emulation(batch, epochs int, evalEvery int64) (harness.Job, error) {
	// Decay over the whole job, as shoal train does, once its length is
	// known; the flags are checked here.
	ocfg, wholeJob, err := decayFlags(f.opt)
	if err != nil {
		return harness.Job{}, err
	}
	train, test, err := f.data.Load(f.model.Seed)
	if err != nil {
		return harness.Job{}, err
	}
	spec, err := f.model.Spec()
	if err != nil {
		return harness.Job{}, err
	}
	newModel := func() (nn.Model, error) {
		be, _ := nn.NewBestCPU(1)
		return nn.New(spec, be)
	}
	return harness.Job{Model: newModel, Seed: f.model.Seed, Batch: batch, Epochs: epochs, Optimizer: ocfg, WholeJob: wholeJob, Warmup: f.opt.Warmup,
		Decay: f.opt.Decay, Train: train, Test: test, EvalEvery: evalEvery}, nil
}

// decayFlags checks the optimizer flags of an emulation and says whether
// the decay spans the whole job (its length is known per job).
func decayFlags(of flags.Opt) (optim.Config, bool, error) {
	wholeJob := of.Decay != "none" && of.DecaySteps == 0
	probe := of
	if wholeJob {
		probe.DecaySteps = 1
	}
	cfg, err := probe.Config()
	return cfg, wholeJob, err
}
