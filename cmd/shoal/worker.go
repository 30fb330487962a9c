package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/nn"
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
}

func (t *trainFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.modeName, "mode", consistency.Async.String(), "how workers agree: async (Downpour SGD), sync, ssp (bounded staleness) through parameter servers, or ring (allreduce, no server)")
	fs.IntVar(&t.backwardPasses, "backward-passes-per-step", 1, "average the gradients of N batches into each step")
	fs.IntVar(&t.batch, "batch", 64, "batch size per worker")
	fs.IntVar(&t.epochs, "epochs", 3, "epochs to train")
	fs.Int64Var(&t.steps, "steps", 0, "training steps per worker (overrides --epochs when > 0)")
	fs.IntVar(&t.pushEvery, "push-every", 1, "async: push gradients every N steps (Downpour's n_push)")
	fs.IntVar(&t.fetchEvery, "fetch-every", 1, "async: pull weights every N steps (Downpour's n_fetch)")
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
	if t.overlap && (t.mode != consistency.Async || t.pushEvery != 1 || t.fetchEvery != 1) {
		return fmt.Errorf("--overlap-push-pull: only for --mode async with --push-every 1 and --fetch-every 1 (have --mode %s, %d, %d)", t.mode, t.pushEvery, t.fetchEvery)
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
		"--overlap-push-pull=" + fmt.Sprint(t.overlap)}
}

