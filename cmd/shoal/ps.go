package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/internal/lockedio"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/rpc"
	"github.com/shoalml/shoal/secure"
	"github.com/shoalml/shoal/shard"
)

// psRun is one `shoal ps`: the shard's config and how to serve it.
type psRun struct {
	cfg     ps.Config
	initial []float32
	model   string // described
	listen  string
	events  bool
	drain   time.Duration
	// idle bounds how long a stream may leave the shard waiting on its
	// client (rpc.StreamIdleTimeout).
	idle time.Duration
	// insecure: serving beyond loopback without TLS or authentication
	// is meant; no warning.
	insecure bool
	nf       nicFlags
	gf       gossipFlags
	// exitWhenDone: stop once every worker has left the gossip
	// gracefully (a cluster whose servers should end with the run);
	// exitWait: how long to wait then for workers that never joined.
	exitWhenDone bool
	exitWait     time.Duration
	sec          secFlags
	limits       rpc.Limits
	mtf          metricsFlags
	tlf          timelineFlags
}

func runPS(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	p, err := parsePS(args, stderr)
	if err != nil {
		return err
	}
	rows := []string{"optimizer"}
	for w := range min(p.cfg.Workers, 256) {
		rows = append(rows, fmt.Sprintf("worker %d's calls", w))
	}
	if p.cfg.Timeline, err = p.tlf.open(fmt.Sprintf("ps %d", p.cfg.Shard), rows...); err != nil {
		return err
	}
	defer closeTimeline(p.cfg.Timeline, &err)
	log, idx := p.cfg.Logger, p.cfg.Shard
	var psm *metrics.PS
	var grpcm *metrics.GRPC
	ep, err := p.mtf.serve("ps", idx, func(reg prometheus.Registerer) { psm, grpcm = metrics.NewPS(reg, idx), metrics.NewGRPC(reg) }, log, stdout, p.events)
	if err != nil {
		return err
	}
	defer ep.close()
	if psm != nil {
		p.cfg.OnWait = psm.ObserveWait
	}
	core, err := ps.New(p.cfg, p.initial)
	if err != nil {
		return err
	}
	lis, closeNIC, err := p.openListener()
	if err != nil {
		return err
	}
	defer closeNIC()
	srv := p.newServer(core, lis, psm, grpcm)
	ctx, endRun := context.WithCancel(ctx)
	defer endRun()
	gossip, stdout, leaveGossip, err := p.joinGossip(ctx, core, srv.addr, stdout, endRun)
	if err != nil {
		srv.lis.Close()
		return err
	}
	defer leaveGossip()
	p.announce(core, srv, gossip, stdout)
	return p.serve(ctx, endRun, core, srv)
}

// openListener listens on --listen, through the modelled NIC when there
// is one, where the security flags allow serving. The func it returns
// closes the NIC.
func (p *psRun) openListener() (net.Listener, func(), error) {
	lis, err := net.Listen("tcp", p.listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--listen %s: %w", p.listen, err)
	}
	closeNIC := func() {}
	if p.nf.shaped() {
		nic, err := p.nf.nic()
		if err != nil {
			lis.Close()
			return nil, nil, err
		}
		closeNIC = func() { nic.Close() }
		lis = nic.Listener(lis)
	}
	if err := p.sec.creds.CheckListen(lis.Addr()); err != nil {
		lis.Close()
		closeNIC()
		return nil, nil, err
	}
	return lis, closeNIC, nil
}

// psServer is the shard's gRPC server and the listener it serves on.
type psServer struct {
	g       *grpc.Server
	health  *health.Server
	lis     net.Listener // with the connection limits
	addr    string
	total   time.Duration    // the longest a stream may last
	refused *secure.Refusals // calls refused without the token
}

