package testcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/worker"
	"github.com/shoalml/shoal/worker/psclient"
)

// ScenarioConfig configures a Scenario: the shards and the workers' run.
type ScenarioConfig struct {
	// Mode is the shards' mode (consistency.Async, Sync or SSP);
	// Staleness is SSP's bound and BackupWorkers sync's.
	Mode          consistency.Mode
	Staleness     int64
	BackupWorkers int
	// Shards and Workers count the parameter-server shards and the
	// workers (ranks 0..Workers-1).
	Shards, Workers int
	// Steps is the length of every worker's run, counted from the run's
	// start (a restarted worker runs the rest of it); Batch is each
	// worker's batch size. The data set holds one epoch of Steps steps.
	Steps int64
	Batch int
}

// DefaultScenarioConfig is sync, two shards, three workers of eight steps
// of batch 4.
func DefaultScenarioConfig() ScenarioConfig {
	return ScenarioConfig{Mode: consistency.Sync, Shards: 2, Workers: 3, Steps: 8, Batch: 4}
}

func (c ScenarioConfig) validate() error {
	switch {
	case !c.Mode.UsesServers():
		return fmt.Errorf("scenario: mode %s: want %s, %s or %s", c.Mode, consistency.Async, consistency.Sync, consistency.SSP)
	case c.Shards < 1 || c.Workers < 1:
		return fmt.Errorf("scenario: %d shards and %d workers: want at least one of each", c.Shards, c.Workers)
	case c.Steps < 1 || c.Batch < 1:
		return fmt.Errorf("scenario: %d steps of batch %d: want at least 1 of each", c.Steps, c.Batch)
	}
	return nil
}

// scenarioSpec is the model every scenario trains: an MLP of 172
// parameters on 4×4 inputs of 4 classes, so that a step costs
// microseconds and the gRPC calls are the run.
func scenarioSpec() nn.Spec {
	return nn.Spec{Arch: "mlp", Hidden: []int{8}, Channels: 1, Height: 4, Width: 4, Classes: 4}
}

// Scenario is a training run in one process: Shards ps.Server cores on
// bufconn, Workers worker.Workers that reach them through client.Client
// and psclient, and membership from an in-memory source: a cluster.Tracker
// that the Scenario feeds, whose Views go to a cluster.FollowWorkers per
// shard. Tests inject faults between the steps: Kill, Restart, Stall, and
// the shards' LosePush.
//
// Its methods are called from the test's goroutine. Each one that waits
// is bounded by its ctx and fails the test when ctx ends first. The
// workers and the membership followers stop when the test ends.
type Scenario struct {
	t       testing.TB
	cfg     ScenarioConfig
	cluster *Cluster
	cores   []*ps.Server
	train   data.Dataset
	fp      uint64

	// Membership: tracker turns events into views; views[s] feeds shard
	// s's FollowWorkers, which reports each change it applied on
	// applied[s]; reports[s] are those reports, in order.
	tracker *cluster.Tracker
	views   []chan cluster.View
	applied []chan cluster.Report
	reports [][]cluster.Report
	follow  sync.WaitGroup

	procs map[int]*proc

	// stalls are the pushes to hold, by rank and step; the workers'
	// goroutines take them.
	mu     sync.Mutex
	stalls map[workerStep]*Stall
}

// proc is one run of one worker: a process, until it is killed.
type proc struct {
	cancel context.CancelFunc
	// done is closed when the run is over; res and err are then set.
	done   chan struct{}
	res    worker.Result
	err    error
	killed bool
}

