package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/collective/collnet"
	"github.com/shoalml/shoal/elastic"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/worker"
)

// gossipRoster is the elastic ring's roster: the ring members of this
// job's model that gossip says are alive.
type gossipRoster struct {
	fp    uint64
	mu    sync.Mutex
	live  []elastic.Member
	coord *elastic.Coordinator
}

func (g *gossipRoster) Live() []elastic.Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.live)
}

// see takes in a view and wakes the coordinator.
func (g *gossipRoster) see(v cluster.View) {
	var live []elastic.Member
	for _, m := range v.Members {
		if m.Meta.Role == cluster.RoleWorker && m.Meta.ModelFingerprint == g.fp && m.Meta.GRPCAddr != "" && !m.Meta.Leaving {
			live = append(live, elastic.Member{ID: m.Meta.Rank, Addr: m.Meta.GRPCAddr})
		}
	}
	slices.SortFunc(live, func(a, b elastic.Member) int { return a.ID - b.ID })
	g.mu.Lock()
	g.live = live
	g.mu.Unlock()
	g.coord.RosterChanged()
}

// runElastic trains as one member of an elastic ring (gossip on): the
// ring re-forms when a member dies or joins, instead of ending.
func runElastic(ctx context.Context, r ringRun) (err error) {
	if r.Stats.StopAt > 0 || r.Stats.EvalEvery > 0 {
		return errors.New("--stop-at-accuracy and --eval-every are not supported by the elastic ring yet; run with --elastic=false")
	}
	comp := r.Ring.Compression
	svc, err := startElastic(ctx, r)
	if err != nil {
		return err
	}
	defer func() {
		if serr := svc.stop(); err == nil {
			err = serr
		}
	}()
	wrap, closeNIC, err := r.nicWrap()
	if err != nil {
		return err
	}
	defer closeNIC()

	resident, err := r.resident()
	if err != nil {
		return err
	}
	n := r.Model.Layout().Size()
	initial := make([]float32, n)
	r.Model.Init(initial, r.Seed)
	steps := launch.StepLog{}
	wcfg := worker.Config{Batch: r.Loop.Batch, Epochs: r.Loop.Epochs, Steps: r.Loop.Steps, Seed: r.Seed, BackwardPasses: r.Loop.BackwardPasses,
		Progress: r.Progress, ProgressEvery: max(r.Loop.ProgressEvery, 1), Logger: r.Logger, Timeline: r.Timeline}
	if r.Stats.Times {
		wcfg.OnStep = func(_ int64, t worker.StepTimes) { steps.Add(t) }
	}
	_, stopMetrics, err := workerMetrics(r.MetricsAddr, &wcfg, r.ID.Rank, metrics.WorkerSources{Members: func() int { return len(svc.roster.Live()) }, ReformRefusals: svc.coord.Refusals}, r.Logger, r.out, r.Events)
	if err != nil {
		return err
	}
	defer stopMetrics()
	var current atomic.Pointer[countingTransport] // the generation's transport, for the stall inspector
	stopStalls := watchStalls(&wcfg, r.Stall, r.Logger, ringStalls(current.Load))
	defer stopStalls()
	out, err := elastic.Run(ctx, elastic.Config{
		Member: r.ID.Rank, JobID: r.Ring.JobID, Coordinator: svc.coord, Roster: svc.roster, Secret: r.Ring.Secret,
		Connect: r.connector(wrap, &current),
		Comm:    collective.Config{SegmentBytes: collective.DefaultConfig().SegmentBytes, Compression: comp, CallTimeout: r.CallTimeout, Algorithm: r.Ring.Algorithm},
		Model:   r.Model, Train: r.Train, Initial: initial,
		Ring:   worker.RingConfig{Optimizer: r.Ring.Optimizer, ScaleLR: r.Ring.ScaleLR, ReduceOp: r.Ring.ReduceOp, DesyncEvery: r.Ring.DesyncEvery, FusionBytes: r.Ring.FusionBytes, Timeline: r.Timeline, Resident: resident},
		Worker: wcfg, ReformTimeout: r.Ring.RejoinTimeout, Logger: r.Logger, DialOptions: r.Creds.DialOptions(), CheckDial: r.Creds.CheckDial,
		OnGeneration: r.generationEvents(),
	})
	if err != nil {
		return fmt.Errorf("member %d of the elastic ring: %w", r.ID.Rank, err)
	}
	defer out.Close()
	return r.finishElastic(ctx, out, &steps)
}

