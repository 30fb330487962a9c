package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/internal/cpubind"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/node"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/worker"
)

// trainFlags are the training-loop flags shared by worker and train.
type trainFlags struct {
	modeName       string           // --mode, which validate parses into mode
	mode           consistency.Mode // set by validate
	backwardPasses int
	batch          int
	epochs         int
	steps          int64
	pushEvery      int
	fetchEvery     int
	overlap        bool
	progressEvery  time.Duration
}

func (t *trainFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.modeName, "mode", consistency.Async.String(), "how workers agree: async (Downpour SGD), sync, ssp (bounded staleness) through parameter servers, or ring (allreduce, no server)")
	fs.IntVar(&t.backwardPasses, "backward-passes-per-step", 1, "average the gradients of N batches into each step")
	fs.IntVar(&t.batch, "batch", 64, "batch size per worker")
	fs.IntVar(&t.epochs, "epochs", 3, "epochs to train")
	fs.Int64Var(&t.steps, "steps", 0, "training steps per worker (overrides --epochs when > 0)")
	fs.IntVar(&t.pushEvery, "push-every", 1, "async: push gradients every N steps (Downpour's n_push)")
	fs.IntVar(&t.fetchEvery, "fetch-every", 1, "async: pull weights every N steps (Downpour's n_fetch)")
	fs.DurationVar(&t.progressEvery, "progress-every", 250*time.Millisecond, "how often a worker reports its progress (0: after every step)")
	fs.BoolVar(&t.overlap, "overlap-push-pull", false, "async: push each gradient in the background while pulling the next step's weights (both link directions busy at once; up to one more update of staleness)")
}

func (t *trainFlags) validate() error {
	m, err := consistency.Parse(t.modeName)
	if err != nil {
		return fmt.Errorf("--%w", err) // --mode "x": unknown (want ...)
	}
	t.mode = m
	if t.mode != consistency.Async && (t.pushEvery != 1 || t.fetchEvery != 1) {
		return fmt.Errorf("--push-every %d, --fetch-every %d: %s mode pulls and pushes every step (want 1)", t.pushEvery, t.fetchEvery, t.mode)
	}
	if t.pushEvery < 1 || t.pushEvery > ps.MaxStepGap || t.fetchEvery < 1 {
		return fmt.Errorf("--push-every %d, --fetch-every %d: want --push-every 1..%d (a shard refuses a push further past the last) and --fetch-every >= 1",
			t.pushEvery, t.fetchEvery, ps.MaxStepGap)
	}
	if t.overlap && (t.mode != consistency.Async || t.pushEvery != 1 || t.fetchEvery != 1) {
		return fmt.Errorf("--overlap-push-pull: only for --mode async with --push-every 1 and --fetch-every 1 (have --mode %s, %d, %d)", t.mode, t.pushEvery, t.fetchEvery)
	}
	if t.progressEvery < 0 {
		return fmt.Errorf("--progress-every %v: want >= 0", t.progressEvery)
	}
	if t.backwardPasses < 1 {
		return fmt.Errorf("--backward-passes-per-step %d: want >= 1", t.backwardPasses)
	}
	if t.batch < 1 {
		return fmt.Errorf("--batch %d: want >= 1", t.batch)
	}
	if t.steps < 0 {
		return fmt.Errorf("--steps %d: want >= 0", t.steps)
	}
	if t.steps == 0 && t.epochs < 1 {
		return fmt.Errorf("--epochs %d: want >= 1 (or --steps > 0)", t.epochs)
	}
	if t.pushEvery < 1 || t.fetchEvery < 1 {
		return fmt.Errorf("--push-every %d, --fetch-every %d: want >= 1", t.pushEvery, t.fetchEvery)
	}
	return nil
}

func (t *trainFlags) args() []string {
	return []string{"--mode", t.mode.String(), "--batch", fmt.Sprint(t.batch), "--epochs", fmt.Sprint(t.epochs), "--steps", fmt.Sprint(t.steps),
		"--push-every", fmt.Sprint(t.pushEvery), "--fetch-every", fmt.Sprint(t.fetchEvery), "--backward-passes-per-step", fmt.Sprint(t.backwardPasses),
		"--overlap-push-pull=" + fmt.Sprint(t.overlap), "--progress-every", t.progressEvery.String()}
}

