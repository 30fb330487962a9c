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
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/internal/cpubind"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/secure"
	"github.com/shoalml/shoal/timeline"
	"github.com/shoalml/shoal/worker"
)

// trainRun is one `shoal train`: its flags, what they build, and the
// children it starts.
type trainRun struct {
	mf         modelFlags
	of         optFlags
	df         dataFlags
	tf         trainFlags
	lf         logFlags
	rf         ringFlags
	nf         nicFlags
	sf         statFlags
	metrics    bool
	timeline   string // --timeline DIR
	record     string // --record-pushes DIR
	workers    int
	threads    int     // GEMM threads per worker; 0: the cores' share
	bind       string  // --bind: auto, cores or none
	cpuSets    [][]int // per worker, the CPUs it is bound to; nil: not bound
	servers    int
	chunkBytes int
	lanes      int
	parStep    bool
	save       string
	jsonOut    bool
	startup    time.Duration
	backup     int
	staleness  int64
	ckptDir    string
	ckptEvery  int64
	ckptErrors string
	journal    bool
	testEval   bool
	callTime   time.Duration
	tls        bool
	sec        secFlags // with --tls: the run's throwaway credentials
	dev        deviceFlags
	where      string // where the workers compute, for the header

	ring   bool
	shards []*shardProc
	model  nn.Model
	train  data.Dataset // what the workers train on (the header and --json name it)
	test   data.Dataset
	ocfg   optim.Config
}

func runTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	t, err := parseTrain(args, stderr)
	if err != nil {
		return err
	}
	wall := time.Now()
	l, err := newLauncher(stderr)
	if err != nil {
		return err
	}
	defer l.Shutdown()
	if t.tls {
		remove, err := t.sec.throwaway()
		if err != nil {
			return err
		}
		defer remove()
	}
	if err := clearRecordings(t.record); err != nil {
		return err
	}
	// The merge takes every process's file in the folder: an earlier
	// run's would join this one's.
	if err := clearEarlier(t.timeline, "--timeline", timelineGlobs...); err != nil {
		return err
	}
	addrs, gossip, err := t.startServers(ctx, l)
	if err != nil {
		return err
	}
	prec := t.printHeader(stdout)
	trainStart := time.Now()
	isWorker, err := t.startWorkers(ctx, l, addrs, gossip)
	if err != nil {
		return err
	}
	tally := t.newTally(prec)
	board := launch.NewBoard(stdout, t.workers, isTerminal(stdout))
	ringTest, failures, killed, err := t.watch(ctx, l, isWorker, tally, board, stdout, trainStart)
	if err != nil {
		return err
	}
	sum, err := t.summarise(ctx, stderr, tally, board, failures, killed, trainStart)
	if err != nil {
		return err
	}
	ev, err := t.finish(ctx, addrs, ringTest, sum)
	if err != nil {
		return err
	}
	sum.TestLoss, sum.TestAccuracy = ev.Loss, ev.Accuracy
	for _, sp := range t.shards {
		sp.child.Stop()
	}
	l.Shutdown()
	sum.WallSeconds = time.Since(wall).Seconds()
	// Before the report, which --json ends with its JSON line.
	if err := t.mergeTimelines(stdout); err != nil {
		return err
	}
	if t.record != "" {
		fmt.Fprintf(stdout, "pushes: %s (replay the run with shoal bench emulate --replay %s and the run's model, data, --batch, --epochs, optimizer and --seed)\n",
			filepath.Join(t.record, recordGlob), t.record)
	}
	if err := t.report(stdout, sum, ev); err != nil {
		return err
	}
	if len(failures) > 0 {
		return fmt.Errorf("%d of %d workers failed (the others finished)", len(failures), t.workers)
	}
	return nil
}

