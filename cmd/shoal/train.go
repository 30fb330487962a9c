package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/internal/cpubind"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/record"
	"github.com/shoalml/shoal/secure"
	"github.com/shoalml/shoal/timeline"
	"github.com/shoalml/shoal/worker"
)

// trainRun is one `shoal train`: its flags, what they build, and the
// children it starts.
type trainRun struct {
	shard     flags.Shard // given to every shard alike
	arch      flags.Model
	optimizer flags.Opt
	dataset   flags.Data
	loop      flags.Train
	logging   flags.Log
	allreduce flags.Ring
	nic       flags.NIC
	stats     flags.Stats
	calls     flags.Calls // the workers' --lanes and --call-timeout
	metrics   bool
	timeline  string // --timeline DIR
	record    string // --record-pushes DIR
	gossipKey string // the run's own gossip key file (prepare)
	workers   int
	threads   int     // GEMM threads per worker; 0: the cores' share
	bind      string  // --bind: auto, cores or none
	cpuSets   [][]int // per worker, the CPUs it is bound to; nil: not bound
	save      string
	jsonOut   bool
	startup   time.Duration
	testEval  bool
	tls       bool
	sec       flags.Sec // with --tls: the run's throwaway credentials
	device    flags.Device
	where     string // where the workers compute, for the header

	ring  bool
	eval  worker.Evaluation // the final weights' test metrics (finish)
	model nn.Model
	train data.Dataset // what the workers train on (the header and --json name it)
	test  data.Dataset
	ocfg  optim.Config
}

func runTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	t, err := parseTrain(args, stderr)
	if err != nil {
		return err
	}
	wall := time.Now()
	cleanup, err := t.prepare()
	if err != nil {
		return err
	}
	defer cleanup()
	cfg, err := t.jobConfig(stdout, stderr)
	if err != nil {
		return err
	}
	res, err := launch.RunJob(ctx, cfg)
	if err != nil {
		return err
	}
	res.Result.WallSeconds = time.Since(wall).Seconds()
	return t.end(stdout, res)
}

// prepare makes what the run needs before any child starts: the run's
// own gossip key, so that only its children gossip with one another; with
// --tls the run's throwaway credentials (cleanup removes both), and empty
// --record-pushes and --timeline folders.
func (t *trainRun) prepare() (cleanup func(), err error) {
	keyDir, err := os.MkdirTemp("", "shoal-train-")
	if err != nil {
		return nil, fmt.Errorf("a folder for the run's gossip key: %w", err)
	}
	cleanup = func() { os.RemoveAll(keyDir) }
	t.gossipKey = filepath.Join(keyDir, "gossip.key")
	if err := cluster.WriteGossipKey(t.gossipKey); err != nil {
		cleanup()
		return nil, err
	}
	if t.tls {
		removeCreds, err := t.sec.Throwaway()
		if err != nil {
			cleanup()
			return nil, err
		}
		removeKey := cleanup
		cleanup = func() { removeCreds(); removeKey() }
	}
	if err := clearRecordings(t.record); err != nil {
		cleanup()
		return nil, err
	}
	// The merge takes every process's file in the folder: an earlier
	// run's would join this one's.
	if err := clearEarlier(t.timeline, "--timeline", timelineGlobs...); err != nil {
		cleanup()
		return nil, err
	}
	return cleanup, nil
}

// jobConfig is the run as a job of this binary's processes: the shards
// and workers with their argv and environment, the restart policy, and
// the summary begun with what the flags say.
func (t *trainRun) jobConfig(stdout, stderr io.Writer) (launch.JobConfig, error) {
	exe, err := os.Executable()
	if err != nil {
		return launch.JobConfig{}, fmt.Errorf("finding this binary to start children: %w", err)
	}
	cfg := launch.JobConfig{Exe: exe, Name: "shoal train", Stdout: stdout, Stderr: stderr, TTY: isTerminal(stdout), StartupTimeout: t.startup,
		Servers: t.shard.Servers, ServerRole: "ps", ServerArgs: t.shardArgs, Workers: t.workers, WorkerArgs: t.workerArgs, WorkerEnv: t.workerEnv,
		Rendezvous: t.ring, GroupSize: t.groupSize(), Elastic: t.allreduce.Elastic, Stats: t.stats.Times, Result: t.newResult(),
		ServersUp: func() { t.printHeader(stdout) }, Finish: t.finish}
	if t.restartable() {
		cfg.MaxRestarts = maxRestarts
	}
	return cfg, nil
}