// workerRun is one `shoal worker`: its flags, its place in the job, its
// model and data.
type workerRun struct {
	mf    modelFlags
	df    dataFlags
	tf    trainFlags
	lf    logFlags
	of    optFlags
	rf    ringFlags
	nf    nicFlags
	sf    statFlags
	gf    gossipFlags
	sec   secFlags
	mtf   metricsFlags
	tlf   timelineFlags
	dev   deviceFlags
	ranks rankFlags // --rank, --world-size, --local-rank, which parseWorker reads into id
	save  string
	// recordPushes is --record-pushes: the file the worker's pushes go to.
	recordPushes string
	threads      int
	cpus         string // --cpus: the CPUs to bind to
	boundTo      string // the CPUs it may run on after binding; "" unbound
	servers      string
	events       bool
	eval         bool
	connect      time.Duration
	callTime     time.Duration
	retryFor     time.Duration
	lanes        int // --lanes: connections per server for a push-pull; 0 auto

	id          cluster.Identity
	log         *slog.Logger
	model       nn.Model
	closeModel  func() // frees the model's device
	train, test data.Dataset
}

func runWorker(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	w, err := parseWorker(args, stderr)
	if err != nil {
		return err
	}
	defer w.closeModel()
	cfg, err := w.config(stdout)
	if err != nil {
		return err
	}
	if cfg.Timeline, err = w.tlf.open(fmt.Sprintf("worker %d", w.id.Rank), "steps", "allreduce (overlapping backward)"); err != nil {
		return err
	}
	defer closeTimeline(cfg.Timeline, &err)
	if w.tf.mode != consistency.Ring {
		if err := w.sec.checkDial(cfg.PS.Servers); err != nil {
			return err
		}
	}
	return node.RunWorker(ctx, cfg, stdin, stdout)
}

// rankFlags are --rank, --world-size and --local-rank: a worker's place
// in the job where the launcher's environment does not say it, or says
// otherwise. -1 is unset.
type rankFlags struct {
	rank, world, localRank int
}

func (f *rankFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.rank, "rank", -1, "this worker's rank (default: from the launcher's environment, else 0)")
	fs.IntVar(&f.world, "world-size", -1, "number of workers (default: from the launcher's environment, else 1)")
	fs.IntVar(&f.localRank, "local-rank", -1, "this worker's rank among those on its machine, which picks its GPU (default: from the launcher's environment, else 0)")
}

// identity is the worker's place in the job: from the launcher's
// environment, with the flags that are set over it.
func (f *rankFlags) identity() (cluster.Identity, error) {
	// -1 is unset; anything below is a mistake, not "unset" (--rank -5
	// ran as rank 0).
	for _, v := range []struct {
		name string
		n    int
	}{{"--rank", f.rank}, {"--world-size", f.world}, {"--local-rank", f.localRank}} {
		if v.n < -1 {
			return cluster.Identity{}, fmt.Errorf("%s %d: want >= 0", v.name, v.n)
		}
	}
	id, err := cluster.FromEnv(os.Getenv)
	if err != nil {
		return cluster.Identity{}, err
	}
	if f.rank >= 0 {
		id.Rank, id.Source = f.rank, "flags"
	}
	if f.world >= 0 {
		id.WorldSize, id.Source = f.world, "flags"
	}
	if f.localRank >= 0 {
		id.LocalRank = f.localRank
	}
	if err := id.Validate(); err != nil {
		return cluster.Identity{}, fmt.Errorf("--rank/--world-size: %w", err)
	}
	return id, nil
}

// parseWorker reads and checks shoal worker's flags, finds the worker's
// rank and world size, builds its model and loads its data.
func parseWorker(args []string, stderr io.Writer) (*workerRun, error) {
	fs := newFlagSet("worker", "Runs one training worker: it pulls weights from the parameter servers, computes\ngradients on its shard of the data and pushes them back. Its rank and the world\nsize come from --rank/--world-size, else SHOAL_RANK/SHOAL_WORLD_SIZE, Open MPI,\nSlurm or torchrun environment variables.", stderr)
	w := &workerRun{}
	w.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := w.check(); err != nil {
		return nil, err
	}
	var err error
	if w.log, err = w.lf.logger(stderr); err != nil {
		return nil, err
	}
	w.sec.warnExposed(w.log)
	if w.id, err = w.ranks.identity(); err != nil {
		return nil, err
	}
	if err := w.bind(); err != nil {
		return nil, err
	}
	for _, v := range []func() error{w.checkFiles, w.loadData} {
		if err := v(); err != nil {
			return nil, err
		}
	}
	if err := w.buildModel(stderr); err != nil {
		return nil, err
	}
	return w, nil
}

