package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/internal/cpubind"
	"github.com/shoalml/shoal/internal/netshape"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/timeline"
	"github.com/shoalml/shoal/worker"
	"github.com/shoalml/shoal/worker/psclient"
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
	mf       modelFlags
	df       dataFlags
	tf       trainFlags
	lf       logFlags
	of       optFlags
	rf       ringFlags
	nf       nicFlags
	sf       statFlags
	gf       gossipFlags
	sec      secFlags
	mtf      metricsFlags
	tlf      timelineFlags
	dev      deviceFlags
	ranks    rankFlags        // --rank, --world-size, --local-rank, which parseWorker reads into id
	timeline *timeline.Writer // --timeline
	// metrics, with --metrics-addr, takes the strategy's counters.
	metrics *metrics.Worker
	save    string
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
	usedLanes    int // the most lanes a push-pull to one server goes over

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
	if w.timeline, err = w.tlf.open(fmt.Sprintf("worker %d", w.id.Rank), "steps", "allreduce (overlapping backward)"); err != nil {
		return err
	}
	defer closeTimeline(w.timeline, &err)
	if w.tf.mode == consistency.Ring {
		return w.runRing(ctx, stdout)
	}
	if err := w.sec.checkDial(strings.Split(w.servers, ",")); err != nil {
		return err
	}
	return w.runPS(ctx, stdin, stdout)
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
	if w.retryFor < 0 {
		return nil, fmt.Errorf("--retry-for %v: want >= 0 (0: never try a call again)", w.retryFor)
	}
	if w.connect <= 0 {
		return nil, fmt.Errorf("--connect-timeout %v: want > 0", w.connect)
	}
	if err := checkLanes(w.lanes); err != nil {
		return nil, err
	}
	if w.callTime <= 0 {
		return nil, fmt.Errorf("--call-timeout %v: want > 0 (every call has a deadline)", w.callTime)
	}
	for _, v := range []func() error{w.tf.validate, w.nf.validate, w.sf.validate, w.gf.validate, w.rf.validate, w.sec.load} {
		if err := v(); err != nil {
			return nil, err
		}
	}
	var err error
	if w.log, err = w.lf.logger(stderr); err != nil {
		return nil, err
	}
	w.sec.warnExposed(w.log)
	if w.id, err = w.ranks.identity(); err != nil {
		return nil, err
	}
	if w.threads < 1 {
		return nil, fmt.Errorf("--threads %d: want >= 1", w.threads)
	}
	if w.cpus != "" {
		// Before the data and the model: the threads started from
		// here on (OpenBLAS's among them) inherit the binding.
		// What it reports is its affinity read back, not the flag.
		cpus, err := cpubind.Parse(w.cpus)
		if err == nil {
			err = cpubind.Bind(cpus)
		}
		if err == nil {
			cpus, err = cpubind.Allowed()
		}
		if err != nil {
			return nil, fmt.Errorf("--cpus %s: %w", w.cpus, err)
		}
		w.boundTo = cpubind.Format(cpus)
	}
	if err := writableFile("--save", w.save); err != nil {
		return nil, err
	}
	if err := recordable(w.recordPushes, w.tf.mode); err != nil {
		return nil, err
	}
	if err := writableFile("--record-pushes", w.recordPushes); err != nil {
		return nil, err
	}
	if w.train, w.test, err = w.df.load(w.mf.seed); err != nil {
		return nil, err
	}
	if err := w.buildModel(stderr); err != nil {
		return nil, err
	}
	return w, nil
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

// runRing trains as one rank of a ring (runRing in ringworker.go), with
// the optimizer every rank runs itself.
func (w *workerRun) runRing(ctx context.Context, stdout io.Writer) error {
	ocfg, err := w.of.config()
	if err != nil {
		return err
	}
	if w.rf.scaleLR {
		ocfg = worker.ScaleLR(ocfg, w.id.WorldSize, w.train.Len(), w.tf.batch*w.tf.backwardPasses)
	}
	return runRing(ctx, ringRun{sec: w.sec.creds, id: w.id, model: w.model, seed: w.mf.seed, ocfg: ocfg, train: w.train, test: w.test, tf: w.tf, rf: w.rf,
		events: w.events, cpus: w.boundTo, save: w.save, timeout: w.callTime, stdout: stdout, nf: w.nf, sf: w.sf, gf: w.gf, log: w.log, eval: w.eval, mtf: w.mtf, stall: w.lf.stall, timeline: w.timeline})
}