// newServer builds the gRPC server of core on lis, with the security
// flags, the connection and stream limits and the metrics (psm and grpcm,
// nil without --metrics-addr). It warns when the shard serves beyond
// loopback with no TLS and no authentication.
func (p *psRun) newServer(core *ps.Server, lis net.Listener, psm *metrics.PS, grpcm *metrics.GRPC) *psServer {
	log := p.cfg.Logger
	s := &psServer{refused: &secure.Refusals{}}
	// Authentication first: a call without the token reaches nothing else.
	s.lis = p.limits.Listener(lis, log)
	// A stream may wait for other workers up to --max-wait, and move the
	// shard's floats both ways at no less than 1 MiB/s.
	s.total = p.cfg.MaxWait + time.Duration(float64(8*core.Floats())/(1<<20)*float64(time.Second)) + p.idle
	opts := append(p.sec.creds.ServerOptions(log, s.refused), grpc.ChainStreamInterceptor(rpc.StreamTimeouts(p.idle, s.total)))
	opts = append(opts, p.limits.ServerOptions()...)
	if grpcm != nil {
		opts = append(opts, grpcm.ServerOptions()...)
	}
	s.g, s.health = rpc.NewGRPCServer(opts...)
	// The lanes of a push-pull that arrived wait for the others as long
	// as a stream may leave the shard waiting.
	rpc.RegisterPS(s.g, s.health, core, log, rpc.WithLaneWait(p.idle))
	if psm != nil {
		grpcm.Initialize(s.g)
		psm.Attach(core)
	}
	s.addr = s.lis.Addr().String()
	if !p.insecure && !secure.Loopback(s.addr) && !p.sec.creds.TLS() {
		log.Warn("serving beyond loopback with no TLS and no authentication: anyone who can reach this address can read and change the model; "+
			"give --tls-cert, --tls-key, --tls-ca and --auth-token-file (shoal certs writes a set), serve on 127.0.0.1, "+
			"or say with --insecure that this is a private network you trust", "component", "ps", "addr", s.addr)
	}
	return s
}

// announce logs that the shard is serving, and says so on stdout: a line,
// or with --events the launcher's event.
func (p *psRun) announce(core *ps.Server, srv *psServer, gossip string, stdout io.Writer) {
	log, plan, idx := p.cfg.Logger, p.cfg.Plan, p.cfg.Shard
	p.sec.warnExposed(log)
	log.Info("serving", "component", "ps", "addr", srv.addr, "security", p.sec.creds.Describe(), "stream_limit", srv.total.Round(time.Second), "gossip", gossip, "clock", core.Clock(), "shard", idx, "servers", plan.Servers, "mode", p.cfg.Mode,
		"model", p.model, "floats", plan.Floats(idx))
	if p.events {
		launch.Emit(stdout, launch.Event{Event: launch.Listening, Addr: srv.addr, Shard: idx, Gossip: gossip})
	} else {
		fmt.Fprintf(stdout, "shoal ps: shard %d of %d serving %s on %s, owning %d of the model's %d floats in %d chunk(s)\n",
			idx, plan.Servers, p.model, srv.addr, core.Floats(), plan.VectorLen, len(core.Ranges()))
	}
}

// serve serves core until ctx ends or a checkpoint fails (endRun ends
// the run); then it drains, writes the final checkpoint, closes the
// journal and logs the shard's counts.
func (p *psRun) serve(ctx context.Context, endRun func(), core *ps.Server, srv *psServer) error {
	// A checkpoint that cannot be written ends the run (unless
	// --checkpoint-errors warn): it must not go on believing it is
	// checkpointed.
	var failure error
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case failure = <-core.Failed():
			endRun()
		case <-ctx.Done():
		}
	}()
	// Until ctx ends; then drain: report NOT_SERVING, let calls in flight
	// finish, then stop.
	err := rpc.Serve(ctx, srv.g, srv.health, srv.lis, p.drain)
	endRun()
	<-watched
	if err != nil {
		return err
	}
	if failure != nil {
		return fmt.Errorf("%w: the shard stopped (--checkpoint-errors warn logs such failures and serves on)", failure)
	}
	if err := core.Checkpoint(); err != nil {
		return fmt.Errorf("final checkpoint: %w", err)
	}
	if err := core.Close(); err != nil {
		return fmt.Errorf("closing the journal: %w", err)
	}
	st := core.Stats()
	p.cfg.Logger.Info("stopped", "component", "ps", "clock", core.Clock(), "pushes", st.Pushes, "duplicates", st.Duplicates, "dropped", st.Dropped, "rejected", st.Rejected, "rejected_by", st.RejectedBy, "unauthenticated", srv.refused.Load(), "pulls", st.Pulls,
		"short_steps", st.ShortSteps)
	return nil
}