// check checks the flags that need nothing loaded.
func (w *workerRun) check() error {
	if w.retryFor < 0 {
		return fmt.Errorf("--retry-for %v: want >= 0 (0: never try a call again)", w.retryFor)
	}
	if w.connect <= 0 {
		return fmt.Errorf("--connect-timeout %v: want > 0", w.connect)
	}
	if err := checkLanes(w.lanes); err != nil {
		return err
	}
	if w.callTime <= 0 {
		return fmt.Errorf("--call-timeout %v: want > 0 (every call has a deadline)", w.callTime)
	}
	for _, v := range []func() error{w.tf.validate, w.nf.validate, w.sf.validate, w.gf.validate, w.rf.validate, w.sec.load} {
		if err := v(); err != nil {
			return err
		}
	}
	return nil
}

// bind checks --threads and binds the worker to --cpus, if set, before
// the data and the model: the threads started from here on (OpenBLAS's
// among them) inherit the binding. What it reports is its affinity read
// back, not the flag.
func (w *workerRun) bind() error {
	if w.threads < 1 {
		return fmt.Errorf("--threads %d: want >= 1", w.threads)
	}
	if w.cpus == "" {
		return nil
	}
	cpus, err := cpubind.Parse(w.cpus)
	if err == nil {
		err = cpubind.Bind(cpus)
	}
	if err == nil {
		cpus, err = cpubind.Allowed()
	}
	if err != nil {
		return fmt.Errorf("--cpus %s: %w", w.cpus, err)
	}
	w.boundTo = cpubind.Format(cpus)
	return nil
}

// checkFiles checks --save and --record-pushes.
func (w *workerRun) checkFiles() error {
	if err := writableFile("--save", w.save); err != nil {
		return err
	}
	if err := recordable(w.recordPushes, w.tf.mode); err != nil {
		return err
	}
	return writableFile("--record-pushes", w.recordPushes)
}

// loadData loads the training and test sets.
func (w *workerRun) loadData() (err error) {
	w.train, w.test, err = w.df.load(w.mf.seed)
	return err
}

// register registers shoal worker's flags: its own, then those it shares
// with train and the server (one flat list, as the help sorts them).
func (w *workerRun) register(fs *flag.FlagSet) {
	fs.StringVar(&w.save, "save", "", "ring: rank 0 writes the final parameters to this .safetensors file")
	fs.StringVar(&w.recordPushes, "record-pushes", "", "async, ssp: write every push's step, clock and staleness, as shard 0 saw them, to this JSON file at the end (shoal bench emulate --replay replays the run from the workers' files)")
	fs.IntVar(&w.threads, "threads", runtime.NumCPU(), "GEMM threads of this worker (shoal train gives each of its workers its share of the cores)")
	fs.StringVar(&w.cpus, "cpus", "", "bind this worker's threads to these CPUs, a list such as 0-3,8 (Linux; shoal train --bind gives each of its workers cores of its own)")
	fs.StringVar(&w.servers, "servers", "localhost:7070", "parameter server addresses, comma-separated, in shard order")
	w.ranks.register(fs)
	fs.BoolVar(&w.events, "events", false, "write JSON events on stdout for a launcher")
	fs.BoolVar(&w.eval, "eval", true, "evaluate the final weights on the test set (rank 0; in ring mode every rank its share)")
	fs.DurationVar(&w.connect, "connect-timeout", 60*time.Second, "how long to wait for the servers to answer")
	fs.DurationVar(&w.callTime, "call-timeout", 60*time.Second, "deadline of each pull and push, or each collective call (ring)")
	fs.IntVar(&w.lanes, "lanes", 0, "PS modes: split each push-pull to a server over up to this many connections (at most one per chunk of the server's; 1..16); 0: 4 where this machine has 8 or more CPUs, else 1")
	fs.DurationVar(&w.retryFor, "retry-for", 60*time.Second, "how long a pull or push that finds a server unavailable (restarting, or cut off) is tried again before the worker gives up")
	w.nf.register(fs)
	w.sf.register(fs)
	w.gf.register(fs)
	w.sec.register(fs)
	w.mtf.register(fs)
	w.tlf.register(fs)
	w.dev.register(fs)
	w.mf.register(fs)
	w.df.register(fs)
	w.tf.register(fs)
	w.of.register(fs, "none")
	w.rf.register(fs)
	w.lf.register(fs, "warn")
}