// psStrategy is a parameter-server strategy and what it counts. The
// strategy goes to worker.New as it is, not inside psStrategy: the Worker
// finds what else a strategy can do (SetLastStep, its waits) by type
// assertion, which an embedding would hide.
type psStrategy struct {
	strategy  worker.Strategy
	staleness func() consistency.Staleness
	dropped   func() int64
	// pushes has the pushes recorded (--record-pushes; async and SSP).
	pushes func() []worker.PushRecord
}

// runPS trains against the parameter servers: it dials them, checks they
// serve this worker's model, mode and world, runs the steps, and reports.
// Under a launcher (--events), a "stop" line on stdin ends the run
// cleanly: the launcher sends it when rank 0 stopped at
// --stop-at-accuracy. SIGINT or SIGTERM ends it cleanly too: the worker
// leaves the run, rank 0 evaluates the weights so far, and it exits 0.
func (w *workerRun) runPS(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	nic, err := w.nf.nic()
	if err != nil {
		return err
	}
	defer nic.Close()
	ps, err := w.dial(ctx, nic)
	if err != nil {
		return err
	}
	defer ps.Close()
	leaveGossip, err := w.joinGossip(ctx, ps, stdout)
	if err != nil {
		return err
	}
	defer leaveGossip()
	// Where this worker begins: 0 in a new run; for a worker restarted
	// into a run under way, where the servers say.
	startStep, err := psclient.Join(ctx, ps, w.id.Rank, w.connect)
	if err != nil {
		return fmt.Errorf("worker %d: joining the servers: %w", w.id.Rank, err)
	}
	if startStep > 0 {
		w.log.Warn("joining a run under way", "component", "worker", "rank", w.id.Rank, "step", startStep)
	}
	wcfg, steps := w.workerConfig(startStep, nic, stdout)
	var stopMetrics func()
	w.metrics, stopMetrics, err = w.mtf.workerMetrics(&wcfg, w.id.Rank, metrics.WorkerSources{Bytes: steps.Counters}, w.log, stdout, w.events)
	if err != nil {
		return err
	}
	defer stopMetrics()
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	if w.events {
		ctl, err := launch.WatchControl(stdin, stopRun)
		if err != nil {
			return err
		}
		defer ctl.Close()
	}
	res, st, stoppedBy, err := w.runSteps(ctx, runCtx, ps, wcfg)
	if err != nil {
		return fmt.Errorf("worker %d of %d: %w", w.id.Rank, w.id.WorldSize, err)
	}
	// After a signal ctx is done: what is left (the final pull and the
	// evaluation) has a deadline of its own. A second signal ends the
	// process at once (main).
	ctx, cancelEnd := context.WithTimeout(context.WithoutCancel(ctx), w.callTime)
	defer cancelEnd()
	w.report(stdout, res, st, steps, stoppedBy)
	if err := w.writePushes(ps.Info(), wcfg, st); err != nil {
		return err
	}
	if w.events || !w.eval || w.id.Rank != 0 {
		return nil
	}
	return w.evaluate(ctx, ps, stdout)
}

// workerConfig is the worker's config from startStep, with its progress
// reports (a board, or with --events the launcher's events) and its step
// log, which counts the bytes through nic.
func (w *workerRun) workerConfig(startStep int64, nic *netshape.NIC, stdout io.Writer) (worker.Config, *launch.StepLog) {
	wcfg := worker.Config{Rank: w.id.Rank, WorldSize: w.id.WorldSize, Batch: w.tf.batch, Epochs: w.tf.epochs, Steps: w.tf.steps,
		StartStep: startStep, Seed: w.mf.seed, BackwardPasses: w.tf.backwardPasses, Progress: progressTo(stdout, w.events), ProgressEvery: max(w.tf.progressEvery, time.Nanosecond),
		Logger: w.log, Timeline: w.timeline}
	steps := &launch.StepLog{Counters: func() (int64, int64) { return nic.Sent(), nic.Received() }}
	w.sf.hooks(&wcfg, steps, w.id.Rank, w.model, w.test, stdout, nil)
	return wcfg, steps
}