// joinGossip puts the shard into the job's gossip cluster, when gossip is
// on, and follows the workers' membership: deaths and leaves go to the
// shard, and with --events shard 0 reports every change. It returns the
// gossip address ("" when off), the stdout to write events to from now on
// (locked when a second goroutine writes it too), and what ends gossip.
func (p *psRun) joinGossip(ctx context.Context, core *ps.Server, addr string, stdout io.Writer, endRun func()) (string, io.Writer, func(), error) {
	log, idx := p.cfg.Logger, p.cfg.Shard
	fp := fingerprint(p.cfg.Layout)
	meta := cluster.Meta{Role: cluster.RolePS, Rank: idx, GRPCAddr: addr, ModelFingerprint: fp, PlanVersion: uint64(shard.Version)}
	m, err := p.gf.start(ctx, fmt.Sprintf("ps-%d", idx), meta, log)
	if err != nil || m == nil {
		return "", stdout, func() {}, err
	}
	w := &workerWatch{p: p, core: core, log: log, endRun: endRun, emit: func(launch.Event) {}, seen: map[int]bool{}}
	if p.events && idx == 0 { // one shard speaks for the job
		stdout = &lockedio.Writer{W: stdout} // written from two goroutines now
		w.emit = func(e launch.Event) { launch.Emit(stdout, e) }
	}
	leave := follow(m, log, 2*time.Second, func(views <-chan cluster.View) { cluster.FollowWorkers(views, fp, core, w.report) })
	stop := func() {
		leave()
		w.stop()
	}
	return m.Addr(), stdout, stop, nil
}

// workerWatch follows the job's workers in a shard's gossip: it logs and
// reports each change, and with --exit-when-done ends the run once they
// are done. report runs on the membership goroutine, the --exit-wait
// timer's function on its own.
type workerWatch struct {
	p      *psRun
	core   *ps.Server
	log    *slog.Logger
	emit   func(launch.Event)
	endRun func()

	mu       sync.Mutex
	finished bool         // some worker left gracefully: it ended its run
	seen     map[int]bool // the job's workers seen: one that finished before the others joined (async lets it) must not end the run for them
	// Set while every worker that came has left but some never came: it
	// ends the run after --exit-wait unless one joins first.
	wait *time.Timer
}

func (w *workerWatch) report(r cluster.Report) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rank := r.Change.Member.Meta.Rank
	w.seen[rank] = true
	w.log.Info("worker "+r.Change.What(), "component", "membership", "rank", rank, "steps", r.Steps, "clock", w.core.Clock(), "live", r.Live, "view", r.View)
	w.emit(launch.Event{Event: launch.Member, Role: cluster.RoleWorker.String(), Rank: rank, Change: r.Change.What(), Steps: r.Steps, Live: r.Live})
	// The run is over when every worker of the job (--workers) has come,
	// none is left, and at least one ended its run (left gracefully); a
	// straggler's death may come last. A worker that never comes (it
	// failed before it joined) is waited for --exit-wait, not for ever.
	w.finished = w.finished || r.Change.Kind == cluster.EventLeave
	if !w.p.exitWhenDone {
		return
	}
	w.stopWaiting()
	if r.Live > 0 || !w.finished {
		return
	}
	var missing []int
	for rank := range w.p.cfg.Workers {
		if !w.seen[rank] {
			missing = append(missing, rank)
		}
	}
	if len(missing) == 0 {
		w.log.Info("every worker has left: the run is over", "component", "ps", "clock", w.core.Clock())
		w.endRun()
		return
	}
	w.waitFor(missing)
}

// waitFor ends the run after --exit-wait unless a worker joins first.
// Called with mu held.
func (w *workerWatch) waitFor(missing []int) {
	exitWait := w.p.exitWait
	w.log.Warn("every worker that joined has left; waiting for the ranks that never joined", "component", "ps", "missing", missing, "wait", exitWait)
	var t *time.Timer
	t = time.AfterFunc(exitWait, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.wait != t {
			return // a worker joined meanwhile
		}
		w.log.Warn("every worker has left, and these ranks never joined: the run is over without them", "component", "ps", "missing", missing, "waited", exitWait, "clock", w.core.Clock())
		w.endRun()
	})
	w.wait = t
}