// end ends the run once the job is over: the timelines merged, the
// recordings named, the report (with --json its JSON line), and an error
// where some workers failed.
func (t *trainRun) end(stdout io.Writer, res *launch.JobResult) error {
	// Before the report, which --json ends with its JSON line.
	if err := t.mergeTimelines(stdout); err != nil {
		return err
	}
	if t.record != "" {
		fmt.Fprintf(stdout, "pushes: %s (replay the run with shoal bench emulate --replay %s and the run's model, data, --batch, --epochs, optimizer and --seed)\n",
			filepath.Join(t.record, recordGlob), t.record)
	}
	if err := t.report(stdout, &res.Result, t.eval); err != nil {
		return err
	}
	if len(res.Failures) > 0 {
		return fmt.Errorf("%d of %d workers failed (the others finished)", len(res.Failures), t.workers)
	}
	return nil
}

// printHeader prints the run's first line: the model, the mode, the
// workers and where they compute, the servers, the batch, the optimizer
// and the data.
func (t *trainRun) printHeader(stdout io.Writer) {
	lr := fmt.Sprintf("lr %g", t.ocfg.LR)
	if t.allreduce.ScaleLR {
		lr = fmt.Sprintf("lr %g × %d workers (--scale-lr: the live workers, warmed up over the first epoch unless --warmup-steps)", t.ocfg.LR, t.workers)
	}
	rule, warning := t.shard.UpdateNote(t.loop.Mode, t.workers, t.ocfg, t.loop.LocalSteps.H)
	if rule != "" {
		lr += ", " + rule
	}
	if h := t.loop.LocalSteps.H; h > 0 {
		o := t.shard.Outer
		lr += fmt.Sprintf(" on each worker for %d local steps, then the pseudo-gradients through outer %s lr %g", h, o.Name, o.LR)
		if o.Name == optim.Momentum || o.Name == optim.Nesterov || o.Name == optim.DelayedNesterov {
			lr += fmt.Sprintf(" momentum %g", o.Momentum)
		}
		if o.Name == optim.DelayedNesterov {
			lr += fmt.Sprintf(" delay %d", t.shard.OuterDelay(t.loop.Mode, t.pushers()))
		}
		if l := t.loop.LocalSteps; l.F > 0 {
			lr += fmt.Sprintf(", in %d fragment(s), one every %d steps, %d step(s) overlapped, mix %g", l.F, h/l.F, l.OverlapSteps(), l.Mix)
		}
	}
	if warning != "" {
		defer fmt.Fprintf(stdout, "warning: %s\n", warning)
	}
	where := t.where
	if prec := t.precision(); prec != "" {
		where += " in " + prec
	}
	batch := fmt.Sprintf("batch %d per worker", t.batchPerWorker())
	if t.batchPerWorker() < t.loop.Batch {
		batch += fmt.Sprintf(" (--batch %d is more than a worker's share of an epoch: each step takes all of it)", t.loop.Batch)
	}
	fmt.Fprintf(stdout, "shoal train: %s, %s, %d worker(s) on %s, %d server(s), %s, %s %s, %s (%d samples; tested on %s)\n",
		flags.DescribeModel(t.model), t.loop.Mode, t.workers, where, t.shard.Servers, batch, t.ocfg.Algorithm, lr, t.train.Name(), t.train.Len(), t.test.Name())
	if t.loop.HostAggregate {
		fmt.Fprintf(stdout, "host aggregation: %d host(s) of %d workers; each host's first rank pushes its workers' mean and pulls for them, and the servers count hosts (sync's barrier, SSP's bound)\n",
			t.pushers(), t.loop.WorkersPerHost)
	}
}

// precision is the half precision the workers compute in ("" in fp32).
func (t *trainRun) precision() string {
	if t.device.Precision.Half() {
		return t.device.Precision.String()
	}
	return ""
}

// workerThreads is each worker's GEMM threads: --threads, else the
// cores' share.
func (t *trainRun) workerThreads() int {
	if t.threads > 0 {
		return t.threads
	}
	return max(1, runtime.NumCPU()/t.workers)
}

// maxLoopbackProcsPerCore is how many of shoal train's processes a core
// may carry before their gossip gets the LAN timings instead of the
// loopback ones. Loopback timings (a probe every 200 ms, answered within
// 100 ms) suppose each process gets the CPU when it needs it; beyond this
// many processes a core, starved members miss their acks, suspect one
// another and refute, and that traffic starves them further, where the
// LAN timings ride it out (the runs are in docs/BENCHMARKS.md).
const maxLoopbackProcsPerCore = 8

// maxProcsPerCore bounds shoal train's processes: beyond it the members
// starve even on the LAN's timings (docs/BENCHMARKS.md).
const maxProcsPerCore = 32