// runSteps runs the steps under runCtx, watching for stalls. When runCtx
// ends first (the launcher's "stop" line, or a signal, which ends ctx
// too), the run so far is the result, and stoppedBy names what stopped it.
func (w *workerRun) runSteps(ctx, runCtx context.Context, ps *client.Client, cfg worker.Config) (res worker.Result, st psStrategy, stoppedBy string, err error) {
	stopStalls := watchStalls(&cfg, w.lf.stall, w.log, psStalls(ps))
	defer stopStalls()
	start := time.Now()
	res, st, err = w.trainPS(runCtx, ps, cfg)
	stopStalls()
	if err != nil && runCtx.Err() != nil {
		// Stopped by the launcher's "stop" line, or by SIGINT/SIGTERM
		// (docker stop, Kubernetes, Slurm at the time limit): the run so
		// far is the result. The step in flight is abandoned, as when a
		// worker dies; the servers see this worker leave.
		stoppedBy = "the launcher"
		if ctx.Err() != nil {
			stoppedBy = "a signal"
		}
		err, res.Stopped, res.Elapsed = nil, true, time.Since(start)
	}
	return res, st, stoppedBy, err
}

// report says how the run went: the launcher's "done" event (with the
// step log under --stats), or a line.
func (w *workerRun) report(stdout io.Writer, res worker.Result, st psStrategy, steps *launch.StepLog, stoppedBy string) {
	if w.events {
		ev := launch.Event{Event: launch.Done, Rank: w.id.Rank, Steps: res.Steps, Samples: int(res.Samples), Seconds: res.Elapsed.Seconds(),
			Staleness: st.staleness(), Dropped: st.dropped(), Stopped: res.Stopped, CPUs: w.boundTo, Lanes: w.usedLanes}
		if w.sf.stats {
			ev.Times = steps
		}
		launch.Emit(stdout, ev)
		return
	}
	stopped := ""
	if stoppedBy != "" {
		stopped = ", stopped early by " + stoppedBy
	}
	fmt.Fprintf(stdout, "worker %d of %d: %d steps, %d samples in %.1fs (%.0f samples/s)%s\n", w.id.Rank, w.id.WorldSize, res.Steps, res.Samples,
		res.Elapsed.Seconds(), float64(res.Samples)/res.Elapsed.Seconds(), stopped)
}

// evaluate pulls the final weights and prints their loss and accuracy on
// the test set.
func (w *workerRun) evaluate(ctx context.Context, ps *client.Client, stdout io.Writer) error {
	params := make([]float32, w.model.Layout().Size())
	if _, err := ps.Pull(ctx, params); err != nil {
		return fmt.Errorf("pulling the final weights: %w", err)
	}
	ev, err := worker.Evaluate(ctx, w.model, params, w.test, 1000)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "test: loss %.4f, accuracy %.2f%% (%d samples of %s)\n", ev.Loss, 100*ev.Accuracy, ev.Samples, w.test.Name())
	return nil
}

// trainPS runs the worker's steps against the servers, joining them
// again when they drop it (psclient.Rejoining), and returns the last
// strategy's counts.
func (w *workerRun) trainPS(ctx context.Context, ps *client.Client, cfg worker.Config) (worker.Result, psStrategy, error) {
	var st psStrategy
	r := psclient.Rejoining{Client: ps, JoinTimeout: w.connect, Logger: w.log, Strategy: func() (worker.Strategy, error) {
		var err error
		if st, err = w.strategy(ps); err != nil {
			return nil, err
		}
		if w.metrics != nil {
			w.metrics.SetSources(metrics.WorkerSources{Staleness: st.staleness, Dropped: st.dropped})
		}
		return st.strategy, nil
	}}
	res, err := r.TrainRejoining(ctx, cfg, w.model, w.train)
	return res, st, err
}

// joinGossip puts the worker into the job's gossip cluster, when gossip
// is on: the servers follow the workers' membership, so a worker only has
// to be seen, and seen leaving when it is done; it follows the shards' gRPC
// addresses (a shard restarted elsewhere). It returns what ends gossip.
func (w *workerRun) joinGossip(ctx context.Context, ps *client.Client, stdout io.Writer) (func(), error) {
	fp := fingerprint(w.model.Layout())
	m, err := w.gf.start(ctx, fmt.Sprintf("worker-%d", w.id.Rank), cluster.Meta{Role: cluster.RoleWorker, Rank: w.id.Rank,
		ModelFingerprint: fp, PlanVersion: uint64(shard.Version)}, w.log)
	if err != nil || m == nil {
		return func() {}, err
	}
	if w.events { // a shard the launcher restarts joins the gossip here too
		launch.Emit(stdout, launch.Event{Event: launch.Listening, Rank: w.id.Rank, Gossip: m.Addr()})
	}
	seen := make([]string, ps.Info().Plan.Servers)
	return cluster.Follow(m, w.log, 2*time.Second, func(views <-chan cluster.View) {
		for v := range views {
			cluster.LogChanges(v, w.log)
			cluster.FollowShards(v, fp, seen, ps, w.sec.creds.CheckDial, w.log)
		}
	}), nil
}

