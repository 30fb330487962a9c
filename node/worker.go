package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/internal/netshape"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/worker"
	"github.com/shoalml/shoal/worker/psclient"
)

// RunWorker runs one worker process to the end of its run: through the
// parameter servers (PS), or as a rank of a ring (Loop.Mode ring). Under
// a launcher (Events), a "stop" line on stdin ends a PS worker's run
// cleanly; ctx ending (a signal) ends it cleanly too: the worker leaves
// the run, rank 0 evaluates the weights so far, and RunWorker returns
// nil. It owns every goroutine it starts and waits for them.
func RunWorker(ctx context.Context, cfg WorkerConfig, stdin io.Reader, out io.Writer) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Loop.Mode == consistency.Ring {
		return runRing(ctx, ringRun{WorkerConfig: &cfg, out: out})
	}
	w := &psWorker{WorkerConfig: &cfg, out: out}
	return w.run(ctx, stdin)
}

// psWorker is a worker of the parameter-server modes.
type psWorker struct {
	*WorkerConfig
	out io.Writer
	// metrics, with MetricsAddr, takes the strategy's counters.
	metrics   *metrics.Worker
	usedLanes int // the most lanes a push-pull to one server goes over
	// inner is the optimizer of the local steps (Loop.LocalSteps), made
	// once: its state outlives a rejoin.
	inner *optim.Optimizer
	// group is the worker's host group (PSConfig.Host); nil without.
	group *hostGroup
}

// psStrategy is a parameter-server strategy and what it counts. The
// strategy goes to worker.New as it is, not inside psStrategy: the Worker
// finds what else a strategy can do (SetLastStep, its waits) by type
// assertion, which an embedding would hide.
type psStrategy struct {
	strategy  worker.Strategy
	staleness func() consistency.Staleness
	dropped   func() int64
	// pushes has the pushes recorded (RecordPushes; async and SSP).
	pushes func() []worker.PushRecord
	// frags carries the fragment exchanges' spans (Loop.Fragments); nil
	// without.
	frags *worker.FragmentServers
}

// run trains against the parameter servers: it dials them, checks they
// serve this worker's model, mode and world, runs the steps, and reports.
func (w *psWorker) run(ctx context.Context, stdin io.Reader) error {
	nic, err := newNIC(w.NIC)
	if err != nil {
		return err
	}
	defer nic.Close()
	servers, err := w.dial(ctx, nic)
	if err != nil {
		return err
	}
	defer servers.Close()
	if w.group, err = w.joinHost(ctx); err != nil {
		return err
	}
	if w.group != nil {
		defer w.group.close()
	}
	leaveGossip, err := w.joinGossip(ctx, servers)
	if err != nil {
		return err
	}
	defer leaveGossip()
	return w.train(ctx, stdin, servers, nic)
}

// train joins the servers' run, trains, reports, records and evaluates.
func (w *psWorker) train(ctx context.Context, stdin io.Reader, servers *client.Client, nic *netshape.NIC) error {
	// Where this worker begins: 0 in a new run; for a worker restarted
	// into a run under way, where the servers say.
	startStep, err := w.join(ctx, servers)
	if err != nil {
		return err
	}
	startStep *= w.stepsPerClock() // the shards count outer steps
	if startStep > 0 {
		w.Logger.Warn("joining a run under way", "component", "worker", "rank", w.ID.Rank, "step", startStep)
	}
	wcfg, steps := w.workerConfig(startStep, nic)
	var stopMetrics func()
	w.metrics, stopMetrics, err = workerMetrics(w.MetricsAddr, &wcfg, w.ID.Rank, metrics.WorkerSources{Bytes: steps.Counters}, w.Logger, w.out, w.Events)
	if err != nil {
		return err
	}
	defer stopMetrics()
	res, st, stoppedBy, err := w.runUntilStopped(ctx, stdin, servers, wcfg)
	if err != nil {
		return fmt.Errorf("worker %d of %d: %w", w.ID.Rank, w.ID.WorldSize, err)
	}
	// After a signal ctx is done: what is left (the final pull and the
	// evaluation) has a deadline of its own, a short one after a signal:
	// the shards may have been signalled too (a plain scancel signals every
	// step) and be stopping, and the launcher kills what is still running
	// soon after (Slurm's KillWait, 30 s by default; docker stop, 10 s).
	endWait := w.CallTimeout
	if stoppedBy == "a signal" {
		endWait = min(endWait, finalPullAfterSignal)
	}
	ctx, cancelEnd := context.WithTimeout(context.WithoutCancel(ctx), endWait)
	defer cancelEnd()
	w.report(res, st, steps, stoppedBy)
	if err := w.writePushes(servers.Info(), wcfg, st); err != nil {
		return err
	}
	if w.Events || !w.Eval || w.ID.Rank != 0 {
		return nil
	}
	if err := w.evaluate(ctx, servers, st.strategy); err != nil {
		if stoppedBy != "" {
			fmt.Fprintf(w.out, "test: not evaluated: stopped early by %s, and %v\n", stoppedBy, err)
		}
		return err
	}
	return nil
}