// NewScenario starts the shards of cfg and their membership followers,
// with every shard a member and no worker yet (StartAll starts them).
func NewScenario(t testing.TB, cfg ScenarioConfig) *Scenario {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	model, err := nn.New(scenarioSpec(), nn.NewCPU())
	if err != nil {
		t.Fatal(err)
	}
	initial := make([]float32, model.Layout().Size())
	model.Init(initial, 1)
	dcfg := data.SyntheticConfig{Train: cfg.Workers * cfg.Batch * int(cfg.Steps), Test: 1, C: 1, H: 4, W: 4, Classes: 4, Seed: 1, Noise: 1}
	train, _, err := data.Synthetic(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	pcfg := ps.DefaultConfig()
	pcfg.Mode, pcfg.Staleness, pcfg.Workers, pcfg.BackupWorkers = cfg.Mode, cfg.Staleness, cfg.Workers, cfg.BackupWorkers
	pcfg.Optimizer = optim.DefaultConfig()
	pcfg.Optimizer.Algorithm, pcfg.Optimizer.LR = optim.SGD, 0.1
	cores := CoresWith(t, pcfg, model.Layout(), initial, cfg.Shards, 16)
	s := &Scenario{
		t: t, cfg: cfg, cluster: Start(t, cores...), cores: cores, train: train,
		fp:      cluster.Fingerprint(fmt.Sprint(model.Layout())),
		tracker: cluster.NewTracker(), reports: make([][]cluster.Report, len(cores)),
		procs: map[int]*proc{}, stalls: map[workerStep]*Stall{},
	}
	for _, core := range cores {
		views, applied := make(chan cluster.View), make(chan cluster.Report, 16)
		s.views, s.applied = append(s.views, views), append(s.applied, applied)
		s.follow.Go(func() {
			cluster.FollowWorkers(views, s.fp, core, func(r cluster.Report) { applied <- r })
		})
	}
	// Runs before Start's Close: the workers stop before the servers.
	t.Cleanup(s.close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range cores {
		s.feed(ctx, cluster.Event{Kind: cluster.EventJoin, Name: fmt.Sprintf("ps-%d", i), Addr: "bufconn",
			Meta: cluster.Meta{Role: cluster.RolePS, Rank: i, ModelFingerprint: s.fp, PlanVersion: uint64(shard.Version)}})
	}
	return s
}

// close stops every worker and the membership followers.
func (s *Scenario) close() {
	for _, p := range s.procs {
		p.cancel()
		<-p.done
	}
	for _, v := range s.views {
		close(v)
	}
	s.follow.Wait()
}

// Cluster is the shards' servers (LosePush, Await).
func (s *Scenario) Cluster() *Cluster { return s.cluster }

// Cores are the shards, in shard order.
func (s *Scenario) Cores() []*ps.Server { return s.cores }

// Reports are the membership changes shard applied, in order.
func (s *Scenario) Reports(shard int) []cluster.Report { return slices.Clone(s.reports[shard]) }

// StartAll starts every worker of a new run.
func (s *Scenario) StartAll(ctx context.Context) {
	s.t.Helper()
	for r := range s.cfg.Workers {
		s.start(ctx, r)
	}
}

// Restart starts a killed worker again, as a new process would: it joins
// the membership (a rejoin in the Tracker, applied by every shard before
// Restart goes on), asks the shards where to begin (client.JoinWorker),
// and runs the rest of the run from there (worker.Config.StartStep). It
// returns that step.
func (s *Scenario) Restart(ctx context.Context, rank int) int64 {
	s.t.Helper()
	if p := s.procs[rank]; p == nil || !p.killed {
		s.t.Fatalf("scenario: restart of worker %d, which was not killed", rank)
	}
	return s.start(ctx, rank)
}

// start runs worker rank in a goroutine of its own and returns the step
// it begins at.
func (s *Scenario) start(ctx context.Context, rank int) int64 {
	s.t.Helper()
	if p := s.procs[rank]; p != nil && !p.killed {
		s.t.Fatalf("scenario: start of worker %d, which is running or ran to its end", rank)
	}
	s.feed(ctx, cluster.Event{Kind: cluster.EventJoin, Name: workerName(rank), Addr: "bufconn",
		Meta: cluster.Meta{Role: cluster.RoleWorker, Rank: rank, ModelFingerprint: s.fp, PlanVersion: uint64(shard.Version)}})
	w, start, err := s.newWorker(ctx, rank)
	if err != nil {
		s.t.Fatalf("scenario: worker %d: %v", rank, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	p := &proc{cancel: cancel, done: make(chan struct{})}
	s.procs[rank] = p
	go func() {
		defer close(p.done)
		p.res, p.err = w.run(wctx)
	}()
	return start
}

// scenarioWorker is a worker with its own connections, as a process has.
type scenarioWorker struct {
	w  *worker.Worker
	cl *client.Client
}

// newWorker dials the shards, joins them and builds worker rank's Worker,
// beginning where they say.
func (s *Scenario) newWorker(ctx context.Context, rank int) (*scenarioWorker, int64, error) {
	// Retries back off from 1 ms: a lost push is sent again at once.
	cl, err := client.Dial(ctx, s.cluster.Addrs(), client.WithDialOptions(s.cluster.DialOption()), client.WithRetry(8, time.Millisecond))
	if err != nil {
		return nil, 0, err
	}
	start, err := cl.JoinWorker(ctx, int64(rank))
	if err != nil {
		return nil, 0, errors.Join(err, cl.Close())
	}
	model, err := nn.New(scenarioSpec(), nn.NewCPU())
	if err != nil {
		return nil, 0, errors.Join(err, cl.Close())
	}
	servers := &gate{next: psclient.New(cl), s: s, rank: int64(rank)}
	var st worker.Strategy = worker.NewSync(servers, int64(rank), s.cfg.Shards)
	if s.cfg.Mode != consistency.Sync {
		if st, err = worker.NewAsync(servers, model.Layout().Size(), s.cfg.Shards, worker.AsyncConfig{WorkerID: int64(rank)}); err != nil {
			return nil, 0, errors.Join(err, cl.Close())
		}
	}
	w, err := worker.New(worker.Config{Rank: rank, WorldSize: s.cfg.Workers, Batch: s.cfg.Batch, Steps: s.cfg.Steps, StartStep: start, Seed: 1},
		model, s.train, st)
	if err != nil {
		return nil, 0, errors.Join(err, cl.Close())
	}
	return &scenarioWorker{w: w, cl: cl}, start, nil
}

// run trains until the run's end or ctx ends, then closes what the
// worker holds.
func (w *scenarioWorker) run(ctx context.Context) (worker.Result, error) {
	res, err := w.w.Run(ctx)
	return res, errors.Join(err, w.w.Close(), w.cl.Close())
}

func workerName(rank int) string { return fmt.Sprintf("worker-%d", rank) }

// Kill ends worker rank as a crash would: its context is canceled (a call
// under way is abandoned), its connections close, and then failure
// detection declares it dead: every shard has applied the death
// (ps.Server.WorkerGone) when Kill returns. A worker that already ran to
// its end is declared dead all the same.
func (s *Scenario) Kill(ctx context.Context, rank int) {
	s.t.Helper()
	p := s.procs[rank]
	if p == nil || p.killed {
		s.t.Fatalf("scenario: kill of worker %d, which is not running", rank)
	}
	p.cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		s.t.Fatalf("scenario: worker %d did not stop after its context was canceled: %v", rank, ctx.Err())
	}
	p.killed = true
	s.feed(ctx, cluster.Event{Kind: cluster.EventDead, Name: workerName(rank)})
}

// Wait waits until worker rank's run (the last, if it was restarted) is
// over and returns its result and error.
func (s *Scenario) Wait(ctx context.Context, rank int) (worker.Result, error) {
	s.t.Helper()
	p := s.procs[rank]
	if p == nil {
		s.t.Fatalf("scenario: wait for worker %d, which never started", rank)
	}
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		s.t.Fatalf("scenario: waiting for worker %d: %v", rank, ctx.Err())
		return worker.Result{}, ctx.Err()
	}
}

// Await waits until cond holds: it checks it now and whenever a shard
// answers a call (Cluster.Await). what names the state in the failure.
func (s *Scenario) Await(ctx context.Context, what string, cond func() bool) {
	s.t.Helper()
	if err := s.cluster.Await(ctx, cond); err != nil {
		s.t.Fatalf("scenario: waiting until %s: %v", what, err)
	}
}

// feed steps the Tracker with ev and hands the view to every shard's
// FollowWorkers, then waits until each has applied the view's worker
// changes.
func (s *Scenario) feed(ctx context.Context, ev cluster.Event) {
	s.t.Helper()
	v, changed, err := s.tracker.Step(ev)
	if err != nil {
		s.t.Fatal(err)
	}
	if !changed {
		return
	}
	want := len(cluster.Changes(v, cluster.RoleWorker, s.fp))
	for _, views := range s.views {
		select {
		case views <- cloneView(v): // each receiver owns its view
		case <-ctx.Done():
			s.t.Fatalf("scenario: handing view %d to the shards: %v", v.Version, ctx.Err())
		}
	}
	for i, applied := range s.applied {
		for range want {
			select {
			case r := <-applied:
				s.reports[i] = append(s.reports[i], r)
			case <-ctx.Done():
				s.t.Fatalf("scenario: shard %d applying view %d: %v", i, v.Version, ctx.Err())
			}
		}
	}
}

func cloneView(v cluster.View) cluster.View {
	v.Members, v.Joined, v.Rejoined = slices.Clone(v.Members), slices.Clone(v.Joined), slices.Clone(v.Rejoined)
	v.Updated, v.Left, v.Died = slices.Clone(v.Updated), slices.Clone(v.Left), slices.Clone(v.Died)
	return v
}

// Stall is a push held back: a worker stalled (a long pause, a slow
// disk), still a member.
type Stall struct {
	reached, release chan struct{}
	once             sync.Once
}

// Stall makes worker rank (this run or a later one) block before it
// pushes step, until Release or until its context ends. The worker stays
// a member: nothing tells the shards.
func (s *Scenario) Stall(rank int, step int64) *Stall {
	st := &Stall{reached: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalls[workerStep{int64(rank), step}] = st
	return st
}

// Reached is closed once the worker blocks before the push.
func (st *Stall) Reached() <-chan struct{} { return st.reached }

// Release lets the push go; calling it again does nothing.
func (st *Stall) Release() { st.once.Do(func() { close(st.release) }) }

// hold blocks worker rank before its push of step, if a Stall says so,
// until the Stall is released or ctx ends.
func (s *Scenario) hold(ctx context.Context, rank, step int64) error {
	s.mu.Lock()
	st := s.stalls[workerStep{rank, step}]
	delete(s.stalls, workerStep{rank, step})
	s.mu.Unlock()
	if st == nil {
		return nil
	}
	close(st.reached)
	select {
	case <-st.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gate is a worker's ParameterServers with its pushes held where a Stall
// says. It is called as ParameterServers is: concurrently only as the
// strategies do.
type gate struct {
	next worker.ParameterServers
	s    *Scenario
	rank int64
}

var _ worker.ParameterServers = (*gate)(nil)

func (g *gate) Pull(ctx context.Context, args worker.PullArgs, dst []float32) ([]int64, error) {
	return g.next.Pull(ctx, args, dst)
}

func (g *gate) Push(ctx context.Context, args worker.PushArgs) (worker.PushResult, error) {
	if err := g.s.hold(ctx, g.rank, args.Step); err != nil {
		return worker.PushResult{}, err
	}
	return g.next.Push(ctx, args)
}

func (g *gate) PushPull(ctx context.Context, args worker.PushPullArgs) (worker.PushPullResult, error) {
	if err := g.s.hold(ctx, g.rank, args.Step); err != nil {
		return worker.PushPullResult{}, err
	}
	return g.next.PushPull(ctx, args)
}
