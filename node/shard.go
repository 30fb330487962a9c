package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/internal/lockedio"
	"github.com/shoalml/shoal/internal/netshape"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/rpc"
	"github.com/shoalml/shoal/secure"
	"github.com/shoalml/shoal/shard"
)

// Gossip joins the job's gossip cluster as name with meta (cluster.New,
// then cluster.JoinRetrying); nil Membership when gossip is off. The
// caller Leaves or Closes it.
type Gossip func(ctx context.Context, name string, meta cluster.Meta, log *slog.Logger) (*cluster.Membership, error)

// ShardConfig is one parameter-server shard process (shoal ps).
type ShardConfig struct {
	// PS is the shard's core; PS.Logger is the process's logger (nil
	// discards).
	PS ps.Config
	// Initial are the model's initial values, the whole vector.
	Initial []float32
	// Model describes the model, for the logs and the serving line.
	Model string
	// Listen is the address to serve gRPC on.
	Listen string
	// Events: say what happens as launch events on out, not lines.
	Events bool
	// Drain: how long calls in flight get at shutdown.
	Drain time.Duration
	// StreamIdle bounds how long a stream may leave the shard waiting.
	StreamIdle time.Duration
	// Insecure: serving beyond loopback without TLS or authentication is
	// meant; no warning.
	Insecure bool
	// Limits are the connection and stream limits.
	Limits rpc.Limits
	// Creds are the TLS and token credentials (nil: plaintext).
	Creds *secure.Credentials
	// NIC models a network card (zero: none).
	NIC netshape.Config
	// Gossip joins the job's membership; nil when off.
	Gossip Gossip
	// ExitWhenDone: stop once every worker has left the gossip
	// gracefully; ExitWait: how long to wait then for workers that never
	// joined.
	ExitWhenDone bool
	ExitWait     time.Duration
	// MetricsAddr serves Prometheus metrics there; "" none.
	MetricsAddr string
	// InitFrom, when set, is a model file (ps.ReadModelFile) the shard
	// takes its layout and initial values from, in place of PS.Layout and
	// Initial: a model Shoal does not build, held by a worker (rank 0 of
	// a PyTorch job writes it). The shard listens and says so first,
	// since the launcher starts the workers only then, and waits up to
	// InitWait for the file to appear; PlanFor then partitions the
	// file's vector into PS.Plan.
	InitFrom string
	InitWait time.Duration
	PlanFor  func(floats int) (shard.Plan, error)
}

// RunShard runs one shard until ctx ends, a checkpoint fails, or with
// ExitWhenDone the workers are done: it serves the shard's gRPC service,
// joins the gossip, says it serves on out, and at the end drains, writes
// the final checkpoint and logs the shard's counts. It owns every
// goroutine it starts and waits for them before it returns.
func RunShard(ctx context.Context, cfg ShardConfig, out io.Writer) error {
	if cfg.PS.Logger == nil {
		cfg.PS.Logger = slog.New(slog.DiscardHandler)
	}
	log, idx := cfg.PS.Logger, cfg.PS.Shard
	var psm *metrics.PS
	var grpcm *metrics.GRPC
	ep, err := serveMetrics(cfg.MetricsAddr, "ps", idx, func(reg prometheus.Registerer) { psm, grpcm = metrics.NewPS(reg, idx), metrics.NewGRPC(reg) }, log, out, cfg.Events)
	if err != nil {
		return err
	}
	defer ep.close()
	if psm != nil {
		cfg.PS.OnWait = psm.ObserveWait
	}
	lis, closeNIC, err := cfg.openListener()
	if err != nil {
		return err
	}
	defer closeNIC()
	if cfg.InitFrom != "" {
		if err := cfg.awaitModel(ctx, lis.Addr().String(), out); err != nil {
			lis.Close()
			return err
		}
	}
	core, err := ps.New(cfg.PS, cfg.Initial)
	if err != nil {
		lis.Close()
		return err
	}
	refused := &secure.Refusals{}
	srv := cfg.newServer(core, lis, refused, psm, grpcm)
	ctx, endRun := context.WithCancel(ctx)
	defer endRun()
	gossip, out, leaveGossip, err := cfg.joinGossip(ctx, core, srv.Addr(), out, endRun)
	if err != nil {
		srv.Close()
		return err
	}
	defer leaveGossip()
	cfg.announce(core, srv, gossip, out)
	return cfg.serve(ctx, core, srv, refused)
}