// join joins the servers' run: as itself, or as its host when it leads
// a host group (whose other workers do not talk to the servers). It
// returns the step to begin at.
func (w *psWorker) join(ctx context.Context, servers *client.Client) (int64, error) {
	if !w.group.leader() {
		return 0, nil
	}
	id := w.serversID()
	startStep, err := psclient.Join(ctx, servers, id, w.Loop.PushEvery, w.PS.Connect)
	if err != nil {
		return 0, fmt.Errorf("worker %d: joining the servers: %w", w.ID.Rank, err)
	}
	if startStep > 0 && w.group != nil {
		// The group's other workers would begin at 0: their collectives
		// would not match the leader's steps.
		return 0, fmt.Errorf("worker %d: the servers' run is under way (at step %d), and host %d's group cannot join one: restart the job", w.ID.Rank, startStep, id)
	}
	return startStep, nil
}

// serversID is the worker id the servers know this worker by: its rank,
// or its host with a host group.
func (w *psWorker) serversID() int {
	if w.group != nil {
		return int(w.group.host)
	}
	return w.ID.Rank
}

// finalPullAfterSignal bounds rank 0's final pull and evaluation once a
// signal has stopped the run.
const finalPullAfterSignal = 8 * time.Second

// runUntilStopped runs the steps until the end, ctx's, or (Events) the
// launcher's "stop" line on stdin.
func (w *psWorker) runUntilStopped(ctx context.Context, stdin io.Reader, servers *client.Client, wcfg worker.Config) (worker.Result, psStrategy, string, error) {
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	if w.Events {
		ctl, err := launch.WatchControl(stdin, stopRun)
		if err != nil {
			return worker.Result{}, psStrategy{}, "", err
		}
		defer ctl.Close()
	}
	return w.runSteps(ctx, runCtx, servers, wcfg)
}

// workerConfig is the worker's config from startStep, with its progress
// reports and its step log, which counts the bytes through nic.
func (w *psWorker) workerConfig(startStep int64, nic *netshape.NIC) (worker.Config, *launch.StepLog) {
	l := w.Loop
	wcfg := worker.Config{Rank: w.ID.Rank, WorldSize: w.ID.WorldSize, Batch: l.Batch, Epochs: l.Epochs, Steps: l.Steps,
		StartStep: startStep, Seed: w.Seed, BackwardPasses: l.BackwardPasses, Progress: w.Progress, ProgressEvery: max(l.ProgressEvery, time.Nanosecond),
		Logger: w.Logger, Timeline: w.Timeline}
	steps := &launch.StepLog{Counters: func() (int64, int64) { return nic.Sent(), nic.Received() }}
	w.Stats.hooks(&wcfg, steps, w.ID.Rank, w.Model, w.Test, w.out, nil)
	return wcfg, steps
}

