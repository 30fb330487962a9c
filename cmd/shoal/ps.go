package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/node"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/rpc"
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
	return node.RunShard(ctx, p.config(), stdout)
}

// config is the shard process's config from the flags.
func (p *psRun) config() node.ShardConfig {
	cfg := node.ShardConfig{PS: p.cfg, Initial: p.initial, Model: p.model, Listen: p.listen, Events: p.events, Drain: p.drain, StreamIdle: p.idle,
		Insecure: p.insecure, Limits: p.limits, Creds: p.sec.creds, ExitWhenDone: p.exitWhenDone, ExitWait: p.exitWait, MetricsAddr: p.mtf.addr}
	if p.nf.shaped() {
		cfg.NIC = p.nf.config()
	}
	if p.gf.on() {
		cfg.Gossip = p.gf.start
	}
	return cfg
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