// openListener listens on Listen, through the modelled NIC when there is
// one, where the credentials allow serving. The func it returns closes
// the NIC.
func (cfg *ShardConfig) openListener() (net.Listener, func(), error) {
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--listen %s: %w", cfg.Listen, err)
	}
	closeNIC := func() {}
	if shaped(cfg.NIC) {
		nic, err := newNIC(cfg.NIC)
		if err != nil {
			lis.Close()
			return nil, nil, err
		}
		closeNIC = func() { nic.Close() }
		lis = nic.Listener(lis)
	}
	if err := cfg.Creds.CheckListen(lis.Addr()); err != nil {
		lis.Close()
		closeNIC()
		return nil, nil, err
	}
	return lis, closeNIC, nil
}

// awaitModel says the shard listens on addr, waits for the model file
// InitFrom, and takes the shard's layout, plan and initial values from it.
func (cfg *ShardConfig) awaitModel(ctx context.Context, addr string, out io.Writer) error {
	log, idx := cfg.PS.Logger, cfg.PS.Shard
	log.Info("listening; waiting for the model", "component", "ps", "addr", addr, "shard", idx, "init_from", cfg.InitFrom, "wait", cfg.InitWait)
	if cfg.Events {
		launch.Emit(out, launch.Event{Event: launch.Listening, Addr: addr, Shard: idx})
	} else {
		fmt.Fprintf(out, "shoal ps: shard %d listening on %s, waiting up to %v for the model at %s\n", idx, addr, cfg.InitWait, cfg.InitFrom)
	}
	if err := waitForFile(ctx, cfg.InitFrom, cfg.InitWait); err != nil {
		return fmt.Errorf("--init-from %s: %w (the worker that holds the model, rank 0, writes it when it connects)", cfg.InitFrom, err)
	}
	layout, initial, err := ps.ReadModelFile(cfg.InitFrom)
	if err != nil {
		return fmt.Errorf("--init-from: %w", err)
	}
	plan, err := cfg.PlanFor(layout.Size())
	if err != nil {
		return fmt.Errorf("--init-from %s: %w", cfg.InitFrom, err)
	}
	cfg.PS.Layout, cfg.PS.Plan, cfg.Initial = layout, plan, initial
	cfg.Model = fmt.Sprintf("a model of %d tensors and %d floats from %s", len(layout.Tensors), layout.Size(), cfg.InitFrom)
	return nil
}