// printHeader prints the run's first line: the model, the mode, the
// workers and where they compute, the servers, the batch, the optimizer
// and the data. It returns the half precision the workers compute in
// ("" in fp32).
func (t *trainRun) printHeader(stdout io.Writer) string {
	lr := fmt.Sprintf("lr %g", t.ocfg.LR)
	if t.ring && t.rf.scaleLR {
		lr = fmt.Sprintf("lr %g × %d workers (--scale-lr, warmed up over the first epoch)", t.ocfg.LR, t.workers)
	}
	where, prec := t.where, ""
	if t.dev.precision.Half() {
		prec = t.dev.precision.String()
		where += " in " + prec
	}
	batch := fmt.Sprintf("batch %d per worker", t.batchPerWorker())
	if t.batchPerWorker() < t.tf.batch {
		batch += fmt.Sprintf(" (--batch %d is more than a worker's share of an epoch: each step takes all of it)", t.tf.batch)
	}
	fmt.Fprintf(stdout, "shoal train: %s, %s, %d worker(s) on %s, %d server(s), %s, %s %s, %s (%d samples; tested on %s)\n",
		describeModel(t.model), t.tf.mode, t.workers, where, t.servers, batch, t.ocfg.Algorithm, lr, t.train.Name(), t.train.Len(), t.test.Name())
	return prec
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
func (t *trainRun) procs() int { return t.workers + t.servers }

// gossipArgs are the flags that put a child into the run's gossip
// cluster on loopback, joining peers, with the run's detection timings.
func (t *trainRun) gossipArgs(peers []string) []string {
	args := []string{"--gossip-addr", "127.0.0.1:0", "--gossip-detection", t.detection()}
	if len(peers) > 0 {
		args = append(args, "--join", strings.Join(peers, ","))
	}
	return args
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

// newTally is the run's tally, its summary begun with what the flags say
// (prec: the workers' half precision, "" in fp32).
func (t *trainRun) newTally(prec string) *launch.Tally {
	return &launch.Tally{Result: launch.Result{Mode: t.tf.mode, Model: describeModel(t.model), Parameters: t.model.Layout().Size(), Dataset: t.train.Name(), TestDataset: t.test.Name(),
		Workers: t.workers, Servers: t.servers, Threads: t.workerThreads(), ParallelStep: !t.ring && t.parStep, Device: t.where, Precision: prec, Batch: t.batchPerWorker(), Optimizer: t.ocfg.Algorithm, LR: t.ocfg.LR, Staleness: consistency.Staleness{}, FailedWorkers: []int{}, MembershipEvents: []launch.MembershipEvent{}}}
}

// summarise ends the training part of the run once every worker has
// exited: it completes the tally's summary (the training time, the last
// epoch's metrics, the throughput) and prints the failures of workers the
// others finished without. An interrupted run, a run whose every worker
// failed and a ring missing a rank are errors.
func (t *trainRun) summarise(ctx context.Context, stderr io.Writer, tally *launch.Tally, board *launch.Board, failures, killed []string, trainStart time.Time) (*launch.Result, error) {
	if t.sf.stats {
		tally.SummariseSteps()
	}
	board.ClearBar()
	sum := &tally.Result
	sum.TrainSeconds = time.Since(trainStart).Seconds()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	if len(sum.FailedWorkers) == t.workers {
		if len(killed) > 0 { // a worker killed before it joined leaves the others waiting for it
			return nil, fmt.Errorf("every worker failed or was killed:\n%s", strings.Join(append(killed, failures...), "\n"))
		}
		return nil, fmt.Errorf("every worker failed:\n%s", strings.Join(failures, "\n"))
	}
	if t.ring && len(failures) > 0 {
		// A ring cannot finish without every rank.
		return nil, fmt.Errorf("the ring failed:\n%s", strings.Join(failures, "\n"))
	}
	for _, f := range failures {
		fmt.Fprintln(stderr, "shoal train:", f)
	}
	sort.Ints(sum.FailedWorkers)
	if n := len(board.Epochs); n > 0 {
		sum.Epochs = board.Epochs[n-1].Epoch
		sum.TrainLoss, sum.TrainAccuracy = board.Epochs[n-1].Loss, board.Epochs[n-1].Accuracy
	}
	sum.SamplesPerSec = float64(sum.Samples) / sum.TrainSeconds
	return sum, nil
}

// parseTrain reads and checks shoal train's flags, builds the model and
// loads the data (the launcher evaluates the final weights, so a missing
// dataset fails here, before any process starts).
func parseTrain(args []string, stderr io.Writer) (*trainRun, error) {
	fs := newFlagSet("train", "Trains on this machine: starts --servers parameter-server processes and --workers\nworker processes of this binary on free loopback ports, shows their progress,\nevaluates the final weights on the test set and stops everything (also on Ctrl-C).", stderr)
	t := &trainRun{}
	t.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	for _, v := range []func() error{t.tf.validate, t.nf.validate, t.sf.validate, t.rf.validate} {
		if err := v(); err != nil {
			return nil, err
		}
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	if err := serverFlagsInRing(fs, t.ring); err != nil {
		return nil, err
	}
	if err := t.build(); err != nil {
		return nil, err
	}
	return t, nil
}

// register registers shoal train's flags: its own, then those it shares
// with the worker and the server (one flat list, as the help sorts them).
func (t *trainRun) register(fs *flag.FlagSet) {
	fs.IntVar(&t.workers, "workers", 2, "number of worker processes")
	fs.IntVar(&t.threads, "threads", 0, "GEMM threads of each worker, and its Go runtime's share (GOMAXPROCS, at most the cores) in the PS modes; 0 gives each worker the cores divided by --workers, at least 1")
	fs.StringVar(&t.bind, "bind", "auto", "bind each worker to --threads cores of its own, as MPI launchers bind their ranks: auto (where the workers take the CPUs this process may use, fewer than --threads left over), cores (wherever they fit; an error where they do not), none")
	fs.IntVar(&t.servers, "servers", 1, "number of parameter-server processes")
	fs.IntVar(&t.chunkBytes, "chunk-bytes", 1<<20, "bytes per chunk of the partition plan")
	fs.BoolVar(&t.parStep, "parallel-step", autoParallelStep(runtime.NumCPU()), "PS modes: each server updates its chunks in parallel, each going out in the replies once updated (shoal ps --parallel-step; on by default where this machine has 8 or more CPUs)")
	fs.IntVar(&t.lanes, "lanes", 0, "PS modes: split each worker's push-pull to a server over up to this many connections (at most one per chunk of the server's; 1..16); 0: 4 where this machine has 8 or more CPUs, else 1")
	fs.StringVar(&t.save, "save", "", "write the final parameters to this .safetensors file")
	fs.BoolVar(&t.jsonOut, "json", false, "end with one JSON line summarising the run")
	fs.BoolVar(&t.metrics, "metrics", false, "every server and worker serves Prometheus metrics on a loopback port of its own; the addresses are printed")
	fs.StringVar(&t.record, "record-pushes", "", "async, ssp: every worker writes every push's step, clock and staleness, as shard 0 saw them, into DIR/worker-<rank>.pushes.json (an earlier run's there are removed first); shoal bench emulate --replay DIR replays the run in one process")
	fs.StringVar(&t.timeline, "timeline", "", "every server and worker writes its per-step timeline into DIR (Chrome trace-event JSON), merged at the end into DIR/timeline.json on one clock (open it in ui.perfetto.dev or chrome://tracing)")
	fs.DurationVar(&t.startup, "startup-timeout", 60*time.Second, "how long a server may take to start")
	fs.IntVar(&t.backup, "backup-workers", 0, "sync: apply a step once workers minus this many pushed it")
	fs.Int64Var(&t.staleness, "staleness", 1, "ssp: how many steps a worker may run ahead of the slowest (0 is sync)")
	fs.StringVar(&t.ckptDir, "checkpoint-dir", "", "servers checkpoint here and resume from it")
	fs.Int64Var(&t.ckptEvery, "checkpoint-every", 500, "with --checkpoint-dir: checkpoint every N updates (0: only at the end)")
	fs.StringVar(&t.ckptErrors, "checkpoint-errors", "fail", "a checkpoint that cannot be written during the run: fail (the shard stops, and the run with it) or warn (log it and go on)")
	fs.BoolVar(&t.journal, "journal", false, "with --checkpoint-dir: servers journal every update before applying it (a killed server loses none)")
	fs.BoolVar(&t.testEval, "test", true, "evaluate the final weights on the test set (benchmarks of large models turn it off)")
	fs.DurationVar(&t.callTime, "call-timeout", 60*time.Second, "the workers' deadline of each pull and push, or each collective call (ring)")
	fs.BoolVar(&t.tls, "tls", false, "servers and workers (ring: the rendezvous and the TCP links) talk mutual TLS and check a bearer token, from a CA and token made for this run and removed after it")
	t.nf.register(fs)
	t.sf.register(fs)
	t.mf.register(fs)
	t.of.register(fs, "cosine")
	t.df.register(fs)
	t.tf.register(fs)
	t.lf.register(fs, "warn")
	t.rf.register(fs)
	t.dev.register(fs)
}

// check settles the ring (no servers; elastic where nothing evaluates
// during training) and checks train's own flags.
func (t *trainRun) check() error {
	t.ring = t.tf.mode == consistency.Ring
	// The elastic ring does not run evaluations during training yet.
	t.rf.elastic = t.ring && t.rf.elastic && t.sf.stopAt == 0 && t.sf.evalEvery == 0
	if t.ring {
		t.servers = 0 // no parameter server in ring mode
	} else if t.servers < 1 {
		return fmt.Errorf("--servers %d: want >= 1", t.servers)
	}
	if t.workers < 1 {
		return fmt.Errorf("--workers %d: want >= 1", t.workers)
	}
	if procs, limit := t.procs(), maxProcsPerCore*runtime.NumCPU(); procs > limit {
		flags := fmt.Sprintf("--workers %d and --servers %d", t.workers, t.servers)
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
	if err := checkLanes(t.lanes); err != nil {
		return err
	}
	if t.journal && t.ckptDir == "" {
		return errors.New("--journal: needs --checkpoint-dir, where the servers write it")
	}
	if t.startup <= 0 {
		return fmt.Errorf("--startup-timeout %v: want > 0", t.startup)
	}
	if t.callTime <= 0 {
		return fmt.Errorf("--call-timeout %v: want > 0 (every call has a deadline)", t.callTime)
	}
	if t.ckptErrors != "fail" && t.ckptErrors != "warn" {
		return fmt.Errorf("--checkpoint-errors %q: want fail or warn", t.ckptErrors)
	}
	if t.ckptEvery < 0 {
		return fmt.Errorf("--checkpoint-every %d: want >= 0 (0: only at the end)", t.ckptEvery)
	}
	if err := recordable(t.record, t.tf.mode); err != nil {
		return err
	}
	return errors.Join(writableFile("--save", t.save), writableDir("--checkpoint-dir", t.ckptDir), writableDir("--timeline", t.timeline),
		writableDir("--record-pushes", t.record))
}

// batchPerWorker is the batch each worker's steps take: --batch, or a
// worker's whole share of an epoch where --batch is larger (a worker's
// loader takes no more than its share, as PyTorch's does).
func (t *trainRun) batchPerWorker() int {
	return min(t.tf.batch, max((t.train.Len()+t.workers-1)/t.workers, 1))
}

// serverFlags are shoal train's flags that only the parameter-server
// modes read: their servers, and the workers' calls to them.
var serverFlags = []string{"servers", "staleness", "backup-workers", "chunk-bytes", "lanes", "parallel-step",
	"checkpoint-dir", "checkpoint-every", "checkpoint-errors", "journal", "push-every", "fetch-every"}

// serverFlagsInRing refuses serverFlags given in ring mode, which would
// ignore them (a --staleness -5 or --servers 3 there says the command is
// not what its author thinks).
func serverFlagsInRing(fs *flag.FlagSet, ring bool) error {
	if !ring {
		return nil
	}
	var given []string
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(serverFlags, f.Name) {
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
	if t.model, err = t.mf.build(); err != nil {
		return err
	}
	// Worker r is local rank r: a --device that finds no GPU fails here,
	// before any process starts.
	if t.where, err = t.dev.describePlacement(t.workers); err != nil {
		return err
	}
	train, test, err := t.df.load(t.mf.seed)
	if err != nil {
		return err
	}
	t.train, t.test = train, test
	if t.of.decay != "none" && t.of.decaySteps == 0 {
		// Decay over the whole run: the servers apply one update per push.
		t.of.decaySteps = max(totalUpdates(train.Len(), t.workers, t.staleness, &t.tf)-t.of.warmup, 1)
	}
	t.ocfg, err = t.of.config()
	return err
}

// common are the flags every child gets.
func (t *trainRun) common() []string {
	args := append(append(append(append(t.mf.args(), t.lf.args()...), t.nf.args()...), t.sec.args()...), "--events")
	if t.metrics {
		args = append(args, "--metrics-addr", "127.0.0.1:0")
	}
	return args
}

// shardProc is one server shard that shoal train runs.
type shardProc struct {
	idx      int
	addr     string // gRPC
	gossip   string
	child    *launch.Child
	restarts int
}

// maxRestarts bounds how often shoal train restarts one shard: a shard
// that keeps dying has a cause that restarting will not cure.
const maxRestarts = 3

// startServers starts the parameter-server shards one after the other,
// each on a free loopback port, and returns their addresses and gossip
// addresses. The servers form the job's gossip cluster on loopback, each
// joining the first; the workers join them.
func (t *trainRun) startServers(ctx context.Context, l *launch.Launcher) (addrs, gossip []string, err error) {
	for i := range t.servers {
		sp := &shardProc{idx: i}
		if err := t.startShard(ctx, l, sp, "127.0.0.1:0", gossip[:min(len(gossip), 1)]); err != nil {
			return nil, nil, err
		}
		t.shards = append(t.shards, sp)
		addrs, gossip = append(addrs, sp.addr), append(gossip, sp.gossip)
	}
	return addrs, gossip, nil
}

// startShard starts shard sp.idx listening on listen, joining the gossip
// cluster through join, and waits until it serves.
func (t *trainRun) startShard(ctx context.Context, l *launch.Launcher, sp *shardProc, listen string, join []string) error {
	args := append([]string{"ps", "--listen", listen, "--shard", strconv.Itoa(sp.idx), "--servers", strconv.Itoa(t.servers),
		"--mode", t.tf.mode.String(), "--chunk-bytes", strconv.Itoa(t.chunkBytes), "--workers", strconv.Itoa(t.workers),
		"--backup-workers", strconv.Itoa(t.backup), "--staleness", strconv.FormatInt(t.staleness, 10),
		"--checkpoint-dir", t.ckptDir, "--checkpoint-every", strconv.FormatInt(t.ckptEvery, 10), "--checkpoint-errors", t.ckptErrors, "--journal=" + strconv.FormatBool(t.journal),
		"--parallel-step=" + strconv.FormatBool(t.parStep)},
		append(t.common(), t.of.args()...)...)
	args = append(args, t.timelineArgs(fmt.Sprintf("ps-%d", sp.idx), sp.restarts)...)
	c, err := l.Start(ctx, fmt.Sprintf("ps %d", sp.idx), sp.idx, nil, append(args, t.gossipArgs(join)...)...)
	if err != nil {
		return err
	}
	ev, err := l.WaitFor(ctx, c, t.startup, isListening)
	if err != nil {
		return err
	}
	sp.addr, sp.gossip, sp.child = ev.Addr, ev.Gossip, c
	return nil
}

// restartable says whether shoal train starts a dead shard again: killed
// from outside (not a failure of its own), with checkpoints to resume
// from, and either a journal (no update lost, every mode) or async mode
// (where a lost update is like a dropped push), at most maxRestarts times.
func (t *trainRun) restartable(ctx context.Context, sp *shardProc) bool {
	return ctx.Err() == nil && sp.child.Signal() != "" && t.ckptDir != "" &&
		(t.journal || t.tf.mode == consistency.Async) && sp.restarts < maxRestarts
}

// restartShard starts a killed shard again on its address, from its
// checkpoint (and journal), joining the gossip of everyone else.
func (t *trainRun) restartShard(ctx context.Context, l *launch.Launcher, sp *shardProc, peers []string) error {
	cause := sp.child.Err()
	join := slices.DeleteFunc(slices.Clone(peers), func(p string) bool { return p == sp.gossip })
	sp.restarts++
	if err := t.startShard(ctx, l, sp, sp.addr, join); err != nil {
		return fmt.Errorf("ps %d was killed (%v) and could not be restarted: %w", sp.idx, cause, err)
	}
	return nil
}

func isListening(e launch.Event) bool { return e.Event == launch.Listening }

// startWorkers starts the workers; in ring mode rank 0 first, whose
// rendezvous address the others join.
func (t *trainRun) startWorkers(ctx context.Context, l *launch.Launcher, addrs, gossip []string) (map[*launch.Child]bool, error) {
	isWorker := map[*launch.Child]bool{}
	master := "127.0.0.1:0"
	var ringGossip []string
	for r := range t.workers {
		args := append([]string{"worker", "--servers", strings.Join(addrs, ","), "--rank", strconv.Itoa(r), "--world-size", strconv.Itoa(t.workers),
			"--local-rank", strconv.Itoa(r),
			"--eval=" + strconv.FormatBool(t.ring && t.testEval), // ring ranks evaluate together; PS: the launcher does
			"--call-timeout", t.callTime.String()},
			append(append(append(append(t.common(), t.df.args()...), t.tf.args()...), t.sf.args()...), t.dev.args()...)...)
		args = append(args, t.timelineArgs(fmt.Sprintf("worker-%d", r), 0)...)
		if t.record != "" {
			args = append(args, "--record-pushes", recordFile(t.record, r))
		}
		if !t.ring {
			args = append(append(args, "--compression", t.rf.compression, "--lanes", strconv.Itoa(t.lanes)), t.gossipArgs(gossip)...)
		}
		if t.ring {
			args = append(append(append(args, t.of.args()...), t.rf.args()...), "--master", master)
			if t.rf.elastic {
				// Rank 0 starts the gossip; the others join it.
				args = append(args, t.gossipArgs(ringGossip)...)
			}
			if (r == 0 || t.rf.elastic) && t.save != "" { // elastic: whoever ends as rank 0 saves
				args = append(args, "--save", t.save)
			}
		}
		// Each worker gets its share of the cores, and OpenBLAS no more
		// threads than that (it would start one per core in every process),
		// unless --threads says how many.
		threads := t.workerThreads()
		args = append(args, "--threads", strconv.Itoa(threads))
		if r < len(t.cpuSets) {
			args = append(args, "--cpus", cpubind.Format(t.cpuSets[r]))
		}
		c, err := l.Start(ctx, fmt.Sprintf("worker %d", r), r, workerEnv(threads, !t.ring && os.Getenv("GOMAXPROCS") == ""), args...)
		if err != nil {
			return nil, err
		}
		isWorker[c] = true
		if t.ring && r == 0 {
			// Rank 0 serves the rendezvous; the others join it there.
			ev, err := l.WaitFor(ctx, c, t.startup, isListening)
			if err != nil {
				return nil, err
			}
			master = ev.Addr
			if ev.Gossip != "" {
				ringGossip = []string{ev.Gossip}
			}
		}
	}
	return isWorker, nil
}

// watch follows the run until every worker has exited: progress to the
// board, evaluations and done events to the tally, a worker's failure
// noted, a server's death the end of the run. Shard 0 reports the
// workers' membership changes; in the parameter-server modes a worker that
// dies does not end the run, the others go on without it. When rank 0
// stops at its target accuracy, the other PS workers are told to stop
// (ring ranks agree among themselves). It returns ring rank 0's done event
// (its test metrics), the workers' failures, with their last words, and
// the workers killed. A PS worker killed by a signal is not a failure but
// a membership change: the run goes on without it and can still succeed.
func (t *trainRun) watch(ctx context.Context, l *launch.Launcher, isWorker map[*launch.Child]bool, tally *launch.Tally, board *launch.Board,
	stdout io.Writer, start time.Time) (*launch.Event, []string, []string, error) {
	w := &trainWatch{t: t, l: l, isWorker: isWorker, tally: tally, board: board, stdout: stdout, start: start,
		cause: map[int]string{}, done: map[int]bool{}}
	for _, sp := range t.shards {
		w.peers = append(w.peers, sp.gossip)
	}
	for running := t.workers; running > 0; {
		m, err := l.Next(ctx)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("interrupted: %w", err)
		}
		switch {
		case m.Exit && isWorker[m.From]:
			running--
			w.workerExited(m.From)
		case m.Exit:
			if err := w.serverExited(ctx, m.From); err != nil {
				return nil, nil, nil, err
			}
		case m.Event.Event == launch.Listening && m.Event.Gossip != "":
			w.peers = append(w.peers, m.Event.Gossip)
		case m.Event.Event == launch.Metrics:
			board.ClearBar()
			fmt.Fprintf(stdout, "metrics: %s at http://%s/metrics\n", m.From.Name(), m.Event.Addr)
		case m.Event.Event == launch.Progress:
			board.Update(launch.ProgressOf(m.Event))
		case m.Event.Event == launch.Member:
			w.memberChanged(m.Event)
		default:
			w.tallied(m.Event)
		}
	}
	return w.ringTest, w.failures, w.killed, nil
}

// trainWatch is what watch follows a run with, and what it has learnt.
type trainWatch struct {
	t        *trainRun
	l        *launch.Launcher
	isWorker map[*launch.Child]bool
	tally    *launch.Tally
	board    *launch.Board
	stdout   io.Writer
	start    time.Time

	ringTest *launch.Event  // ring: the first done event, with the test metrics
	failures []string       // the workers' failures, with their last words
	killed   []string       // the workers killed from outside (a membership change)
	cause    map[int]string // rank → how its process ended
	peers    []string       // gossip addresses, for a restarted shard to join
	done     map[int]bool   // ranks that finished their run
}

// workerExited notes a worker's exit: a failure, or where it was killed
// from outside and the run can go on without it, a membership change.
func (w *trainWatch) workerExited(c *launch.Child) {
	if c.Err() == nil {
		return
	}
	w.tally.Result.FailedWorkers = append(w.tally.Result.FailedWorkers, c.Rank())
	w.board.MarkDead(c.Rank())
	w.cause[c.Rank()] = c.Err().Error()
	if c.Signal() != "" && (!w.t.ring || w.t.rf.elastic) {
		// Killed from outside: a membership change the
		// others go on after, reported when shard 0 sees it.
		w.board.ClearBar()
		fmt.Fprintf(w.stdout, "%s was killed (%v)\n", c.Name(), c.Err())
		w.killed = append(w.killed, fmt.Sprintf("%s was killed (%v)", c.Name(), c.Err()))
	} else {
		w.failures = append(w.failures, c.Failure())
	}
}

// serverExited restarts a shard that was killed, if it is restartable;
// any other server's exit ends the run (the error).
func (w *trainWatch) serverExited(ctx context.Context, c *launch.Child) error {
	t := w.t
	if r := c.Rank(); r < len(t.shards) && t.shards[r].child == c && t.restartable(ctx, t.shards[r]) {
		sp := t.shards[r]
		if err := t.restartShard(ctx, w.l, sp, w.peers); err != nil {
			return err
		}
		w.peers = append(w.peers, sp.gossip)
		me := launch.MembershipEvent{Role: "ps", Rank: sp.idx, Change: "restarted", Seconds: time.Since(w.start).Seconds(), Cause: c.Err().Error()}
		w.tally.Result.MembershipEvents = append(w.tally.Result.MembershipEvents, me)
		w.board.ClearBar()
		fmt.Fprintf(w.stdout, "ps %d was killed (%v); restarted from its checkpoint on %s\n", sp.idx, c.Err(), sp.addr)
		return nil
	}
	// A server died: nothing can finish without it.
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New(c.Failure())
}

// memberChanged notes and prints a change of the workers' membership
// that shard 0 reports, but for a worker's joining and its leaving at
// the end of its run.
func (w *trainWatch) memberChanged(e launch.Event) {
	if e.Change == "joined" || (e.Change == "left" && w.done[e.Rank]) {
		return // the run's start and its end are not changes
	}
	me := launch.MembershipEvent{Role: e.Role, Rank: e.Rank, Change: e.Change, Step: e.Steps, Live: e.Live,
		Seconds: time.Since(w.start).Seconds(), Cause: w.cause[e.Rank]}
	w.tally.Result.MembershipEvents = append(w.tally.Result.MembershipEvents, me)
	w.board.ClearBar()
	fmt.Fprintln(w.stdout, describeChange(me))
}

// tallied adds an event to the tally; a done event also marks its rank
// done, is the ring's test metrics if it is the first, and, from PS rank
// 0 stopped at its target accuracy, tells the other workers to stop.
func (w *trainWatch) tallied(e launch.Event) {
	w.tally.Add(e)
	if e.Event != launch.Done {
		return
	}
	w.done[e.Rank] = true
	if e.CPUs != "" && e.Rank < w.t.workers {
		cpus := &w.tally.Result.CPUs
		if *cpus == nil {
			*cpus = make([]string, w.t.workers)
		}
		(*cpus)[e.Rank] = e.CPUs
	}
	// The lanes as the workers resolved --lanes (0 asks each for its
	// machine's choice, and none opens more than a server has chunks).
	w.tally.Result.Lanes = max(w.tally.Result.Lanes, e.Lanes)
	if w.t.ring && w.ringTest == nil {
		// Every rank evaluates the whole test set together and
		// reports the same metrics; the first will do (rank 0
		// may have died in an elastic ring).
		w.ringTest = &e
	}
	if e.Stopped && e.Rank == 0 && !w.t.ring {
		for c := range w.isWorker {
			if c.Rank() != 0 {
				c.Tell("stop")
			}
		}
	}
}

// describeChange is a membership change as shoal train prints it, e.g.
// "worker 2 died at step 413 (signal: killed); 3 workers go on".
func describeChange(e launch.MembershipEvent) string {
	s := fmt.Sprintf("%s %d %s at step %d", e.Role, e.Rank, e.Change, e.Step)
	if e.Cause != "" {
		s += " (" + e.Cause + ")"
	}
	if e.Live == 1 {
		return s + "; 1 worker goes on"
	}
	return fmt.Sprintf("%s; %d workers go on", s, e.Live)
}

// finish evaluates the final weights on the test set (ring: rank 0 did)
// and saves them with --save.
func (t *trainRun) finish(ctx context.Context, addrs []string, ringTest *launch.Event, sum *launch.Result) (worker.Evaluation, error) {
	ev := worker.Evaluation{Accuracy: -1}
	meta := map[string]string{"format": "pt", "shoal_model": sum.Model, "shoal_mode": t.tf.mode.String()}
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
	params, err := pullFinal(ctx, addrs, t.model, t.sec.creds)
	if err != nil {
		return ev, err
	}
	if t.testEval {
		if ev, err = worker.Evaluate(ctx, t.model, params, t.test, 1000); err != nil {
			return ev, err
		}
		meta["test_accuracy"] = fmtFloat(ev.Accuracy)
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
	if sum.StoppedAtTarget {
		fmt.Fprintf(stdout, "stopped early: rank 0 measured test accuracy >= %g after %d steps\n", t.sf.stopAt, sum.Steps)
	}
	if sum.Saved != "" {
		fmt.Fprintf(stdout, "saved: %s\n", sum.Saved)
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

// timelineArgs gives a child its --timeline file under --timeline DIR:
// name.json, or name.restart-N.json for a restarted shard.
func (t *trainRun) timelineArgs(name string, restart int) []string {
	if t.timeline == "" {
		return nil
	}
	if restart > 0 {
		name = fmt.Sprintf("%s.restart-%d", name, restart)
	}
	return []string{"--timeline", filepath.Join(t.timeline, name+".json")}
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

// totalUpdates is how many optimizer steps each server takes in a run:
// one per step in sync mode, else one per push (every worker pushes once
// per push-every steps).
func totalUpdates(n, workers int, staleness int64, tf *trainFlags) int64 {
	steps := tf.steps
	if steps == 0 {
		perRank := (n + workers - 1) / workers
		steps = int64(tf.epochs) * int64((perRank+tf.batch-1)/tf.batch)
	}
	if tf.mode.Synchronous(staleness) {
		return steps
	}
	return int64(workers) * ((steps + int64(tf.pushEvery) - 1) / int64(tf.pushEvery))
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