// procs is how many processes the run starts: workers and servers (none
// in a ring, once check has run).
func (t *trainRun) procs() int { return t.workers + t.shard.Servers }

// joinGossip puts a child's gossip g into the run's cluster on loopback,
// joining peers, with the run's detection timings and its own key.
func (t *trainRun) joinGossip(g *flags.Gossip, peers []string) {
	g.Addr, g.Detection, g.Join, g.KeyFile = "127.0.0.1:0", t.detection(), strings.Join(peers, ","), t.gossipKey
}

// detection is the gossip's failure-detection timings for the run's
// processes: loopback's fast ones while the cores can carry them, else
// the LAN's, which a slow member survives.
func (t *trainRun) detection() string {
	if t.procs() > maxLoopbackProcsPerCore*runtime.NumCPU() {
		return "lan"
	}
	return "loopback"
}

// planBinding gives each worker --threads CPUs of its own, from those
// this process may run on, where --bind says so: cores always (an error
// where they do not fit), auto where the workers take those CPUs, with
// fewer than --threads left over (as the default --threads does). Bound,
// a worker keeps its caches and the scheduler does not move it onto the
// core where another worker computes (docs/BENCHMARKS.md). The servers
// are not bound: they go where the cores are free.
func (t *trainRun) planBinding() error {
	if t.bind == "none" {
		return nil
	}
	allowed, err := cpubind.Allowed()
	t.cpuSets, err = bindPlan(t.bind, allowed, err, t.workers, t.workerThreads())
	return err
}

// bindPlan is planBinding's choice for --bind mode, given the CPUs this
// process may run on (or why they could not be read, allowedErr: auto
// then binds nothing).
func bindPlan(mode string, allowed []int, allowedErr error, workers, threads int) ([][]int, error) {
	switch mode {
	case "none":
		return nil, nil
	case "auto", "cores":
	default:
		return nil, fmt.Errorf("--bind %q: want auto, cores or none", mode)
	}
	if allowedErr != nil {
		if mode == "auto" {
			return nil, nil
		}
		return nil, fmt.Errorf("--bind %s: %w", mode, allowedErr)
	}
	if mode == "auto" && len(allowed)-workers*threads >= threads {
		// Room for more workers: another run may be beside this one,
		// and binding both to the first cores would pile them there.
		return nil, nil
	}
	sets, ok := cpubind.Split(allowed, workers, threads)
	if !ok && mode == "cores" {
		return nil, fmt.Errorf("--bind cores: %d worker(s) × %d thread(s) need %d CPUs, and this process may run on %d (%s): use fewer --workers or --threads, or --bind none",
			workers, threads, workers*threads, len(allowed), cpubind.Format(allowed))
	}
	return sets, nil
}

// workerEnv is the environment of a worker with threads GEMM threads;
// with share, its Go runtime gets the same share of the cores.
func workerEnv(threads int, share bool) []string {
	env := []string{"OPENBLAS_NUM_THREADS=" + strconv.Itoa(threads)}
	if share {
		// A PS worker's Go runtime gets the same share: with one P per
		// core of the machine in every process, the transport's
		// goroutines hand each 16 KiB frame to another thread and the
		// context switches cost more than the parallelism gains
		// (docs/BENCHMARKS.md). Never more than the cores, though: a Go
		// runtime with a P for each of a huge --threads spends its time
		// in its own bookkeeping before the first step.
		env = append(env, "GOMAXPROCS="+strconv.Itoa(min(threads, runtime.NumCPU())))
	}
	return env
}

// newResult is the run's summary begun with what the flags say.
func (t *trainRun) newResult() launch.Result {
	return launch.Result{Mode: t.loop.Mode, Model: flags.DescribeModel(t.model), Dataset: t.train.Name(), TestDataset: t.test.Name(),
		Workers: t.workers, Servers: t.shard.Servers, Threads: t.workerThreads(), Device: t.where, Precision: t.precision(), Staleness: consistency.Staleness{}, FailedWorkers: []int{}, MembershipEvents: []launch.MembershipEvent{},
		Run: record.Run{Parameters: t.model.Layout().Size(), ParallelStep: !t.ring && t.shard.ParallelStep, Batch: t.batchPerWorker(), Optimizer: t.ocfg.Algorithm, LR: t.ocfg.LR}}
}

