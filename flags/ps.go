package flags

import (
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

// PS is the contract of one `shoal ps`: every flag it takes and the
// shard process's config built from them (Config).
type PS struct {
	Shard      // those shoal train gives its shards too
	Model      Model
	Opt        Opt
	Log        Log
	Mode       string
	Workers    int
	MaxWait    time.Duration
	Index      int // --shard
	ScaleLR    bool
	MaxStreams uint // --max-streams-per-conn, which Config checks into Limits
	LocalSteps LocalSteps

	Listen string
	Events bool
	Drain  time.Duration
	// Idle bounds how long a stream may leave the shard waiting on its
	// client (rpc.StreamIdleTimeout).
	Idle time.Duration
	// Insecure: serving beyond loopback without TLS or authentication
	// is meant; no warning.
	Insecure bool
	// ExitWhenDone: stop once every worker has left the gossip
	// gracefully (a cluster whose servers should end with the run);
	// ExitWait: how long to wait then for workers that never joined.
	ExitWhenDone bool
	ExitWait     time.Duration
	Limits       rpc.Limits
	NIC          NIC
	Gossip       Gossip
	Sec          Sec
	Metrics      Metrics
	Timeline     Timeline
	// InitFrom, InitWait: a model from a file rank 0 writes
	// (node.ShardConfig.InitFrom), in place of --model.
	InitFrom string
	InitWait time.Duration
}

// Register registers shoal ps's flags.
func (p *PS) Register(fs *flag.FlagSet) {
	fs.BoolVar(&p.Events, "events", false, SectionOutput.Usage("write JSON events on stdout for a launcher"))
	fs.BoolVar(&p.ExitWhenDone, "exit-when-done", false, SectionMembership.Usage("with gossip on: exit 0 once every one of --workers workers has joined and none is left, one at least having left gracefully, as workers do at the end of their run (a docker-compose cluster ends with its run)"))
	fs.DurationVar(&p.ExitWait, "exit-wait", 30*time.Second, SectionMembership.Usage("with --exit-when-done: once every worker that joined has left, how long to wait for ranks of --workers that never joined (they failed before joining) before the run ends without them"))
	fs.DurationVar(&p.Drain, "drain-timeout", 5*time.Second, SectionCommunication.Usage("on shutdown, wait this long for calls in flight"))
	fs.StringVar(&p.Listen, "listen", "127.0.0.1:7070", SectionJob.Usage("address to serve gRPC on (HOST:PORT; port 0 picks a free one); beyond loopback, e.g. :7070, give --tls-cert, --tls-key, --tls-ca and --auth-token-file, or anyone who reaches it can read and change the model"))
	fs.BoolVar(&p.Insecure, "insecure", false, SectionSecurity.Usage("serve beyond loopback without the warning that there is no TLS or authentication (a private network you trust)"))
	fs.IntVar(&p.Limits.Conns, "max-connections", rpc.DefaultLimits.Conns, SectionCommunication.Usage("connections the shard holds open at once; one past it takes the place of the oldest still in its handshake, or of one past it that never carried a call and has none in flight (health calls, served without a token, do not count), or is closed at once when none is (a worker holds two, and one more for each lane past the first: up to 5 with the workers' default --lanes on 8 or more CPUs, where the share has 4 chunks or more)"))
	fs.DurationVar(&p.Limits.ConnIdle, "conn-idle-timeout", rpc.DefaultLimits.ConnIdle, SectionCommunication.Usage("close a connection that had no stream open this long (clients reconnect when they next call)"))
	fs.DurationVar(&p.Idle, "stream-idle-timeout", rpc.DefaultStreamIdle, SectionCommunication.Usage("end a stream that leaves the shard waiting this long for the client's next message, or for room to send one"))
	p.NIC.Register(fs)
	p.Gossip.Register(fs)
	p.Sec.Register(fs)
	p.Metrics.Register(fs)
	p.Timeline.Register(fs)
	fs.StringVar(&p.Mode, "mode", consistency.Async.String(), SectionJob.Usage("consistency mode: async (Downpour), sync or ssp"))
	fs.IntVar(&p.Workers, "workers", 0, SectionJob.Usage("the number of workers (ranks 0..N-1): sync and ssp wait for them, and pushes from other ranks are refused (default 1 in sync and ssp; in async, ranks up to 65535)"))
	fs.DurationVar(&p.MaxWait, "max-wait", 10*time.Minute, SectionPS.Usage("sync, ssp: the longest a call waits for other workers"))
	fs.IntVar(&p.Index, "shard", 0, SectionJob.Usage("this server's shard index"))
	fs.BoolVar(&p.ScaleLR, "scale-lr", false, SectionOptimizer.Usage("multiply the learning rate by the live world size (the linear scaling rule; give its warm-up with --warmup-steps): in sync and ssp the live workers, in async --workers less those membership saw leave"))
	fs.UintVar(&p.MaxStreams, "max-streams-per-conn", uint(rpc.DefaultLimits.StreamsPerConn), SectionCommunication.Usage("streams open at once on one connection; a client's further streams wait"))
	fs.StringVar(&p.InitFrom, "init-from", "", SectionModel.Usage("take the model (its tensors and initial values) from this file, which the worker that holds the model writes (rank 0 of a PyTorch job: shoal run sets this), in place of --model and --hidden; the shard listens at once and waits for the file"))
	fs.DurationVar(&p.InitWait, "init-wait", 10*time.Minute, SectionModel.Usage("with --init-from: how long to wait for the file"))
	p.LocalSteps.RegisterShard(fs)
	p.Shard.Register(fs)
	p.Model.Register(fs)
	p.Opt.Register(fs, "none")
	p.Log.Register(fs, "info")
}

// Config checks the flags and builds the shard process's config: its
// mode, logger (on stderr), model, optimizer, shard plan and the model's
// initial values.
func (p *PS) Config(stderr io.Writer) (node.ShardConfig, error) {
	if err := p.Sec.Load(); err != nil {
		return node.ShardConfig{}, err
	}
	if err := p.checkCheckpoints(); err != nil {
		return node.ShardConfig{}, err
	}
	if err := p.checkLimits(); err != nil {
		return node.ShardConfig{}, err
	}
	cfg := node.ShardConfig{Listen: p.Listen, Events: p.Events, Drain: p.Drain, StreamIdle: p.Idle,
		Insecure: p.Insecure, Limits: p.Limits, Creds: p.Sec.Creds, ExitWhenDone: p.ExitWhenDone, ExitWait: p.ExitWait, MetricsAddr: p.Metrics.Addr}
	if err := p.configure(&cfg, stderr); err != nil {
		return node.ShardConfig{}, err
	}
	for _, v := range []func() error{p.NIC.Validate, p.Gossip.Validate} {
		if err := v(); err != nil {
			return node.ShardConfig{}, err
		}
	}
	if p.ExitWait <= 0 {
		return node.ShardConfig{}, fmt.Errorf("--exit-wait %v: want a positive duration", p.ExitWait)
	}
	if p.ExitWhenDone && !p.Gossip.On() {
		return node.ShardConfig{}, errors.New("--exit-when-done: the shard learns that the workers are done from gossip; set --gossip-addr or --join too")
	}
	if p.NIC.Shaped() {
		cfg.NIC = p.NIC.Config()
	}
	if p.Gossip.On() {
		cfg.Gossip = p.Gossip.Start
	}
	return cfg, nil
}

// checkCheckpoints checks --journal, --checkpoint-dir and
// --checkpoint-errors.
func (p *PS) checkCheckpoints() error {
	if p.Journal && p.CkptDir == "" {
		return errors.New("--journal: needs --checkpoint-dir, where the shard writes it")
	}
	if err := WritableDir("--checkpoint-dir", p.CkptDir); err != nil {
		return err
	}
	if p.CkptErrors != "fail" && p.CkptErrors != "warn" {
		return fmt.Errorf("--checkpoint-errors %q: want fail or warn", p.CkptErrors)
	}
	if p.CkptEvery < 0 {
		return fmt.Errorf("--checkpoint-every %d: want >= 0 (0: only at shutdown)", p.CkptEvery)
	}
	return nil
}

// checkLimits checks the connection and stream limits, and sets the
// streams per connection to --max-streams-per-conn.
func (p *PS) checkLimits() error {
	if p.Limits.ConnIdle <= 0 {
		return fmt.Errorf("--conn-idle-timeout %v: want > 0", p.Limits.ConnIdle)
	}
	if p.Limits.Conns < 1 {
		return fmt.Errorf("--max-connections %d: want >= 1", p.Limits.Conns)
	}
	if p.MaxStreams < 1 || p.MaxStreams > 1<<20 {
		return fmt.Errorf("--max-streams-per-conn %d: want 1..%d", p.MaxStreams, 1<<20)
	}
	p.Limits.StreamsPerConn = uint32(p.MaxStreams)
	if p.Idle <= 0 {
		return fmt.Errorf("--stream-idle-timeout %v: want > 0", p.Idle)
	}
	if p.Drain < 0 {
		return fmt.Errorf("--drain-timeout %v: want >= 0 (0: end the calls in flight at once)", p.Drain)
	}
	return nil
}

// configure fills cfg's shard: its mode, logger, model, optimizer and
// shard plan, and the model's initial values.
func (p *PS) configure(cfg *node.ShardConfig, stderr io.Writer) error {
	m, err := consistency.Parse(p.Mode)
	if err != nil {
		return fmt.Errorf("--%w", err) // --mode "x": unknown (want ...)
	}
	workers := p.Workers
	if workers == 0 && m != consistency.Async {
		workers = 1 // ps.Config's default in sync and ssp
	}
	if err := p.CheckMode(m, "--workers", workers); err != nil {
		return err
	}
	if p.MaxWait <= 0 {
		// The stream limit is computed from it too.
		return fmt.Errorf("--max-wait %v: want > 0", p.MaxWait)
	}
	log, err := p.Log.Logger(stderr)
	if err != nil {
		return err
	}
	if err := p.LocalSteps.Validate(m); err != nil {
		return err
	}
	ocfg, err := p.Opt.Config()
	if p.LocalSteps.H > 0 {
		ocfg, err = p.Outer.Config()
	}
	if err != nil {
		return err
	}
	upd, err := p.UpdateConfig()
	if err != nil {
		return err
	}
	cfg.PS = ps.Config{Mode: m, Shard: p.Index, Optimizer: ocfg, Update: upd, ScaleLR: p.ScaleLR, LocalSteps: p.LocalSteps.H, Fragments: p.LocalSteps.F,
		Workers: p.Workers, BackupWorkers: p.Backup, Staleness: p.Staleness, MaxWait: p.MaxWait, ParallelStep: p.ParallelStep,
		CheckpointDir: p.CkptDir, CheckpointEvery: p.CkptEvery, CheckpointErrorsWarn: p.CkptErrors == "warn", Journal: p.Journal, Logger: log, StallWarning: p.Log.Stall}
	if p.InitFrom != "" {
		if p.InitWait <= 0 {
			return fmt.Errorf("--init-wait %v: want > 0", p.InitWait)
		}
		cfg.InitFrom, cfg.InitWait = p.InitFrom, p.InitWait
		cfg.PlanFor = func(floats int) (shard.Plan, error) {
			return shard.New(floats, p.Servers, shard.FragmentChunkBytes(floats, p.Servers, p.LocalSteps.F, p.ChunkBytes))
		}
		return nil
	}
	model, err := p.Model.Build()
	if err != nil {
		return err
	}
	layout := model.Layout()
	// Fragments are whole rows of chunks: each server owns F chunks or more.
	plan, err := shard.New(layout.Size(), p.Servers, shard.FragmentChunkBytes(layout.Size(), p.Servers, p.LocalSteps.F, p.ChunkBytes))
	if err != nil {
		return err
	}
	initial := make([]float32, layout.Size())
	model.Init(initial, p.Model.Seed)
	cfg.PS.Plan, cfg.PS.Layout = plan, layout
	cfg.Initial, cfg.Model = initial, DescribeModel(model)
	return nil
}

// DefaultPS is a shard with every flag at its default, for a launcher to
// fill and render (Args).
func DefaultPS() *PS {
	p := &PS{}
	p.Register(flag.NewFlagSet("ps", flag.ContinueOnError))
	return p
}

// Args is the shard as a child's argv (after the command name): every
// flag, with p's value.
func (p *PS) Args() []string {
	var g PS
	return render(func(fs *flag.FlagSet) { g.Register(fs); g = *p })
}