// runSteps runs the steps under runCtx, watching for stalls. When runCtx
// ends first (the launcher's "stop" line, or a signal, which ends ctx
// too), the run so far is the result, and stoppedBy names what stopped it.
func (w *psWorker) runSteps(ctx, runCtx context.Context, servers *client.Client, cfg worker.Config) (res worker.Result, st psStrategy, stoppedBy string, err error) {
	stopStalls := watchStalls(&cfg, w.Stall, w.Logger, psStalls(servers))
	defer stopStalls()
	start := time.Now()
	res, st, err = w.trainRejoining(runCtx, servers, cfg)
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

// trainRejoining runs the worker's steps against the servers, joining
// them again when they drop it (psclient.Rejoining), and returns the last
// strategy's counts.
func (w *psWorker) trainRejoining(ctx context.Context, servers *client.Client, cfg worker.Config) (worker.Result, psStrategy, error) {
	var st psStrategy
	if w.group != nil {
		// A host group does not rejoin: its workers would have to agree
		// on where, and a dropped leader's host is better restarted.
		return w.trainOnce(ctx, servers, cfg)
	}
	r := psclient.Rejoining{Client: servers, JoinTimeout: w.PS.Connect, PushEvery: w.Loop.PushEvery, Logger: w.Logger, StepsPerClock: w.stepsPerClock(), Strategy: func() (worker.Strategy, error) {
		var err error
		if st, err = w.strategy(servers); err != nil {
			return nil, err
		}
		if w.metrics != nil {
			w.metrics.SetSources(metrics.WorkerSources{Staleness: st.staleness, Dropped: st.dropped})
		}
		return st.strategy, nil
	}}
	res, err := r.TrainRejoining(ctx, cfg, w.Model, w.Train)
	return res, st, err
}

// trainOnce runs the worker's steps once, without rejoining.
func (w *psWorker) trainOnce(ctx context.Context, servers *client.Client, cfg worker.Config) (worker.Result, psStrategy, error) {
	st, err := w.strategy(servers)
	if err != nil {
		return worker.Result{}, st, err
	}
	if w.metrics != nil {
		w.metrics.SetSources(metrics.WorkerSources{Staleness: st.staleness, Dropped: st.dropped})
	}
	wk, err := worker.New(cfg, w.Model, w.Train, st.strategy)
	if err != nil {
		return worker.Result{}, st, err
	}
	defer wk.Close()
	res, err := wk.Run(ctx)
	return res, st, err
}

// report says how the run went: the launcher's "done" event (with the
// step log under Stats.Times), or a line.
func (w *psWorker) report(res worker.Result, st psStrategy, steps *launch.StepLog, stoppedBy string) {
	if w.Events {
		ev := launch.Event{Event: launch.Done, Rank: w.ID.Rank, Steps: res.Steps, Samples: int(res.Samples), Seconds: res.Elapsed.Seconds(),
			Staleness: st.staleness(), Dropped: st.dropped(), Stopped: res.Stopped, CPUs: w.CPUs, Lanes: w.usedLanes}
		if w.Stats.Times {
			ev.Times = steps
		}
		launch.Emit(w.out, ev)
		return
	}
	stopped := ""
	if stoppedBy != "" {
		stopped = ", stopped early by " + stoppedBy
	}
	fmt.Fprintf(w.out, "worker %d of %d: %d steps, %d samples in %.1fs (%.0f samples/s)%s\n", w.ID.Rank, w.ID.WorldSize, res.Steps, res.Samples,
		res.Elapsed.Seconds(), float64(res.Samples)/res.Elapsed.Seconds(), stopped)
}

// evaluate pulls the final weights and prints their loss and accuracy on
// the test set, and which weights they were. Where the strategy knows the
// pull of the run's final weights (sync, also with local steps: the last
// step applied on every shard, waiting for the other workers' last pushes
// within the call's deadline) it reads those; otherwise (async, SSP, a run
// stopped early) the shards' weights as they are when this worker
// finished, which other workers may still be changing, and the line says
// so with the shards' clocks.
func (w *psWorker) evaluate(ctx context.Context, servers *client.Client, strategy worker.Strategy) error {
	params := make([]float32, w.Model.Layout().Size())
	args, final := worker.PullArgs{WorkerID: -1}, false
	if fp, ok := strategy.(worker.FinalPuller); ok {
		args, final = fp.FinalPull()
		if !final {
			args = worker.PullArgs{WorkerID: -1}
		}
	}
	clocks, err := servers.PullFor(ctx, args, params)
	if err != nil {
		what := "pulling the final weights"
		if final {
			what = fmt.Sprintf("pulling the weights of the run's last step (waiting for the shards to reach clocks %v)", args.Steps)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	ev, err := worker.Evaluate(ctx, w.Model, params, w.Test, 1000)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("the run's final weights, shards at clock %s", clockList(clocks))
	if !final {
		what = fmt.Sprintf("the shards' weights when rank 0 finished, at clock %s; other workers may still have been pushing", clockList(clocks))
	}
	fmt.Fprintf(w.out, "test: loss %.4f, accuracy %.2f%% (%d samples of %s; %s)\n", ev.Loss, 100*ev.Accuracy, ev.Samples, w.Test.Name(), what)
	return nil
}

// clockList is clocks as "7" when every shard is at 7, else "[7 6]".
func clockList(clocks []int64) string {
	if len(clocks) > 0 && slices.Min(clocks) == slices.Max(clocks) {
		return strconv.FormatInt(clocks[0], 10)
	}
	return fmt.Sprint(clocks)
}

// joinGossip puts the worker into the job's gossip cluster, when gossip
// is on: the servers follow the workers' membership, so a worker only has
// to be seen, and seen leaving when it is done; it follows the shards'
// gRPC addresses (a shard restarted elsewhere). It returns what ends
// gossip.
func (w *psWorker) joinGossip(ctx context.Context, servers *client.Client) (func(), error) {
	if w.Gossip == nil || !w.group.leader() {
		// A host group's other workers are not the servers' workers:
		// the leader is seen for the host.
		return func() {}, nil
	}
	fp := fingerprint(w.Model.Layout())
	m, err := w.Gossip(ctx, fmt.Sprintf("worker-%d", w.serversID()), cluster.Meta{Role: cluster.RoleWorker, Rank: w.serversID(),
		ModelFingerprint: fp, PlanVersion: uint64(shard.Version)}, w.Logger)
	if err != nil || m == nil {
		return func() {}, err
	}
	if w.Events { // a shard the launcher restarts joins the gossip here too
		launch.Emit(w.out, launch.Event{Event: launch.Listening, Rank: w.ID.Rank, Gossip: m.Addr()})
	}
	seen := make([]string, servers.Info().Plan.Servers)
	return cluster.Follow(m, w.Logger, 2*time.Second, func(views <-chan cluster.View) {
		for v := range views {
			cluster.LogChanges(v, w.Logger)
			cluster.FollowShards(v, fp, seen, servers, w.Creds.CheckDial, w.Logger)
		}
	}), nil
}

// dial connects to the servers through nic and checks that they hold this
// worker's model, in its mode, for its world size.
func (w *psWorker) dial(ctx context.Context, nic *netshape.NIC) (*client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, w.PS.Connect)
	defer cancel()
	lanes := w.PS.Lanes
	switch {
	case w.Loop.Overlap:
		lanes = 1 // pushes and pulls go alone, one stream each: no push-pull to split
	case lanes == 0:
		lanes = w.PS.AutoLanes
	}
	servers, err := client.Dial(dctx, w.PS.Servers, client.WithCallTimeout(w.CallTimeout), client.WithRetryFor(w.PS.RetryFor), client.WithPushEncoding(w.PS.Encoding),
		client.WithLanes(lanes), client.WithDialOptions(append(w.Creds.DialOptions(), grpcDialer(nic))...),
		client.WithConnectNotice(2*time.Second, func(addr string, err error) {
			w.Logger.Warn("a parameter server is not reachable yet; trying until --connect-timeout", "component", "worker", "rank", w.ID.Rank, "addr", addr, "error", err, "connect_timeout", w.PS.Connect)
		}))
	if err != nil {
		return nil, fmt.Errorf("connecting to the parameter servers (--servers %s): %w", strings.Join(w.PS.Servers, ","), err)
	}
	if err := w.check(servers.Info()); err != nil {
		servers.Close()
		return nil, err
	}
	w.usedLanes = slices.Max(servers.Lanes())
	w.warnLanes()
	return servers, nil
}

// check refuses servers that hold another model, run another mode or
// expect another world size; a worker not told its mode takes theirs.
func (w *psWorker) check(info client.Info) error {
	if err := checkLayout(w.Model, w.ModelName, info); err != nil {
		return err
	}
	if info.Mode != w.Loop.Mode && w.Loop.TakeServersMode {
		if err := w.takeMode(info.Mode); err != nil {
			return err
		}
	}
	switch {
	case info.Mode != w.Loop.Mode:
		return fmt.Errorf("--mode %s: the servers run mode %s", w.Loop.Mode, info.Mode)
	case info.Mode != consistency.Async && w.PS.Host.PerHost > 0 && info.Workers != w.PS.Host.hosts(w.ID.WorldSize):
		hosts := w.PS.Host.hosts(w.ID.WorldSize)
		return fmt.Errorf("--world-size %d, --workers-per-host %d: the servers expect %d workers, and with --host-aggregate they count hosts (start them with --workers %d)", w.ID.WorldSize, w.PS.Host.PerHost, info.Workers, hosts)
	case info.Mode != consistency.Async && w.PS.Host.PerHost == 0 && info.Workers != w.ID.WorldSize:
		return fmt.Errorf("--world-size %d: the servers expect %d workers (start them with --workers %d)", w.ID.WorldSize, info.Workers, w.ID.WorldSize)
	case info.LocalSteps != w.Loop.LocalSteps:
		// A gradient through an outer optimizer, or a pseudo-gradient
		// through a gradient's, trains on silently wrong.
		return fmt.Errorf("--local-steps %d: the servers apply pushes of %d local steps (0: gradients); start both with the same --local-steps", w.Loop.LocalSteps, info.LocalSteps)
	case max(info.Fragments, 1) != max(w.Loop.Fragments, 1):
		// Their clocks would count other exchanges than the worker's.
		return fmt.Errorf("--fragments %d: the servers synchronise %d fragment(s) (0 or 1: the whole vector); start both with the same --fragments", w.Loop.Fragments, max(info.Fragments, 1))
	}
	return nil
}

// takeMode makes the servers' mode m the worker's, which was not given
// one, and says so; a loop that m cannot run (pushes or pulls thinned
// out, or overlapped, outside async; pushes recorded in sync) is refused.
func (w *psWorker) takeMode(m consistency.Mode) error {
	l := &w.Loop
	if m != consistency.Async && (l.PushEvery != 1 || l.FetchEvery != 1 || l.Overlap) {
		return fmt.Errorf("the servers run mode %s, which pulls and pushes every step: --push-every %d, --fetch-every %d and --overlap-push-pull are for --mode async (leave them out, or start the servers with --mode async)",
			m, l.PushEvery, l.FetchEvery)
	}
	if m == consistency.Sync && w.PS.RecordPushes != "" {
		return errors.New("--record-pushes: the servers run mode sync, and only async and ssp runs are recorded")
	}
	w.Logger.Warn("no --mode given: taking the servers' mode", "component", "worker", "rank", w.ID.Rank, "mode", m)
	l.Mode, l.TakeServersMode = m, false
	return nil
}

// warnLanes warns, on rank 0, of lanes asked for by name that go unused;
// 0 asks for up to AutoLanes.
func (w *psWorker) warnLanes() {
	switch asked, lanes := w.PS.Lanes, w.usedLanes; {
	case w.ID.Rank != 0:
	case w.Loop.Overlap && asked > 1:
		w.Logger.Warn(fmt.Sprintf("--lanes %d: with --overlap-push-pull there is no push-pull to split; pushes and pulls go over one stream each", asked))
	case lanes < asked:
		w.Logger.Warn(fmt.Sprintf("--lanes %d: the servers' shares hold at most %d chunk(s) each, so a push-pull goes over %d lane(s) (a lane carries whole chunks; a smaller --chunk-bytes gives more)",
			asked, lanes, lanes))
	}
}

// stepsPerClock is how many of the worker's steps one step of the
// shards' clock is: Loop.LocalSteps (divided by Loop.Fragments, one
// exchange a clock step), or 1.
func (w *psWorker) stepsPerClock() int64 {
	return int64(max(w.Loop.LocalSteps/max(w.Loop.Fragments, 1), 1))
}

// strategy is the worker's parameter-server strategy for its mode, with
// Loop.LocalSteps wrapped in worker.Local.
func (w *psWorker) strategy(servers *client.Client) (psStrategy, error) {
	st, err := w.modeStrategy(servers)
	if err != nil || w.Loop.LocalSteps == 0 {
		return st, err
	}
	if w.inner == nil {
		if w.inner, err = optim.New(w.PS.Inner, w.Model.Layout().Size()); err != nil {
			return psStrategy{}, fmt.Errorf("the local steps' optimizer: %w", err)
		}
	}
	if w.Loop.Fragments > 0 {
		cfg := worker.StreamConfig{LocalSteps: w.Loop.LocalSteps, Fragments: w.Loop.Fragments, Overlap: w.Loop.FragmentOverlap, Mix: w.Loop.FragmentMix}
		if st.strategy, err = worker.NewStreaming(st.strategy, st.frags, w.inner, servers.Info().Plan, cfg); err != nil {
			return psStrategy{}, fmt.Errorf("--fragments %d: %w", w.Loop.Fragments, err)
		}
		return st, nil
	}
	if st.strategy, err = worker.NewLocal(st.strategy, w.inner, w.Loop.LocalSteps); err != nil {
		return psStrategy{}, err
	}
	return st, nil
}

// modeStrategy is the worker's parameter-server strategy for its mode.
func (w *psWorker) modeStrategy(servers *client.Client) (psStrategy, error) {
	shards := servers.Info().Plan.Servers
	ps, err := w.group.servers(psclient.New(servers), shards)
	if err != nil {
		return psStrategy{}, err
	}
	var frags *worker.FragmentServers
	if w.Loop.Fragments > 0 {
		frags = worker.NewFragmentServers(ps)
		ps = frags
	}
	if w.Loop.Mode == consistency.Sync {
		s := worker.NewSync(ps, int64(w.ID.Rank), shards)
		return psStrategy{strategy: s, staleness: func() consistency.Staleness { return nil }, dropped: func() int64 { return s.Dropped },
			pushes: func() []worker.PushRecord { return nil }, frags: frags}, nil
	}
	a, err := worker.NewAsync(ps, w.Model.Layout().Size(), shards,
		worker.AsyncConfig{WorkerID: int64(w.ID.Rank), PushEvery: w.Loop.PushEvery, FetchEvery: w.Loop.FetchEvery, Overlap: w.Loop.Overlap, Record: w.PS.RecordPushes != ""})
	if err != nil {
		return psStrategy{}, err
	}
	return psStrategy{strategy: a, staleness: func() consistency.Staleness { return a.Staleness }, dropped: func() int64 { return 0 },
		pushes: func() []worker.PushRecord { return a.Pushes }, frags: frags}, nil
}

// checkLayout refuses servers that hold another model's parameters; name
// describes model.
func checkLayout(model nn.Model, name string, info client.Info) error {
	var l nn.Layout
	for _, t := range info.Tensors {
		l.Tensors = append(l.Tensors, nn.Tensor{Name: t.Name, Shape: t.Shape, Offset: t.Offset})
	}
	if !l.Equal(model.Layout()) {
		return fmt.Errorf("the servers hold a model with layout %v, this worker's %s has %v: start both with the same --model and --hidden", l, name, model.Layout())
	}
	return nil
}
