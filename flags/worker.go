package flags

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/elastic"
	"github.com/shoalml/shoal/internal/cpubind"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/node"
	"github.com/shoalml/shoal/worker"
)

// Calls are a worker's calls to the parameter servers, or its ring's
// collective calls: their deadline and, in the PS modes, the lanes of a
// push-pull. shoal worker and shoal train (for its workers) take them.
type Calls struct {
	Lanes       int // --lanes: connections per server for a push-pull; 0 auto
	CallTimeout time.Duration
}

// Register adds the flags to fs.
func (c *Calls) Register(fs *flag.FlagSet) {
	fs.DurationVar(&c.CallTimeout, "call-timeout", 60*time.Second, SectionCommunication.Usage("deadline of each pull and push, or each collective call (ring)"))
	fs.IntVar(&c.Lanes, "lanes", 0, SectionCommunication.Usage(fmt.Sprintf("PS modes: split each push-pull to a server over up to this many connections (at most one per chunk of the server's; 1..%d); 0: %d where this machine has %d or more CPUs, else 1",
		client.MaxLanes, client.AutoLanes(client.ManyCores), client.ManyCores)))
}

// CheckLanes checks --lanes: 1..client.MaxLanes, or 0 for
// client.AutoLanes.
func CheckLanes(n int) error {
	if n < 0 || n > client.MaxLanes {
		return fmt.Errorf("--lanes %d: want 1..%d connections per server, or 0 for %d where this machine has %d or more CPUs, else 1",
			n, client.MaxLanes, client.AutoLanes(client.ManyCores), client.ManyCores)
	}
	return nil
}

// CheckCallTimeout checks --call-timeout.
func (c *Calls) CheckCallTimeout() error {
	if c.CallTimeout <= 0 {
		return fmt.Errorf("--call-timeout %v: want > 0 (every call has a deadline)", c.CallTimeout)
	}
	return nil
}

// Worker is the contract of one `shoal worker`: every flag it takes,
// what Config builds from them (its place in the job, its model and data)
// and, for a launcher, Args.
type Worker struct {
	Model    Model
	Data     Data
	Train    Train
	Log      Log
	Opt      Opt
	Ring     Ring
	NIC      NIC
	Stats    Stats
	Gossip   Gossip
	Sec      Sec
	Metrics  Metrics
	Timeline Timeline
	Device   Device
	Ranks    Rank // --rank, --world-size, --local-rank, which Config reads into the identity
	Calls    Calls
	Save     string
	// RecordPushes is --record-pushes: the file the worker's pushes go to.
	RecordPushes string
	Threads      int
	CPUs         string // --cpus: the CPUs to bind to
	Servers      string
	// HostMaster is --host-master: the rendezvous of the worker's host
	// group (--host-aggregate).
	HostMaster string
	Events     bool
	Eval       bool
	Connect    time.Duration
	RetryFor   time.Duration

	boundTo     string // the CPUs it may run on after binding; "" unbound
	id          cluster.Identity
	log         *slog.Logger
	model       nn.Model
	closeModel  func() // frees the model's device
	train, test data.Dataset
}

// DefaultWorker is a worker with every flag at its default, for a
// launcher to fill and render (Args).
func DefaultWorker() *Worker {
	w := &Worker{}
	w.Register(flag.NewFlagSet("worker", flag.ContinueOnError))
	return w
}