// parseTrain reads and checks shoal train's flags, builds the model and
// loads the data (the launcher evaluates the final weights, so a missing
// dataset fails here, before any process starts).
func parseTrain(args []string, stderr io.Writer) (*trainRun, error) {
	fs := flags.NewFlagSet("train", "Trains on this machine: starts --servers parameter-server processes and --workers\nworker processes of this binary on free loopback ports, shows their progress,\nevaluates the final weights on the test set and stops everything (also on Ctrl-C).", stderr)
	t := &trainRun{}
	t.register(fs)
	if err := flags.Parse(fs, args); err != nil {
		return nil, err
	}
	for _, v := range []func() error{t.loop.Validate, t.nic.Validate, t.stats.Validate, t.allreduce.Validate} {
		if err := v(); err != nil {
			return nil, err
		}
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	if err := t.serverFlagsInRing(fs); err != nil {
		return nil, err
	}
	if err := t.build(); err != nil {
		return nil, err
	}
	return t, nil
}

// register registers shoal train's flags: its own, then those it shares
// with the worker and the server (the help lists them by flags.Section).
func (t *trainRun) register(fs *flag.FlagSet) {
	fs.IntVar(&t.workers, "workers", 2, flags.SectionJob.Usage("number of worker processes"))
	fs.IntVar(&t.threads, "threads", 0, flags.SectionCompute.Usage("GEMM threads of each worker, and its Go runtime's share (GOMAXPROCS, at most the cores) in the PS modes; 0 gives each worker the cores divided by --workers, at least 1"))
	fs.StringVar(&t.bind, "bind", "auto", flags.SectionCompute.Usage("bind each worker to --threads cores of its own, as MPI launchers bind their ranks: auto (where the workers take the CPUs this process may use, fewer than --threads left over), cores (wherever they fit; an error where they do not), none"))
	t.calls.Register(fs)
	fs.StringVar(&t.save, "save", "", flags.SectionOutput.Usage("write the final parameters to this .safetensors file"))
	fs.BoolVar(&t.jsonOut, "json", false, flags.SectionOutput.Usage("end with one JSON line summarising the run"))
	fs.BoolVar(&t.metrics, "metrics", false, flags.SectionOutput.Usage("every server and worker serves Prometheus metrics on a loopback port of its own; the addresses are printed"))
	fs.StringVar(&t.record, "record-pushes", "", flags.SectionOutput.Usage("async, ssp: every worker writes every push's step, clock and staleness, as shard 0 saw them, into DIR/worker-<rank>.pushes.json (an earlier run's there are removed first); shoal bench emulate --replay DIR replays the run in one process"))
	fs.StringVar(&t.timeline, "timeline", "", flags.SectionOutput.Usage("every server and worker writes its per-step timeline into DIR (Chrome trace-event JSON), merged at the end into DIR/timeline.json on one clock (open it in ui.perfetto.dev or chrome://tracing)"))
	fs.DurationVar(&t.startup, "startup-timeout", 60*time.Second, flags.SectionCommunication.Usage("how long a server may take to start"))
	fs.BoolVar(&t.testEval, "test", true, flags.SectionModel.Usage("evaluate the final weights on the test set (benchmarks of large models turn it off)"))
	fs.BoolVar(&t.tls, "tls", false, flags.SectionSecurity.Usage("servers and workers (ring: the rendezvous and the TCP links) talk mutual TLS and check a bearer token, from a CA and token made for this run and removed after it"))
	t.shard.Register(fs)
	t.nic.Register(fs)
	t.stats.Register(fs)
	t.arch.Register(fs)
	t.optimizer.Register(fs, "cosine")
	t.dataset.Register(fs)
	t.loop.Register(fs)
	t.logging.Register(fs, "warn")
	t.allreduce.Register(fs)
	t.device.Register(fs)
}

// check settles the ring (no servers; elastic where nothing evaluates
// during training) and checks train's own flags.
func (t *trainRun) check() error {
	t.ring = t.loop.Mode == consistency.Ring
	// The elastic ring does not run evaluations during training yet.
	t.allreduce.Elastic = t.ring && t.allreduce.Elastic && t.stats.StopAt == 0 && t.stats.EvalEvery == 0
	if t.ring {
		t.shard.Servers = 0 // no parameter server in ring mode
	} else if t.shard.Servers < 1 {
		return fmt.Errorf("--servers %d: want >= 1", t.shard.Servers)
	}
	if t.workers < 1 {
		return fmt.Errorf("--workers %d: want >= 1", t.workers)
	}
	if procs, limit := t.procs(), maxProcsPerCore*runtime.NumCPU(); procs > limit {
		flags := fmt.Sprintf("--workers %d and --servers %d", t.workers, t.shard.Servers)
		if t.ring {
			flags = fmt.Sprintf("--workers %d", t.workers)
		}
		return fmt.Errorf("%s: %d processes on this machine's %d cores, want at most %d (%d a core): shoal train starts every process here, and beyond that their gossip starves; spread a larger job over machines with shoal ps and shoal worker",
			flags, procs, runtime.NumCPU(), limit, maxProcsPerCore)
	}
	if t.threads < 0 {
		return fmt.Errorf("--threads %d: want >= 1, or 0 for the cores divided by --workers", t.threads)
	}
	if err := t.planBinding(); err != nil {
		return err
	}
	if err := flags.CheckLanes(t.calls.Lanes); err != nil {
		return err
	}
	if err := t.allreduce.CheckResident(t.loop.Mode); err != nil {
		return err
	}
	return t.checkRun()
}

// checkRun checks the flags of the run's servers, its timeouts and what
// it writes.
func (t *trainRun) checkRun() error {
	if t.shard.Journal && t.shard.CkptDir == "" {
		return errors.New("--journal: needs --checkpoint-dir, where the servers write it")
	}
	if t.startup <= 0 {
		return fmt.Errorf("--startup-timeout %v: want > 0", t.startup)
	}
	if h := t.loop.LocalSteps.H; h > 0 && t.allreduce.ScaleLR {
		return fmt.Errorf("--scale-lr with --local-steps %d: the servers average the pseudo-gradients (or scale them by the update rule), and the outer learning rate is not scaled by the world size: leave out --scale-lr", h)
	}
	if t.calls.CallTimeout <= 0 {
		return fmt.Errorf("--call-timeout %v: want > 0 (every call has a deadline)", t.calls.CallTimeout)
	}
	if t.shard.CkptErrors != "fail" && t.shard.CkptErrors != "warn" {
		return fmt.Errorf("--checkpoint-errors %q: want fail or warn", t.shard.CkptErrors)
	}
	if t.shard.CkptEvery < 0 {
		return fmt.Errorf("--checkpoint-every %d: want >= 0 (0: only at the end)", t.shard.CkptEvery)
	}
	if _, err := t.shard.UpdateConfig(); err != nil {
		return err
	}
	if err := t.checkHosts(); err != nil {
		return err
	}
	if !t.ring { // the ring's own check refuses every shard flag
		// Here, not in the shards after they start: one line, before any
		// process, rather than a shard's error and the launcher's.
		if err := t.shard.CheckMode(t.loop.Mode, "--workers", t.pushers()); err != nil {
			return err
		}
		if _, err := t.allreduce.PushEncoding(t.loop.LocalSteps.H); err != nil {
			return err
		}
	} else if _, err := t.allreduce.CompressionMode(); err != nil {
		return err
	}
	if err := flags.Recordable(t.record, t.loop.Mode); err != nil {
		return err
	}
	return errors.Join(flags.WritableFile("--save", t.save), flags.WritableDir("--checkpoint-dir", t.shard.CkptDir), flags.WritableDir("--timeline", t.timeline),
		flags.WritableDir("--record-pushes", t.record))
}

// checkHosts settles --host-aggregate's hosts: --workers-per-host 0 makes
// every worker of this machine one host.
func (t *trainRun) checkHosts() error {
	if !t.loop.HostAggregate {
		return nil
	}
	if t.loop.WorkersPerHost == 0 {
		t.loop.WorkersPerHost = t.workers
	}
	if k := t.loop.WorkersPerHost; t.workers%k != 0 {
		return fmt.Errorf("--workers %d, --workers-per-host %d: want a whole number of hosts (--workers-per-host a divisor of --workers)", t.workers, k)
	}
	return nil
}

// groupSize is the launcher's worker groups: the hosts' workers, with
// --host-aggregate.
func (t *trainRun) groupSize() int {
	if t.loop.HostAggregate {
		return t.loop.WorkersPerHost
	}
	return 0
}

// pushers is the workers the servers count: the hosts with
// --host-aggregate, else the workers.
func (t *trainRun) pushers() int {
	if t.loop.HostAggregate {
		return t.workers / t.loop.WorkersPerHost
	}
	return t.workers
}

// batchPerWorker is the batch each worker's steps take: --batch, or a
// worker's whole share of an epoch where --batch is larger (a worker's
// loader takes no more than its share, as PyTorch's does).
func (t *trainRun) batchPerWorker() int {
	return min(t.loop.Batch, max((t.train.Len()+t.workers-1)/t.workers, 1))
}

// psWorkerFlags are the flags of shoal train's PS workers that only the
// parameter-server modes read: their calls to the servers.
var psWorkerFlags = []string{"lanes", "push-every", "fetch-every"}

// serverFlagsInRing refuses the flags only the parameter-server modes
// read (the shards' group, and psWorkerFlags) given in ring mode, which
// would ignore them (a --staleness -5 or --servers 3 there says the
// command is not what its author thinks).
func (t *trainRun) serverFlagsInRing(fs *flag.FlagSet) error {
	if !t.ring {
		return nil
	}
	psOnly := append(t.shard.Names(), psWorkerFlags...)
	var given []string
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(psOnly, f.Name) {
			given = append(given, "--"+f.Name)
		}
	})
	if len(given) == 0 {
		return nil
	}
	return fmt.Errorf("%s: for the parameter-server modes (async, sync, ssp); --mode ring has no servers and would ignore it: leave it out",
		strings.Join(given, ", "))
}