// dial connects to the servers through nic and checks that they hold this
// worker's model, in its mode, for its world size.
func (w *workerRun) dial(ctx context.Context, nic *netshape.NIC) (*client.Client, error) {
	enc, err := w.rf.pushEncoding()
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, w.connect)
	defer cancel()
	lanes := w.lanes
	switch {
	case w.tf.overlap:
		lanes = 1 // pushes and pulls go alone, one stream each: no push-pull to split
	case lanes == 0:
		lanes = autoLanes(runtime.NumCPU())
	}
	ps, err := client.Dial(dctx, strings.Split(w.servers, ","), client.WithCallTimeout(w.callTime), client.WithRetryFor(w.retryFor), client.WithPushEncoding(enc),
		client.WithLanes(lanes), client.WithDialOptions(append(w.sec.creds.DialOptions(), grpcDialer(nic))...))
	if err != nil {
		return nil, fmt.Errorf("connecting to the parameter servers (--servers %s): %w", w.servers, err)
	}
	info := ps.Info()
	err = checkLayout(w.model, info)
	switch {
	case err != nil:
	case info.Mode != w.tf.mode:
		err = fmt.Errorf("--mode %s: the servers run mode %s", w.tf.mode, info.Mode)
	case info.Mode != consistency.Async && info.Workers != w.id.WorldSize:
		err = fmt.Errorf("--world-size %d: the servers expect %d workers (start them with --workers %d)", w.id.WorldSize, info.Workers, w.id.WorldSize)
	}
	if err != nil {
		ps.Close()
		return nil, err
	}
	w.usedLanes = slices.Max(ps.Lanes())
	// Only lanes asked for by name are worth a warning; --lanes 0 asks
	// for up to autoLanes.
	switch lanes := w.usedLanes; {
	case w.id.Rank != 0:
	case w.tf.overlap && w.lanes > 1:
		w.log.Warn(fmt.Sprintf("--lanes %d: with --overlap-push-pull there is no push-pull to split; pushes and pulls go over one stream each", w.lanes))
	case lanes < w.lanes:
		w.log.Warn(fmt.Sprintf("--lanes %d: the servers' shares hold at most %d chunk(s) each, so a push-pull goes over %d lane(s) (a lane carries whole chunks; a smaller --chunk-bytes gives more)",
			w.lanes, lanes, lanes))
	}
	return ps, nil
}

// strategy is the worker's parameter-server strategy for its mode.
func (w *workerRun) strategy(ps *client.Client) (psStrategy, error) {
	shards := ps.Info().Plan.Servers
	if w.tf.mode == consistency.Sync {
		s := worker.NewSync(psclient.New(ps), int64(w.id.Rank), shards)
		return psStrategy{strategy: s, staleness: func() consistency.Staleness { return nil }, dropped: func() int64 { return s.Dropped },
			pushes: func() []worker.PushRecord { return nil }}, nil
	}
	a, err := worker.NewAsync(psclient.New(ps), w.model.Layout().Size(), shards,
		worker.AsyncConfig{WorkerID: int64(w.id.Rank), PushEvery: w.tf.pushEvery, FetchEvery: w.tf.fetchEvery, Overlap: w.tf.overlap, Record: w.recordPushes != ""})
	if err != nil {
		return psStrategy{}, err
	}
	return psStrategy{strategy: a, staleness: func() consistency.Staleness { return a.Staleness }, dropped: func() int64 { return 0 },
		pushes: func() []worker.PushRecord { return a.Pushes }}, nil
}

// checkLayout refuses servers that hold another model's parameters.
func checkLayout(model nn.Model, info client.Info) error {
	var l nn.Layout
	for _, t := range info.Tensors {
		l.Tensors = append(l.Tensors, nn.Tensor{Name: t.Name, Shape: t.Shape, Offset: t.Offset})
	}
	if !l.Equal(model.Layout()) {
		return fmt.Errorf("the servers hold a model with layout %v, this worker's %s has %v: start both with the same --model and --hidden", l, describeModel(model), model.Layout())
	}
	return nil
}