// Register registers shoal worker's flags: its own, then the groups it
// shares with train and the server (the help lists them by Section).
func (w *Worker) Register(fs *flag.FlagSet) {
	fs.StringVar(&w.Save, "save", "", SectionOutput.Usage("ring: rank 0 writes the final parameters to this .safetensors file"))
	fs.StringVar(&w.RecordPushes, "record-pushes", "", SectionOutput.Usage("async, ssp: write every push's step, clock and staleness, as shard 0 saw them, to this JSON file at the end (shoal bench emulate --replay replays the run from the workers' files)"))
	fs.IntVar(&w.Threads, "threads", runtime.NumCPU(), SectionCompute.Usage("GEMM threads of this worker (shoal train gives each of its workers its share of the cores)"))
	fs.StringVar(&w.CPUs, "cpus", "", SectionCompute.Usage("bind this worker's threads to these CPUs, a list such as 0-3,8 (Linux; shoal train --bind gives each of its workers cores of its own)"))
	fs.StringVar(&w.Servers, "servers", "localhost:7070", SectionJob.Usage("parameter server addresses, comma-separated, in shard order"))
	fs.StringVar(&w.HostMaster, "host-master", "", SectionPS.Usage("with --host-aggregate: HOST:PORT of the rendezvous of this worker's host group, where the host's first rank (rank / --workers-per-host * --workers-per-host) listens"))
	w.Ranks.Register(fs)
	fs.BoolVar(&w.Events, "events", false, SectionOutput.Usage("write JSON events on stdout for a launcher"))
	fs.BoolVar(&w.Eval, "eval", true, SectionModel.Usage("evaluate the final weights on the test set (rank 0; in ring mode every rank its share)"))
	fs.DurationVar(&w.Connect, "connect-timeout", 60*time.Second, SectionCommunication.Usage("how long to wait for the servers to answer"))
	fs.DurationVar(&w.RetryFor, "retry-for", 60*time.Second, SectionCommunication.Usage("how long a pull or push that finds a server unavailable (restarting, or cut off) is tried again before the worker gives up"))
	w.Calls.Register(fs)
	w.NIC.Register(fs)
	w.Stats.Register(fs)
	w.Gossip.Register(fs)
	w.Sec.Register(fs)
	w.Metrics.Register(fs)
	w.Timeline.Register(fs)
	w.Device.Register(fs)
	w.Model.Register(fs)
	w.Data.Register(fs)
	w.Train.Register(fs)
	w.Opt.Register(fs, "none")
	w.Ring.Register(fs)
	w.Log.Register(fs, "warn")
}

// Args is the worker as a child's argv (after the command name): every
// flag, with w's value.
func (w *Worker) Args() []string {
	var g Worker
	return render(func(fs *flag.FlagSet) { g.Register(fs); g = *w })
}

// Config checks the flags, finds the worker's rank and world size, binds
// it to --cpus, loads its data and builds its model where --device
// places it: the worker process's config, with the function that frees
// the model (nil on error). Outside a launcher (no --events) it says on
// stderr where it computes; stderr also takes the log. The caller sets
// the config's Progress.
func (w *Worker) Config(stderr io.Writer) (cfg node.WorkerConfig, closeModel func(), err error) {
	if err := w.check(); err != nil {
		return cfg, nil, err
	}
	if w.log, err = w.Log.Logger(stderr); err != nil {
		return cfg, nil, err
	}
	w.Sec.WarnExposed(w.log)
	if w.id, err = w.Ranks.Identity(); err != nil {
		return cfg, nil, err
	}
	if err := w.bind(); err != nil {
		return cfg, nil, err
	}
	for _, v := range []func() error{w.checkFiles, w.loadData} {
		if err := v(); err != nil {
			return cfg, nil, err
		}
	}
	if err := w.buildModel(stderr); err != nil {
		return cfg, nil, err
	}
	if cfg, err = w.config(); err != nil {
		w.closeModel()
		return cfg, nil, err
	}
	return cfg, w.closeModel, nil
}