// build builds the model, places the workers, loads the data and makes
// the optimizer's config, its decay over the whole run unless
// --decay-steps says otherwise.
func (t *trainRun) build() error {
	var err error
	if t.model, err = t.arch.Build(); err != nil {
		return err
	}
	// Worker r is local rank r: a --device that finds no GPU fails here,
	// before any process starts.
	if t.where, err = t.device.DescribePlacement(t.workers); err != nil {
		return err
	}
	if err := t.device.CheckResident(t.allreduce.DeviceResident, t.workers); err != nil {
		return err
	}
	train, test, err := t.dataset.Load(t.arch.Seed)
	if err != nil {
		return err
	}
	t.train, t.test = train, test
	if t.allreduce.ScaleLR && !t.ring && t.optimizer.Warmup == 0 {
		// The linear scaling rule's warm-up: an epoch of the shards' updates.
		epoch := t.loop
		epoch.Steps, epoch.Epochs = 0, 1
		t.optimizer.Warmup = totalUpdates(train.Len(), t.workers, t.pushers(), t.shard.Staleness, &epoch)
	}
	if t.optimizer.Decay != "none" && t.optimizer.DecaySteps == 0 {
		// Decay over the whole run: the servers apply one update per push.
		t.optimizer.DecaySteps = max(totalUpdates(train.Len(), t.workers, t.pushers(), t.shard.Staleness, &t.loop)-t.optimizer.Warmup, 1)
	}
	t.ocfg, err = t.optimizer.Config()
	return err
}