// nicWrap is the NIC model every generation's links go through, if one
// is asked for, and how to close it.
func (r ringRun) nicWrap() (func(net.Conn) net.Conn, func(), error) {
	if !shaped(r.NIC) {
		return nil, func() {}, nil
	}
	nic, err := newNIC(r.NIC)
	if err != nil {
		return nil, nil, err
	}
	return nic.Conn, func() { nic.Close() }, nil
}

// connector connects each generation of the elastic ring, every link
// through wrap (if set), and keeps the generation's counting transport in
// current for the stall inspector.
func (r ringRun) connector(wrap func(net.Conn) net.Conn, current *atomic.Pointer[countingTransport]) func(context.Context, int, int, string, net.Listener, string) (collective.Transport, error) {
	return func(ctx context.Context, rank, size int, master string, lis net.Listener, job string) (collective.Transport, error) {
		cctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
		defer cancel()
		cfg := collnet.Config{Rank: rank, Size: size, Master: master, MasterListener: lis, Listen: r.Ring.Listen, JobID: job,
			SharedMemory: r.Ring.SharedMemory && wrap == nil, WrapData: wrap, Security: r.Creds}
		tr, err := collnet.Connect(cctx, cfg)
		if err != nil {
			return nil, err
		}
		ct := newCountingTransport(tr)
		current.Store(ct)
		return ct, nil
	}
}

// elasticService is a member's side of the elastic ring's control plane:
// the Elastic gRPC service (every member serves it; the lowest live one
// coordinates) and the gossip that tells members apart.
type elasticService struct {
	coord  *elastic.Coordinator
	roster *gossipRoster
	// stop leaves the gossip and stops the service; its error is the
	// one that ended serving early.
	stop func() error
}

// startElastic serves the Elastic service and joins the job's gossip.
func startElastic(ctx context.Context, r ringRun) (*elasticService, error) {
	log := r.Logger
	host := cluster.HostOf(r.GossipBind)
	if r.Ring.Listen != "" {
		host = cluster.HostOf(r.Ring.Listen)
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("elastic: listening for the Elastic service on %s: %w", host, err)
	}
	// Its callers send the token: in the clear, only on loopback.
	if err := r.Creds.CheckListen(lis.Addr()); err != nil {
		lis.Close()
		return nil, fmt.Errorf("elastic: the Elastic service: %w", err)
	}
	roster := &gossipRoster{fp: fingerprint(r.Model.Layout())}
	var advertised string // the host the gossip advertises, once joined
	coord, err := elastic.NewCoordinator(elastic.CoordinatorConfig{
		JobID: r.Ring.JobID, Self: r.ID.Rank, Initial: r.ID.WorldSize, MinWorkers: r.Ring.MinWorkers, RejoinTimeout: r.Ring.RejoinTimeout,
		Roster: roster, Logger: log, Secret: r.Ring.Secret,
		Listen: func() (net.Listener, error) {
			l, err := collnet.ListenMaster(net.JoinHostPort(host, "0"))
			if err != nil {
				return nil, err
			}
			return addrListener{Listener: l, addr: cluster.Reachable(l.Addr().String(), advertised)}, nil
		},
	})
	if err != nil {
		lis.Close()
		return nil, err
	}
	roster.coord = coord
	m, err := r.Gossip(ctx, fmt.Sprintf("worker-%d", r.ID.Rank), cluster.Meta{Role: cluster.RoleWorker, Rank: r.ID.Rank,
		GRPCAddr: lis.Addr().String(), ModelFingerprint: roster.fp}, log)
	if err != nil {
		lis.Close()
		return nil, err
	}
	// Set before the service answers anyone: Listen reads it.
	advertised = cluster.HostOf(m.Addr())
	stopServing := elastic.Serve(lis, coord, log, r.Creds.ServerOptions(log, nil)...)
	// The ranks of a ring finish together: when one leaves, the others
	// are leaving too and may not be there to hear it, and nobody needs
	// to (a leave mid-run is a failure, seen as a death). So the news
	// gets a short wait.
	leave := cluster.Follow(m, log, 200*time.Millisecond, func(views <-chan cluster.View) {
		for v := range views {
			cluster.LogChanges(v, log)
			roster.see(v)
		}
	})
	if r.Events {
		launch.Emit(r.out, launch.Event{Event: launch.Listening, Rank: r.ID.Rank, Addr: cluster.Reachable(lis.Addr().String(), advertised), Gossip: m.Addr()})
	}
	return &elasticService{coord: coord, roster: roster, stop: func() error { leave(); return stopServing() }}, nil
}

