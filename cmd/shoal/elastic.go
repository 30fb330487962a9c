package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/collective/collnet"
	"github.com/shoalml/shoal/elastic"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/metrics"
	pb "github.com/shoalml/shoal/proto/shoalpb"
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
func runElastic(ctx context.Context, r ringRun) error {
	if r.sf.stopAt > 0 || r.sf.evalEvery > 0 {
		return errors.New("--stop-at-accuracy and --eval-every are not supported by the elastic ring yet; run with --elastic=false")
	}
	comp, err := r.rf.compressionMode()
	if err != nil {
		return err
	}
	svc, err := startElastic(ctx, r)
	if err != nil {
		return err
	}
	defer svc.stop()
	wrap, closeNIC, err := r.nicWrap()
	if err != nil {
		return err
	}
	defer closeNIC()

	n := r.model.Layout().Size()
	initial := make([]float32, n)
	r.model.Init(initial, r.seed)
	steps := launch.StepLog{}
	wcfg := worker.Config{Batch: r.tf.batch, Epochs: r.tf.epochs, Steps: r.tf.steps, Seed: r.seed, BackwardPasses: r.tf.backwardPasses,
		Progress: progressTo(r.stdout, r.events), ProgressEvery: max(r.tf.progressEvery, 1), Logger: r.log, Timeline: r.timeline}
	if r.sf.stats {
		wcfg.OnStep = func(_ int64, t worker.StepTimes) { steps.Add(t) }
	}
	_, stopMetrics, err := r.mtf.workerMetrics(&wcfg, r.id.Rank, metrics.WorkerSources{Members: func() int { return len(svc.roster.Live()) }}, r.log, r.stdout, r.events)
	if err != nil {
		return err
	}
	defer stopMetrics()
	var current atomic.Pointer[countingTransport] // the generation's transport, for the stall inspector
	stopStalls := watchStalls(&wcfg, r.stall, r.log, ringStalls(current.Load))
	defer stopStalls()
	out, err := elastic.Run(ctx, elastic.Config{
		Member: r.id.Rank, JobID: r.rf.jobID, Coordinator: svc.coord, Roster: svc.roster,
		Connect: r.connector(wrap, &current),
		Comm:    collective.Config{SegmentBytes: collective.DefaultConfig().SegmentBytes, Compression: comp, CallTimeout: r.timeout},
		Model:   r.model, Train: r.train, Initial: initial,
		Ring:   worker.RingConfig{Optimizer: r.ocfg, ReduceOp: r.rf.reduceOp, DesyncEvery: r.rf.desyncEvery, FusionBytes: r.rf.fusionBytes, Timeline: r.timeline},
		Worker: wcfg, ReformTimeout: r.rf.rejoinTimeout, Logger: r.log, DialOptions: r.sec.DialOptions(), CheckDial: r.sec.CheckDial,
		OnGeneration: r.generationEvents(),
	})
	if err != nil {
		return fmt.Errorf("member %d of the elastic ring: %w", r.id.Rank, err)
	}
	defer out.Close()
	return r.finishElastic(ctx, out, &steps)
}

// nicWrap is the NIC model every generation's links go through, if one
// is asked for, and how to close it.
func (r ringRun) nicWrap() (func(net.Conn) net.Conn, func(), error) {
	if !r.nf.shaped() {
		return nil, func() {}, nil
	}
	nic, err := r.nf.nic()
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
		cctx, cancel := context.WithTimeout(ctx, r.timeout)
		defer cancel()
		cfg := collnet.Config{Rank: rank, Size: size, Master: master, MasterListener: lis, Listen: r.rf.listen, JobID: job,
			SharedMemory: r.rf.sharedMemory && wrap == nil, WrapData: wrap, Security: r.sec}
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
	stop   func()
}

// startElastic serves the Elastic service and joins the job's gossip.
func startElastic(ctx context.Context, r ringRun) (*elasticService, error) {
	log := r.log
	host := cluster.HostOf(r.gf.bindAddr())
	if r.rf.listen != "" {
		host = cluster.HostOf(r.rf.listen)
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("elastic: listening for the Elastic service on %s: %w", host, err)
	}
	// Its callers send the token: in the clear, only on loopback.
	if err := r.sec.CheckListen(lis.Addr()); err != nil {
		lis.Close()
		return nil, fmt.Errorf("elastic: the Elastic service: %w", err)
	}
	roster := &gossipRoster{fp: fingerprint(r.model.Layout())}
	var advertised string // the host the gossip advertises, once joined
	coord, err := elastic.NewCoordinator(elastic.CoordinatorConfig{
		JobID: r.rf.jobID, Self: r.id.Rank, Initial: r.id.WorldSize, MinWorkers: r.rf.minWorkers, RejoinTimeout: r.rf.rejoinTimeout,
		Roster: roster, Logger: log,
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
	m, err := r.gf.start(ctx, fmt.Sprintf("worker-%d", r.id.Rank), cluster.Meta{Role: cluster.RoleWorker, Rank: r.id.Rank,
		GRPCAddr: lis.Addr().String(), ModelFingerprint: roster.fp}, log)
	if err != nil {
		lis.Close()
		return nil, err
	}
	// Set before the service answers anyone: Listen reads it.
	advertised = cluster.HostOf(m.Addr())
	srv := grpc.NewServer(r.sec.ServerOptions(log, nil)...)
	pb.RegisterElasticServer(srv, coord)
	go srv.Serve(lis)
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
	if r.events {
		launch.Emit(r.stdout, launch.Event{Event: launch.Listening, Rank: r.id.Rank, Addr: cluster.Reachable(lis.Addr().String(), advertised), Gossip: m.Addr()})
	}
	return &elasticService{coord: coord, roster: roster, stop: func() { leave(); srv.Stop() }}, nil
}

// generationEvents tells the launcher, from the new rank 0 of each
// generation after the first, which members left and which joined (or
// came back).
func (r ringRun) generationEvents() func(elastic.Generation) {
	var seen []int // every member any generation held, to tell a rejoin
	return func(g elastic.Generation) {
		defer func() { seen = append(seen, g.Members...) }()
		if g.Number == 1 || !r.events || g.Rank != 0 {
			return
		}
		for _, id := range g.Left {
			launch.Emit(r.stdout, launch.Event{Event: launch.Member, Role: "worker", Rank: id, Change: "died", Steps: g.Step, Live: len(g.Members)})
		}
		for _, id := range g.Joined {
			change := "joined"
			if slices.Contains(seen, id) {
				change = "rejoined"
			}
			launch.Emit(r.stdout, launch.Event{Event: launch.Member, Role: "worker", Rank: id, Change: change, Steps: g.Step, Live: len(g.Members)})
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
	if r.eval {
		var err error
		if ev, err = worker.EvaluateShard(ctx, out.Comm, r.model, out.Params, r.test, 1000); err != nil {
			return err
		}
	}
	if out.Rank == 0 && r.save != "" {
		if err := r.saveParams(out.Params, ev); err != nil {
			return err
		}
	}
	r.log.Info("elastic ring done", "component", "elastic", "generations", out.Generations, "rank", out.Rank, "size", out.Size)
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