// metricsAddr is every child's --metrics-addr: with --metrics, a
// loopback port of its own.
func (t *trainRun) metricsAddr() string {
	if t.metrics {
		return "127.0.0.1:0"
	}
	return ""
}

// maxRestarts bounds how often shoal train restarts one shard: a shard
// that keeps dying has a cause that restarting will not cure.
const maxRestarts = 3

// restartable says whether shoal train starts a shard killed from outside
// again (at most maxRestarts times): with checkpoints to resume from, and
// either a journal (no update lost, every mode) or async mode (where a
// lost update is like a dropped push).
func (t *trainRun) restartable() bool {
	// With local steps a restarted async shard without a journal would
	// refuse the pseudo-gradients from the clocks it lost.
	return t.shard.CkptDir != "" && (t.shard.Journal || t.loop.Mode == consistency.Async && t.loop.LocalSteps.H == 0)
}

// shardArgs is shard's argv: the shard contract (flags.PS) filled from
// the run's flags, listening on listen, joining the gossip cluster
// through join, its timeline named for its restart.
func (t *trainRun) shardArgs(shard int, listen string, join []string, restart int) []string {
	p := flags.DefaultPS()
	p.Shard, p.Model, p.Opt, p.Log, p.NIC, p.Sec.Files = t.shard, t.arch, t.optimizer, t.logging, t.nic, t.sec.Files
	p.Listen, p.Index, p.Mode, p.Workers, p.Events, p.ScaleLR = listen, shard, t.loop.Mode.String(), t.pushers(), true, t.allreduce.ScaleLR
	p.LocalSteps = t.loop.LocalSteps
	p.Metrics.Addr, p.Timeline.Path = t.metricsAddr(), t.timelinePath(fmt.Sprintf("ps-%d", shard), restart)
	t.joinGossip(&p.Gossip, join)
	return append([]string{"ps"}, p.Args()...)
}