// stopWaiting stops the --exit-wait timer, if set. Called with mu held.
func (w *workerWatch) stopWaiting() {
	if w.wait != nil {
		w.wait.Stop()
		w.wait = nil
	}
}

// stop stops the --exit-wait timer once the gossip is left.
func (w *workerWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopWaiting()
}

// psFlags are the flags of shoal ps that parsePS checks and builds the
// shard's config from; the rest go straight into the psRun.
type psFlags struct {
	shardFlags // those shoal train gives its shards too
	mf         modelFlags
	of         optFlags
	lf         logFlags
	mode       string
	workers    int
	maxWait    time.Duration
	shardIdx   int
	maxStreams uint // --max-streams-per-conn, which parsePS checks into the psRun's limits
}

func (f *psFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.mode, "mode", consistency.Async.String(), "consistency mode: async (Downpour), sync or ssp")
	fs.IntVar(&f.workers, "workers", 0, "the number of workers (ranks 0..N-1): sync and ssp wait for them, and pushes from other ranks are refused (default 1 in sync and ssp; in async, ranks up to 65535)")
	fs.DurationVar(&f.maxWait, "max-wait", 10*time.Minute, "sync, ssp: the longest a call waits for other workers")
	fs.IntVar(&f.shardIdx, "shard", 0, "this server's shard index")
	fs.UintVar(&f.maxStreams, "max-streams-per-conn", uint(rpc.DefaultLimits.StreamsPerConn), "streams open at once on one connection; a client's further streams wait")
	f.shardFlags.register(fs)
	f.mf.register(fs)
	f.of.register(fs, "none")
	f.lf.register(fs, "info")
}

// register registers the flags of shoal ps that go straight into p.
func (p *psRun) register(fs *flag.FlagSet) {
	fs.BoolVar(&p.events, "events", false, "write JSON events on stdout for a launcher")
	fs.BoolVar(&p.exitWhenDone, "exit-when-done", false, "with gossip on: exit 0 once every one of --workers workers has joined and none is left, one at least having left gracefully, as workers do at the end of their run (a docker-compose cluster ends with its run)")
	fs.DurationVar(&p.exitWait, "exit-wait", 30*time.Second, "with --exit-when-done: once every worker that joined has left, how long to wait for ranks of --workers that never joined (they failed before joining) before the run ends without them")
	fs.DurationVar(&p.drain, "drain-timeout", 5*time.Second, "on shutdown, wait this long for calls in flight")
	fs.StringVar(&p.listen, "listen", "127.0.0.1:7070", "address to serve gRPC on (HOST:PORT; port 0 picks a free one); beyond loopback, e.g. :7070, give --tls-cert, --tls-key, --tls-ca and --auth-token-file, or anyone who reaches it can read and change the model")
	fs.BoolVar(&p.insecure, "insecure", false, "serve beyond loopback without the warning that there is no TLS or authentication (a private network you trust)")
	fs.IntVar(&p.limits.Conns, "max-connections", rpc.DefaultLimits.Conns, "connections the shard holds open at once; one past it is closed at once (a worker holds two, and one more for each lane past the first: up to 5 with the workers' default --lanes on 8 or more CPUs, where the share has 4 chunks or more)")
	fs.DurationVar(&p.limits.ConnIdle, "conn-idle-timeout", rpc.DefaultLimits.ConnIdle, "close a connection that had no stream open this long (clients reconnect when they next call)")
	fs.DurationVar(&p.idle, "stream-idle-timeout", rpc.DefaultStreamIdle, "end a stream that leaves the shard waiting this long for the client's next message, or for room to send one")
	p.nf.register(fs)
	p.gf.register(fs)
	p.sec.register(fs)
	p.mtf.register(fs)
	p.tlf.register(fs)
}