// check checks the flags that need nothing loaded.
func (w *Worker) check() error {
	if w.RetryFor < 0 {
		return fmt.Errorf("--retry-for %v: want >= 0 (0: never try a call again)", w.RetryFor)
	}
	if w.Connect <= 0 {
		return fmt.Errorf("--connect-timeout %v: want > 0", w.Connect)
	}
	if err := CheckLanes(w.Calls.Lanes); err != nil {
		return err
	}
	for _, v := range []func() error{w.Calls.CheckCallTimeout, w.Train.Validate, w.NIC.Validate, w.Stats.Validate, w.Gossip.Validate, w.Ring.Validate, w.Sec.Load} {
		if err := v(); err != nil {
			return err
		}
	}
	if err := w.Ring.CheckResident(w.Train.Mode); err != nil {
		return err
	}
	if w.Train.HostAggregate && (w.Train.WorkersPerHost < 1 || w.HostMaster == "") {
		return fmt.Errorf("--host-aggregate: needs --workers-per-host N (the workers of a host, ranks in a row) and --host-master HOST:PORT (where the host's first rank listens), have %d and %q", w.Train.WorkersPerHost, w.HostMaster)
	}
	return nil
}

// bind checks --threads and binds the worker to --cpus, if set, before
// the data and the model: the threads started from here on (OpenBLAS's
// among them) inherit the binding. What it reports is its affinity read
// back, not the flag.
func (w *Worker) bind() error {
	if w.Threads < 1 {
		return fmt.Errorf("--threads %d: want >= 1", w.Threads)
	}
	if w.CPUs == "" {
		return nil
	}
	cpus, err := cpubind.Parse(w.CPUs)
	if err == nil {
		err = cpubind.Bind(cpus)
	}
	if err == nil {
		cpus, err = cpubind.Allowed()
	}
	if err != nil {
		return fmt.Errorf("--cpus %s: %w", w.CPUs, err)
	}
	w.boundTo = cpubind.Format(cpus)
	return nil
}

// checkFiles checks --save and --record-pushes.
func (w *Worker) checkFiles() error {
	if w.Save != "" && w.Train.Mode != consistency.Ring {
		// It wrote nothing and said nothing: the weights are the servers'.
		return fmt.Errorf("--save %s: --mode %s keeps the weights on the parameter servers, and a worker has none to save: use shoal train --save, or the shards' --checkpoint-dir (a worker saves with --mode ring)",
			w.Save, w.Train.Mode)
	}
	if err := WritableFile("--save", w.Save); err != nil {
		return err
	}
	if err := Recordable(w.RecordPushes, w.Train.Mode); err != nil {
		return err
	}
	return WritableFile("--record-pushes", w.RecordPushes)
}

// loadData loads the training and test sets.
func (w *Worker) loadData() (err error) {
	w.train, w.test, err = w.Data.Load(w.Model.Seed)
	return err
}

// buildModel builds the worker's model where --device places it, logs
// where and, outside shoal train, says it on stderr.
func (w *Worker) buildModel(stderr io.Writer) error {
	pm, err := w.Device.Build(&w.Model, w.id.LocalRank, w.Threads)
	if err != nil {
		return fmt.Errorf("worker %d: %w", w.id.Rank, err)
	}
	w.model, w.closeModel = pm.Model, pm.Close
	if dm, ok := pm.Model.(*nn.DeviceModel); ok {
		dm.SetGraphs(w.Device.Graphs, w.log) // a capture that fails is said once
	}
	w.log.Info("compute device", "component", "worker", "rank", w.id.Rank, "local_rank", w.id.LocalRank, "device", pm.Where, "precision", w.Device.Precision.String(), "why", pm.Why)
	if !w.Events {
		// Said once at start to the person or launcher that ran it;
		// under shoal train (--events), train's header says it.
		where := pm.Where
		if w.Device.Precision.Half() {
			where += " in " + w.Device.Precision.String()
		}
		fmt.Fprintf(stderr, "shoal worker %d: computing on %s (%s)\n", w.id.Rank, where, pm.Why)
	}
	return nil
}