// workerArgs is rank r's argv, given the servers' addresses, the gossip
// to join and the ring's rendezvous: the worker contract (flags.Worker)
// filled from the run's flags.
func (t *trainRun) workerArgs(r int, servers, gossip []string, master string) []string {
	w := flags.DefaultWorker()
	w.Model, w.Data, w.Train, w.Log, w.NIC, w.Stats, w.Device, w.Calls = t.arch, t.dataset, t.loop, t.logging, t.nic, t.stats, t.device, t.calls
	w.Train.ModeName, w.Train.ModeGiven, w.Sec.Files, w.Events = t.loop.Mode.String(), true, t.sec.Files, true
	w.Ranks = flags.Rank{Rank: r, World: t.workers, LocalRank: r}
	w.Eval = t.ring && t.testEval // ring ranks evaluate together; PS: the launcher does
	w.Metrics.Addr, w.Timeline.Path = t.metricsAddr(), t.timelinePath(fmt.Sprintf("worker-%d", r), 0)
	if t.record != "" {
		w.RecordPushes = recordFile(t.record, r)
	}
	// Each worker gets its share of the cores, and OpenBLAS no more
	// threads than that (it would start one per core in every process),
	// unless --threads says how many.
	w.Threads = t.workerThreads()
	if r < len(t.cpuSets) {
		w.CPUs = cpubind.Format(t.cpuSets[r])
	}
	if !t.ring {
		w.Servers, w.Ring.Compression = strings.Join(servers, ","), t.allreduce.Compression
		if t.loop.HostAggregate {
			w.HostMaster = master // the host's first rank's rendezvous
		}
		if t.loop.LocalSteps.H > 0 {
			w.Opt = t.optimizer // the inner optimizer, stepped by the worker itself
		}
		t.joinGossip(&w.Gossip, gossip)
		return append([]string{"worker"}, w.Args()...)
	}
	// A ring rank steps the optimizer itself, and meets at the rendezvous.
	w.Opt, w.Ring = t.optimizer, t.allreduce
	w.Ring.Master = master
	if t.allreduce.Elastic {
		// Rank 0 starts the gossip; the others join it.
		t.joinGossip(&w.Gossip, gossip)
	}
	if r == 0 || t.allreduce.Elastic { // elastic: whoever ends as rank 0 saves
		w.Save = t.save
	}
	return append([]string{"worker"}, w.Args()...)
}

// workerEnv is rank r's environment: its GEMM threads, and in the PS
// modes its Go runtime's share of the cores (unless GOMAXPROCS is set).
func (t *trainRun) workerEnv(int, []string) []string {
	return workerEnv(t.workerThreads(), !t.ring && os.Getenv("GOMAXPROCS") == "")
}

// finish reads the final weights while the servers still serve (the
// job's Finish): their test metrics into the summary.
func (t *trainRun) finish(ctx context.Context, j *launch.JobResult) error {
	ev, err := t.finalEval(ctx, j)
	if err != nil {
		return err
	}
	t.eval = ev
	j.Result.TestLoss, j.Result.TestAccuracy = ev.Loss, ev.Accuracy
	return nil
}

// finalEval evaluates the final weights on the test set (ring: the ranks
// did) and saves them with --save.
func (t *trainRun) finalEval(ctx context.Context, j *launch.JobResult) (worker.Evaluation, error) {
	ev, sum, ringTest := worker.Evaluation{Accuracy: -1}, &j.Result, j.RingTest
	meta := map[string]string{"format": "pt", "shoal_model": sum.Model, "shoal_mode": t.loop.Mode.String()}
	switch {
	case t.ring:
		sum.Saved = t.save // rank 0 saved them
		if !t.testEval {
			return ev, nil
		}
		if ringTest == nil {
			return ev, errors.New("rank 0 finished without reporting the test metrics")
		}
		return worker.Evaluation{Loss: ringTest.TestLoss, Accuracy: ringTest.TestAccuracy, Samples: ringTest.TestSamples}, nil
	case !t.testEval && t.save == "":
		return ev, nil
	}
	params, err := pullFinal(ctx, j.Servers, t.model, t.sec.Creds)
	if err != nil {
		return ev, err
	}
	if t.testEval {
		if ev, err = worker.Evaluate(ctx, t.model, params, t.test, 1000); err != nil {
			return ev, err
		}
		meta["test_accuracy"] = flags.FormatFloat(ev.Accuracy)
	}
	if t.save != "" {
		if err := nn.SaveSafetensors(t.save, t.model.Layout(), params, meta); err != nil {
			return ev, fmt.Errorf("--save %s: %w", t.save, err)
		}
		sum.Saved = t.save
	}
	return ev, nil
}