// parsePS reads and checks shoal ps's flags into the shard's config and
// its initial values.
func parsePS(args []string, stderr io.Writer) (*psRun, error) {
	fs := newFlagSet("ps", "Runs one parameter-server shard: it holds its chunks of the model's parameter\nvector and applies the gradients workers push with a server-side optimizer.", stderr)
	p, f := &psRun{}, &psFlags{}
	p.register(fs)
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := p.sec.load(); err != nil {
		return nil, err
	}
	if err := f.checkCheckpoints(); err != nil {
		return nil, err
	}
	if err := p.setLimits(f.maxStreams); err != nil {
		return nil, err
	}
	if err := p.configure(f, stderr); err != nil {
		return nil, err
	}
	for _, v := range []func() error{p.nf.validate, p.gf.validate} {
		if err := v(); err != nil {
			return nil, err
		}
	}
	if p.exitWait <= 0 {
		return nil, fmt.Errorf("--exit-wait %v: want a positive duration", p.exitWait)
	}
	if p.exitWhenDone && !p.gf.on() {
		return nil, errors.New("--exit-when-done: the shard learns that the workers are done from gossip; set --gossip-addr or --join too")
	}
	return p, nil
}

// checkCheckpoints checks --journal, --checkpoint-dir and
// --checkpoint-errors.
func (f *psFlags) checkCheckpoints() error {
	if f.journal && f.ckptDir == "" {
		return errors.New("--journal: needs --checkpoint-dir, where the shard writes it")
	}
	if err := writableDir("--checkpoint-dir", f.ckptDir); err != nil {
		return err
	}
	if f.ckptErrors != "fail" && f.ckptErrors != "warn" {
		return fmt.Errorf("--checkpoint-errors %q: want fail or warn", f.ckptErrors)
	}
	if f.ckptEvery < 0 {
		return fmt.Errorf("--checkpoint-every %d: want >= 0 (0: only at shutdown)", f.ckptEvery)
	}
	return nil
}

// setLimits checks the connection and stream limits, and sets the
// streams per connection to maxStreams.
func (p *psRun) setLimits(maxStreams uint) error {
	if p.limits.ConnIdle <= 0 {
		return fmt.Errorf("--conn-idle-timeout %v: want > 0", p.limits.ConnIdle)
	}
	if p.limits.Conns < 1 {
		return fmt.Errorf("--max-connections %d: want >= 1", p.limits.Conns)
	}
	if maxStreams < 1 || maxStreams > 1<<20 {
		return fmt.Errorf("--max-streams-per-conn %d: want 1..%d", maxStreams, 1<<20)
	}
	p.limits.StreamsPerConn = uint32(maxStreams)
	if p.idle <= 0 {
		return fmt.Errorf("--stream-idle-timeout %v: want > 0", p.idle)
	}
	if p.drain < 0 {
		return fmt.Errorf("--drain-timeout %v: want >= 0 (0: end the calls in flight at once)", p.drain)
	}
	return nil
}

// configure builds the shard's config from f: its mode, logger, model,
// optimizer and shard plan, and the model's initial values.
func (p *psRun) configure(f *psFlags, stderr io.Writer) error {
	m, err := consistency.Parse(f.mode)
	if err != nil {
		return fmt.Errorf("--%w", err) // --mode "x": unknown (want ...)
	}
	if f.maxWait <= 0 {
		// The stream limit is computed from it too.
		return fmt.Errorf("--max-wait %v: want > 0", f.maxWait)
	}
	log, err := f.lf.logger(stderr)
	if err != nil {
		return err
	}
	model, err := f.mf.build()
	if err != nil {
		return err
	}
	ocfg, err := f.of.config()
	if err != nil {
		return err
	}
	layout := model.Layout()
	plan, err := shard.New(layout.Size(), f.servers, f.chunkBytes)
	if err != nil {
		return err
	}
	initial := make([]float32, layout.Size())
	model.Init(initial, f.mf.seed)
	p.cfg = ps.Config{Mode: m, Shard: f.shardIdx, Plan: plan, Layout: layout, Optimizer: ocfg,
		Workers: f.workers, BackupWorkers: f.backup, Staleness: f.staleness, MaxWait: f.maxWait, ParallelStep: f.parStep,
		CheckpointDir: f.ckptDir, CheckpointEvery: f.ckptEvery, CheckpointErrorsWarn: f.ckptErrors == "warn", Journal: f.journal, Logger: log, StallWarning: f.lf.stall}
	p.initial, p.model = initial, describeModel(model)
	return nil
}