func runWorker(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("worker", "Runs one training worker: it pulls weights from the parameter servers, computes\ngradients on its shard of the data and pushes them back. Its rank and the world\nsize come from --rank/--world-size, else SHOAL_RANK/SHOAL_WORLD_SIZE, Open MPI,\nSlurm or torchrun environment variables.", stderr)
	var (
		mf       modelFlags
		df       dataFlags
		tf       trainFlags
		lf       logFlags
		of       optFlags
		rf       ringFlags
		save     = fs.String("save", "", "ring: rank 0 writes the final parameters to this .safetensors file")
		threads  = fs.Int("threads", runtime.NumCPU(), "GEMM threads of this worker (shoal train gives each of its workers its share of the cores)")
		servers  = fs.String("servers", "localhost:7070", "parameter server addresses, comma-separated, in shard order")
		rank     = fs.Int("rank", -1, "this worker's rank (default: from the launcher's environment, else 0)")
		world    = fs.Int("world-size", -1, "number of workers (default: from the launcher's environment, else 1)")
		events   = fs.Bool("events", false, "write JSON events on stdout for a launcher")
		eval     = fs.Bool("eval", true, "evaluate the final weights on the test set (rank 0; in ring mode every rank its share)")
		connect  = fs.Duration("connect-timeout", 60*time.Second, "how long to wait for the servers to answer")
		callTime = fs.Duration("call-timeout", 60*time.Second, "deadline of each pull and push, or each collective call (ring)")
		nf       nicFlags
		sf       statFlags
	)
	nf.register(fs)
	sf.register(fs)
	mf.register(fs)
	df.register(fs)
	tf.register(fs)
	of.register(fs, "none")
	rf.register(fs)
	lf.register(fs, "warn")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := tf.validate(); err != nil {
		return err
	}
	if err := nf.validate(); err != nil {
		return err
	}
	if err := sf.validate(); err != nil {
		return err
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return err
	}
	id, err := cluster.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	if *rank >= 0 {
		id.Rank, id.Source = *rank, "flags"
	}
	if *world >= 0 {
		id.WorldSize, id.Source = *world, "flags"
	}
	if err := id.Validate(); err != nil {
		return fmt.Errorf("--rank/--world-size: %w", err)
	}
	if *threads < 1 {
		return fmt.Errorf("--threads %d: want >= 1", *threads)
	}
	model, backend, err := mf.buildFast(*threads)
	if err != nil {
		return err
	}
	log.Info("compute backend", "component", "worker", "backend", backend)
	train, test, err := df.load(mf.seed)
	if err != nil {
		return err
	}
	if tf.mode == consistency.Ring {
		ocfg, err := of.config()
		if err != nil {
			return err
		}
		if rf.scaleLR {
			// Goyal et al.: lr × N, warmed up over the first epoch.
			ocfg.LR *= float64(id.WorldSize)
			if ocfg.Schedule.WarmupSteps == 0 {
				perRank := (train.Len() + id.WorldSize - 1) / id.WorldSize
				ocfg.Schedule.WarmupSteps = int64((perRank + tf.batch*tf.backwardPasses - 1) / (tf.batch * tf.backwardPasses))
			}
			if ocfg.Schedule.MinLR > ocfg.LR {
				ocfg.Schedule.MinLR = ocfg.LR
			}
		}
		return runRing(ctx, ringRun{id: id, model: model, seed: mf.seed, ocfg: ocfg, train: train, test: test, tf: tf, rf: rf,
			events: *events, save: *save, timeout: *callTime, stdout: stdout, nf: nf, sf: sf, eval: *eval})
	}

	enc, err := rf.pushEncoding()
	if err != nil {
		return err
	}
	nic, err := nf.nic()
	if err != nil {
		return err
	}
	defer nic.Close()
	dctx, cancel := context.WithTimeout(ctx, *connect)
	ps, err := client.Dial(dctx, strings.Split(*servers, ","), client.WithCallTimeout(*callTime), client.WithPushEncoding(enc),
		client.WithDialOptions(grpcDialer(nic)))
	cancel()
	if err != nil {
		return fmt.Errorf("connecting to the parameter servers (--servers %s): %w", *servers, err)
	}
	defer ps.Close()
	if err := checkLayout(model, ps.Info()); err != nil {
		return err
	}
	info := ps.Info()
	if info.Mode != tf.mode {
		return fmt.Errorf("--mode %s: the servers run mode %s", tf.mode, info.Mode)
	}
	if info.Mode != consistency.Async && info.Workers != id.WorldSize {
		return fmt.Errorf("--world-size %d: the servers expect %d workers (start them with --workers %d)", id.WorldSize, info.Workers, id.WorldSize)
	}
	var strategy worker.Strategy
	staleness := func() consistency.Staleness { return nil }
	dropped := func() int64 { return 0 }
	if tf.mode == consistency.Sync {
		s := worker.NewSync(psclient.New(ps), int64(id.Rank), info.Plan.Servers)
		strategy, dropped = s, func() int64 { return s.Dropped }
	} else {
		a, err := worker.NewAsync(psclient.New(ps), model.Layout().Size(), info.Plan.Servers, worker.AsyncConfig{WorkerID: int64(id.Rank), PushEvery: tf.pushEvery, FetchEvery: tf.fetchEvery, Overlap: tf.overlap})
		if err != nil {
			return err
		}
		strategy, staleness = a, func() consistency.Staleness { return a.Staleness }
	}
	board := newBoard(stdout, 1, isTerminal(stdout))
	progress := board.update
	if *events {
		progress = func(p worker.Progress) { launch.Emit(stdout, launch.ProgressEvent(p)) }
	}
	wcfg := worker.Config{
		Rank: id.Rank, WorldSize: id.WorldSize, Batch: tf.batch, Epochs: tf.epochs, Steps: tf.steps,
		Seed: mf.seed, BackwardPasses: tf.backwardPasses, Progress: progress, Logger: log,
	}
	steps := launch.StepLog{Counters: func() (int64, int64) { return nic.Sent(), nic.Received() }}
	sf.hooks(&wcfg, &steps, id.Rank, model, test, stdout, nil)
	w, err := worker.New(wcfg, model, train, strategy)
	if err != nil {
		return err
	}
	defer w.Close()
	// Under a launcher, a "stop" line on stdin ends the run cleanly: the
	// launcher sends it when rank 0 stopped at --stop-at-accuracy.
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	if *events {
		ctl, err := launch.WatchControl(stdin, stopRun)
		if err != nil {
			return err
		}
		defer ctl.Close()
	}
	start := time.Now()
	res, err := w.Run(runCtx)
	if err != nil && runCtx.Err() != nil && ctx.Err() == nil {
		// Stopped by the launcher: the run so far is the result.
		err, res.Stopped, res.Elapsed = nil, true, time.Since(start)
	}
	if err != nil {
		return fmt.Errorf("worker %d of %d: %w", id.Rank, id.WorldSize, err)
	}
	if *events {
		ev := launch.Event{Event: "done", Rank: id.Rank, Steps: res.Steps, Samples: int(res.Samples), Seconds: res.Elapsed.Seconds(), Staleness: staleness(), Dropped: dropped(),
			Stopped: res.Stopped}
		if sf.stats {
			ev.Times = &steps
		}
		launch.Emit(stdout, ev)
		return nil
	}
	fmt.Fprintf(stdout, "worker %d of %d: %d steps, %d samples in %.1fs (%.0f samples/s)\n", id.Rank, id.WorldSize, res.Steps, res.Samples, res.Elapsed.Seconds(), float64(res.Samples)/res.Elapsed.Seconds())
	if *eval && id.Rank == 0 {
		params := w.Params()
		if _, err := ps.Pull(ctx, params); err != nil {
			return fmt.Errorf("pulling the final weights: %w", err)
		}
		ev, err := worker.Evaluate(ctx, model, params, test, 1000)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "test: loss %.4f, accuracy %.2f%% (%d samples of %s)\n", ev.Loss, 100*ev.Accuracy, ev.Samples, test.Name())
	}
	return nil
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