// report prints the run's end: test metrics, throughput, staleness,
// dropped pushes, and the JSON line with --json.
func (t *trainRun) report(stdout io.Writer, sum *launch.Result, ev worker.Evaluation) error {
	if t.testEval {
		fmt.Fprintf(stdout, "test: loss %.4f  accuracy %.2f%% (%d samples)\n", ev.Loss, 100*ev.Accuracy, ev.Samples)
	}
	fmt.Fprintf(stdout, "throughput: %.0f samples/s (%d samples in %.1fs); wall %.1fs\n", sum.SamplesPerSec, sum.Samples, sum.TrainSeconds, sum.WallSeconds)
	if worst := sum.Staleness.Worst(); worst >= 0 {
		fmt.Fprintf(stdout, "staleness: mean %.2f, max %d updates; pushes by staleness: %v\n", sum.Staleness.Mean(), worst, sum.Staleness)
	}
	if sum.Dropped > 0 {
		fmt.Fprintf(stdout, "backup workers: %d late pushes dropped\n", sum.Dropped)
	}
	if sum.StepTime != nil {
		fmt.Fprintf(stdout, "traffic: each worker sent %.0f and received %.0f bytes per step, %.0f and %.0f per sample\n",
			sum.BytesSentPerStep, sum.BytesReceivedPerStep, sum.BytesSentPerStep/float64(t.batchPerWorker()*t.loop.BackwardPasses), sum.BytesReceivedPerStep/float64(t.batchPerWorker()*t.loop.BackwardPasses))
	}
	if sum.StoppedAtTarget {
		fmt.Fprintf(stdout, "stopped early: rank 0 measured test accuracy >= %g after %d steps\n", t.stats.StopAt, sum.Steps)
	}
	if sum.Saved != "" {
		fmt.Fprintf(stdout, "saved: %s\n", sum.Saved)
	}
	if dir := t.shard.CkptDir; sum.Samples == 0 && dir != "" && !t.ring {
		fmt.Fprintf(stdout, "nothing left to train: the checkpoints in %s hold a run that already reached its end (step %d); to train anew, give another --checkpoint-dir or empty %s\n", dir, sum.Steps, dir)
	}
	if !t.jsonOut {
		return nil
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", b)
	return err
}

// timelinePath is a child's --timeline file under --timeline DIR:
// name.json, or name.restart-N.json for a restarted shard; "" without
// --timeline.
func (t *trainRun) timelinePath(name string, restart int) string {
	if t.timeline == "" {
		return ""
	}
	if restart > 0 {
		name = fmt.Sprintf("%s.restart-%d", name, restart)
	}
	return filepath.Join(t.timeline, name+".json")
}

// timelineGlobs are the files of shoal train --timeline DIR: the
// processes' (merged) and the merge.
var timelineGlobs = []string{"ps-*.json", "worker-*.json", "timeline.json"}

// mergeTimelines merges the children's timelines into DIR/timeline.json.
func (t *trainRun) mergeTimelines(stdout io.Writer) error {
	if t.timeline == "" {
		return nil
	}
	var files []string
	for _, pattern := range timelineGlobs[:2] {
		m, err := filepath.Glob(filepath.Join(t.timeline, pattern))
		if err != nil {
			return err
		}
		files = append(files, m...)
	}
	out := filepath.Join(t.timeline, "timeline.json")
	truncated, err := timeline.Merge(out, files)
	if err != nil {
		return fmt.Errorf("--timeline: %w", err)
	}
	if len(truncated) > 0 {
		fmt.Fprintf(stdout, "timeline: %v ended early (killed?): the events they had not yet written out are missing\n", truncated)
	}
	fmt.Fprintf(stdout, "timeline: %s (%d processes; open it in ui.perfetto.dev or chrome://tracing)\n", out, len(files))
	return nil
}

// totalUpdates is how many steps the run's --optimizer takes: one per
// step in sync mode, and on each worker with --local-steps (the inner
// optimizer), else one per push (each of pushers, the workers or with
// --host-aggregate the hosts, pushes once per push-every steps).
func totalUpdates(n, workers, pushers int, staleness int64, tf *flags.Train) int64 {
	steps := tf.Steps
	if steps == 0 {
		perRank := (n + workers - 1) / workers
		steps = int64(tf.Epochs) * int64((perRank+tf.Batch-1)/tf.Batch)
	}
	if tf.Mode.Synchronous(staleness) || tf.LocalSteps.H > 0 {
		return steps
	}
	return int64(pushers) * ((steps + int64(tf.PushEvery) - 1) / int64(tf.PushEvery))
}

// pullFinal reads the final weights from the servers.
func pullFinal(ctx context.Context, addrs []string, model nn.Model, creds *secure.Credentials) ([]float32, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.Dial(dctx, addrs, client.WithDialOptions(creds.DialOptions()...))
	if err != nil {
		return nil, fmt.Errorf("reading the final weights: %w", err)
	}
	defer c.Close()
	params := make([]float32, model.Layout().Size())
	if _, err := c.Pull(dctx, params); err != nil {
		return nil, fmt.Errorf("reading the final weights: %w", err)
	}
	return params, nil
}

// newLauncher returns a launcher of this binary.
func newLauncher(stderr io.Writer) (*launch.Launcher, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary to start children: %w", err)
	}
	return launch.New(exe, stderr), nil
}