// generationEvents tells the launcher, from the new rank 0 of each
// generation after the first, which members left and which joined (or
// came back); a re-form that kept the same members (a ring broken or
// interrupted with nobody gone) is one "reformed" event with the reason,
// so that every re-form shows in the run's membership events.
func (r ringRun) generationEvents() func(elastic.Generation) {
	var seen []int // every member any generation held, to tell a rejoin
	return func(g elastic.Generation) {
		defer func() { seen = append(seen, g.Members...) }()
		if g.Number == 1 || !r.Events || g.Rank != 0 {
			return
		}
		if len(g.Left) == 0 && len(g.Joined) == 0 {
			launch.Emit(r.out, launch.Event{Event: launch.Member, Role: launch.RingRole, Change: launch.Reformed, Steps: g.Step, Live: len(g.Members), Reason: g.Reason})
			return
		}
		for _, id := range g.Left {
			launch.Emit(r.out, launch.Event{Event: launch.Member, Role: "worker", Rank: id, Change: "died", Steps: g.Step, Live: len(g.Members)})
		}
		for _, id := range g.Joined {
			change := "joined"
			if slices.Contains(seen, id) {
				change = "rejoined"
			}
			launch.Emit(r.out, launch.Event{Event: launch.Member, Role: "worker", Rank: id, Change: change, Steps: g.Step, Live: len(g.Members)})
		}
	}
}

// finishElastic checks the final weights agree, evaluates them, lets the
// final rank 0 save them, and reports.
func (r ringRun) finishElastic(ctx context.Context, out *elastic.Outcome, steps *launch.StepLog) error {
	res := worker.Result{Steps: out.Steps, Samples: out.Samples, Elapsed: out.Elapsed, Last: out.Last}
	if err := out.Ring.CheckDesync(ctx, out.Steps, out.Params); err != nil {
		return err
	}
	ev := worker.Evaluation{Accuracy: -1}
	if r.Eval {
		var err error
		if ev, err = worker.EvaluateShard(ctx, out.Comm, r.Model, out.Params, r.Test, 1000); err != nil {
			return err
		}
	}
	if out.Rank == 0 && r.Ring.Save != "" {
		if err := r.saveParams(out.Params, ev); err != nil {
			return err
		}
	}
	r.Logger.Info("elastic ring done", "component", "elastic", "generations", out.Generations, "rank", out.Rank, "size", out.Size)
	r.report(res, ev, steps)
	return nil
}

// addrListener is a listener that reports the address peers reach it at.
type addrListener struct {
	net.Listener
	addr string
}

func (l addrListener) Addr() net.Addr { return stringAddr(l.addr) }

type stringAddr string

func (a stringAddr) Network() string { return "tcp" }
func (a stringAddr) String() string  { return string(a) }