// config is the worker process's config from the flags.
func (w *Worker) config() (node.WorkerConfig, error) {
	t := w.Train
	cfg := node.WorkerConfig{ID: w.id, Logger: w.log, Model: w.model, ModelName: DescribeModel(w.model), Train: w.train, Test: w.test, Seed: w.Model.Seed,
		Loop: node.Loop{Mode: t.Mode, TakeServersMode: !t.ModeGiven, Batch: t.Batch, Epochs: t.Epochs, Steps: t.Steps, BackwardPasses: t.BackwardPasses, PushEvery: t.PushEvery, FetchEvery: t.FetchEvery,
			Overlap: t.Overlap, ProgressEvery: t.ProgressEvery, LocalSteps: t.LocalSteps.H,
			Fragments: t.LocalSteps.F, FragmentOverlap: t.LocalSteps.OverlapSteps(), FragmentMix: t.LocalSteps.Mix},
		Stats: node.Stats{Times: w.Stats.Times, EvalEvery: w.Stats.EvalEvery, StopAt: w.Stats.StopAt}, Stall: w.Log.Stall,
		Events: w.Events, Eval: w.Eval, CPUs: w.boundTo, CallTimeout: w.Calls.CallTimeout, Creds: w.Sec.Creds, NIC: w.NIC.Config(), GossipBind: w.Gossip.BindAddr(), MetricsAddr: w.Metrics.Addr,
		PS: node.PSConfig{Servers: strings.Split(w.Servers, ","), Connect: w.Connect, RetryFor: w.RetryFor, Lanes: w.Calls.Lanes, AutoLanes: client.AutoLanes(runtime.NumCPU()), RecordPushes: w.RecordPushes}}
	if w.Gossip.On() {
		cfg.Gossip = w.Gossip.Start
	}
	var err error
	if t.Mode != consistency.Ring {
		if t.HostAggregate {
			cfg.PS.Host = node.HostConfig{PerHost: t.WorkersPerHost, Master: w.HostMaster, SharedMemory: true}
		}
		if t.LocalSteps.H > 0 {
			// The inner optimizer: the worker steps it itself, as a ring does.
			if cfg.PS.Inner, err = w.Opt.Config(); err != nil {
				return cfg, err
			}
		}
		cfg.PS.Encoding, err = w.Ring.PushEncoding(t.LocalSteps.H)
		return cfg, err
	}
	cfg.Ring, err = w.ringConfig()
	return cfg, err
}

// ringConfig is the ring's config from the flags, with the optimizer
// every rank runs itself.
func (w *Worker) ringConfig() (node.RingConfig, error) {
	r := w.Ring
	ocfg, err := w.Opt.Config()
	if err != nil {
		return node.RingConfig{}, err
	}
	if r.ScaleLR {
		ocfg = worker.ScaleWarmup(ocfg, w.id.WorldSize, w.train.Len(), w.Train.Batch*w.Train.BackwardPasses)
	}
	comp, err := r.CompressionMode()
	if err != nil {
		return node.RingConfig{}, err
	}
	alg, err := r.AllreduceAlgorithm()
	if err != nil {
		return node.RingConfig{}, err
	}
	cfg := node.RingConfig{Listen: r.Listen, JobID: r.JobID, ReduceOp: r.ReduceOp, Compression: comp, Algorithm: alg, DesyncEvery: r.DesyncEvery, SharedMemory: r.SharedMemory,
		FusionBytes: r.FusionBytes, DeviceResident: r.DeviceResident, Optimizer: ocfg, ScaleLR: r.ScaleLR, Elastic: r.Elastic, MinWorkers: r.MinWorkers, RejoinTimeout: r.RejoinTimeout, Save: w.Save}
	if r.Elastic && w.Gossip.KeyFile != "" {
		// The members that hold the gossip key sign their re-forms with
		// it; the Elastic service refuses what they did not send.
		key, err := cluster.ReadGossipKey(w.Gossip.KeyFile)
		if err != nil {
			return node.RingConfig{}, fmt.Errorf("--gossip-key-file: %w", err)
		}
		cfg.Secret = elastic.Secret(key)
	}
	if !r.Elastic || !w.Gossip.On() {
		cfg.Master, err = r.MasterAddr()
	}
	return cfg, err
}