// waitForFile returns once path exists, or an error once wait has passed
// or ctx ended. It looks every 50 ms: the file comes from another
// process, and a shard that waits for it has nothing else to do.
func waitForFile(ctx context.Context, path string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := os.Stat(path)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("no model after %v", wait)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// newServer builds the shard's gRPC server on lis with the credentials,
// limits and metrics (psm and grpcm, nil without MetricsAddr). It warns
// when the shard serves beyond loopback with no TLS and no
// authentication.
func (cfg *ShardConfig) newServer(core *ps.Server, lis net.Listener, refused *secure.Refusals, psm *metrics.PS, grpcm *metrics.GRPC) *rpc.ShardServer {
	log := cfg.PS.Logger
	scfg := rpc.ShardConfig{Listener: lis, Limits: cfg.Limits, StreamIdle: cfg.StreamIdle, Drain: cfg.Drain, Security: cfg.Creds.ServerOptions(log, refused), Logger: log}
	if grpcm != nil {
		scfg.Observe = grpcm.ServerOptions()
	}
	srv := rpc.NewShardServer(core, cfg.PS.MaxWait, scfg)
	if psm != nil {
		grpcm.Initialize(srv.GRPC())
		psm.Attach(core)
	}
	if addr := srv.Addr(); !cfg.Insecure && !secure.Loopback(addr) && !cfg.Creds.TLS() {
		log.Warn("serving beyond loopback with no TLS and no authentication: anyone who can reach this address can read and change the model; "+
			"give --tls-cert, --tls-key, --tls-ca and --auth-token-file (shoal certs writes a set), serve on 127.0.0.1, "+
			"or say with --insecure that this is a private network you trust", "component", "ps", "addr", addr)
	}
	return srv
}

// announce logs that the shard is serving, and says so on out: a line,
// or with Events the launcher's event.
func (cfg *ShardConfig) announce(core *ps.Server, srv *rpc.ShardServer, gossip string, out io.Writer) {
	log, plan, idx := cfg.PS.Logger, cfg.PS.Plan, cfg.PS.Shard
	warnExposed(cfg.Creds, log)
	log.Info("serving", "component", "ps", "addr", srv.Addr(), "security", cfg.Creds.Describe(), "stream_limit", srv.StreamLimit().Round(time.Second), "gossip", gossip, "clock", core.Clock(),
		"shard", idx, "servers", plan.Servers, "mode", cfg.PS.Mode, "model", cfg.Model, "floats", plan.Floats(idx))
	switch {
	case cfg.Events && cfg.InitFrom != "":
		// awaitModel said so; a launcher takes one Listening per shard.
	case cfg.Events:
		launch.Emit(out, launch.Event{Event: launch.Listening, Addr: srv.Addr(), Shard: idx, Gossip: gossip})
	default:
		fmt.Fprintf(out, "shoal ps: shard %d of %d serving %s on %s, owning %d of the model's %d floats in %d chunk(s)\n",
			idx, plan.Servers, cfg.Model, srv.Addr(), core.Floats(), plan.VectorLen, len(core.Ranges()))
	}
}

// serve serves until ctx ends or a checkpoint fails, then logs the
// shard's counts.
func (cfg *ShardConfig) serve(ctx context.Context, core *ps.Server, srv *rpc.ShardServer, refused *secure.Refusals) error {
	if err := srv.Serve(ctx); err != nil {
		return err
	}
	st := core.Stats()
	cfg.PS.Logger.Info("stopped", "component", "ps", "clock", core.Clock(), "pushes", st.Pushes, "duplicates", st.Duplicates, "dropped", st.Dropped, "rejected", st.Rejected,
		"rejected_by", st.RejectedBy, "unauthenticated", refused.Load(), "pulls", st.Pulls, "short_steps", st.ShortSteps)
	return nil
}

// joinGossip puts the shard into the job's gossip cluster, when gossip is
// on, and follows the workers' membership: deaths and leaves go to the
// shard, and with Events shard 0 reports every change. It returns the
// gossip address ("" when off), the writer to write events to from now
// on (locked when a second goroutine writes it too), and what ends
// gossip.
func (cfg *ShardConfig) joinGossip(ctx context.Context, core *ps.Server, addr string, out io.Writer, endRun func()) (string, io.Writer, func(), error) {
	if cfg.Gossip == nil {
		return "", out, func() {}, nil
	}
	log, idx := cfg.PS.Logger, cfg.PS.Shard
	fp := fingerprint(cfg.PS.Layout)
	meta := cluster.Meta{Role: cluster.RolePS, Rank: idx, GRPCAddr: addr, ModelFingerprint: fp, PlanVersion: uint64(shard.Version)}
	m, err := cfg.Gossip(ctx, fmt.Sprintf("ps-%d", idx), meta, log)
	if err != nil || m == nil {
		return "", out, func() {}, err
	}
	w := &workerWatch{cfg: cfg, core: core, log: log, endRun: endRun, emit: func(launch.Event) {}, done: cluster.Done{Workers: cfg.PS.Workers}}
	if cfg.Events && idx == 0 { // one shard speaks for the job
		out = &lockedio.Writer{W: out} // written from two goroutines now
		w.emit = func(e launch.Event) { launch.Emit(out, e) }
	}
	leave := cluster.Follow(m, log, 2*time.Second, func(views <-chan cluster.View) { cluster.FollowWorkers(views, fp, core, w.report) })
	stop := func() {
		leave()
		w.stop()
	}
	return m.Addr(), out, stop, nil
}

// warnExposed logs the secret files other users may read.
func warnExposed(c *secure.Credentials, log *slog.Logger) {
	for _, e := range c.Exposed() {
		log.Warn("a secret file others can read", "component", "auth", "problem", e)
	}
}