// buildModel builds the worker's model where --device places it, logs
// where and, outside shoal train, says it on stderr.
func (w *workerRun) buildModel(stderr io.Writer) error {
	pm, err := w.dev.build(&w.mf, w.id.LocalRank, w.threads)
	if err != nil {
		return fmt.Errorf("worker %d: %w", w.id.Rank, err)
	}
	w.model, w.closeModel = pm.model, pm.close
	w.log.Info("compute device", "component", "worker", "rank", w.id.Rank, "local_rank", w.id.LocalRank, "device", pm.where, "precision", w.dev.precision.String(), "why", pm.why)
	if !w.events {
		// Said once at start to the person or launcher that ran it;
		// under shoal train (--events), train's header says it.
		where := pm.where
		if w.dev.precision.Half() {
			where += " in " + w.dev.precision.String()
		}
		fmt.Fprintf(stderr, "shoal worker %d: computing on %s (%s)\n", w.id.Rank, where, pm.why)
	}
	return nil
}

// config is the worker process's config from the flags.
func (w *workerRun) config(stdout io.Writer) (node.WorkerConfig, error) {
	t := w.tf
	cfg := node.WorkerConfig{ID: w.id, Logger: w.log, Model: w.model, ModelName: describeModel(w.model), Train: w.train, Test: w.test, Seed: w.mf.seed,
		Loop: node.Loop{Mode: t.mode, Batch: t.batch, Epochs: t.epochs, Steps: t.steps, BackwardPasses: t.backwardPasses, PushEvery: t.pushEvery, FetchEvery: t.fetchEvery,
			Overlap: t.overlap, ProgressEvery: t.progressEvery},
		Progress: progressTo(stdout, w.events), Stats: node.Stats{Times: w.sf.stats, EvalEvery: w.sf.evalEvery, StopAt: w.sf.stopAt}, Stall: w.lf.stall,
		Events: w.events, Eval: w.eval, CPUs: w.boundTo, CallTimeout: w.callTime, Creds: w.sec.creds, NIC: w.nf.config(), GossipBind: w.gf.bindAddr(), MetricsAddr: w.mtf.addr,
		PS: node.PSConfig{Servers: strings.Split(w.servers, ","), Connect: w.connect, RetryFor: w.retryFor, Lanes: w.lanes, AutoLanes: autoLanes(runtime.NumCPU()), RecordPushes: w.recordPushes}}
	if w.gf.on() {
		cfg.Gossip = w.gf.start
	}
	var err error
	if t.mode != consistency.Ring {
		cfg.PS.Encoding, err = w.rf.pushEncoding()
		return cfg, err
	}
	cfg.Ring, err = w.ringConfig()
	return cfg, err
}

// ringConfig is the ring's config from the flags, with the optimizer
// every rank runs itself.
func (w *workerRun) ringConfig() (node.RingConfig, error) {
	r := w.rf
	ocfg, err := w.of.config()
	if err != nil {
		return node.RingConfig{}, err
	}
	if r.scaleLR {
		ocfg = worker.ScaleLR(ocfg, w.id.WorldSize, w.train.Len(), w.tf.batch*w.tf.backwardPasses)
	}
	comp, err := r.compressionMode()
	if err != nil {
		return node.RingConfig{}, err
	}
	cfg := node.RingConfig{Listen: r.listen, JobID: r.jobID, ReduceOp: r.reduceOp, Compression: comp, DesyncEvery: r.desyncEvery, SharedMemory: r.sharedMemory,
		FusionBytes: r.fusionBytes, Optimizer: ocfg, Elastic: r.elastic, MinWorkers: r.minWorkers, RejoinTimeout: r.rejoinTimeout, Save: w.save}
	if !r.elastic || !w.gf.on() {
		cfg.Master, err = r.masterAddr()
	}
	return cfg, err
}
