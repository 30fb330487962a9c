package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/collective/collnet"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/secure"
	"github.com/shoalml/shoal/timeline"
	"github.com/shoalml/shoal/worker"
)

// ringFlags are the flags of ring-allreduce training.
type ringFlags struct {
	master       string
	listen       string
	reduceOp     string
	compression  string
	desyncEvery  int64
	scaleLR      bool
	sharedMemory bool
	jobID        string
	fusionBytes  int
	// The elastic ring (gossip on).
	elastic       bool
	minWorkers    int
	rejoinTimeout time.Duration
}

func (r *ringFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.master, "master", "", "ring: rank 0's rendezvous address HOST:PORT (default: $MASTER_ADDR:$MASTER_PORT); rank 0 listens there")
	fs.StringVar(&r.listen, "data-listen", "", "ring: address of this rank's data plane (default: an ephemeral port on the address that reaches the master)")
	fs.StringVar(&r.reduceOp, "reduce-op", "average", "ring: how gradients combine: average, sum or adasum")
	fs.StringVar(&r.compression, "compression", "none", "gradients on the wire (allreduce and PS pushes) as none (float32), fp16 or bf16; sums stay float32")
	fs.Int64Var(&r.desyncEvery, "desync-every", 100, "ring: compare a hash of every rank's parameters every N steps (0: never)")
	fs.BoolVar(&r.scaleLR, "scale-lr", false, "ring: multiply the learning rate by the world size, warming up over the first epoch")
	fs.BoolVar(&r.sharedMemory, "shared-memory", true, "ring: use shared memory between ranks on the same host")
	fs.StringVar(&r.jobID, "job-id", "shoal", "ring: a name every rank of one job shares")
	fs.BoolVar(&r.elastic, "elastic", true, "ring: with gossip on (--gossip-addr or --join), re-form the ring when a rank dies or joins instead of ending the run")
	fs.IntVar(&r.minWorkers, "min-workers", 1, "elastic ring: the fewest ranks it goes on with; below it the job waits --rejoin-timeout for ranks to join, then stops")
	fs.DurationVar(&r.rejoinTimeout, "rejoin-timeout", 60*time.Second, "elastic ring: how long a re-form may take (a short ring waits this long for ranks to join)")
	fs.IntVar(&r.fusionBytes, "fusion-bytes", 64<<10, "ring: allreduce gradients in buckets of at least this many bytes while backward runs (0: one allreduce after backward); average and sum only")
}

func (r *ringFlags) args() []string {
	return []string{"--reduce-op", r.reduceOp, "--compression", r.compression, "--desync-every", strconv.FormatInt(r.desyncEvery, 10),
		"--scale-lr=" + strconv.FormatBool(r.scaleLR), "--shared-memory=" + strconv.FormatBool(r.sharedMemory), "--job-id", r.jobID,
		"--fusion-bytes", strconv.Itoa(r.fusionBytes), "--elastic=" + strconv.FormatBool(r.elastic), "--min-workers", strconv.Itoa(r.minWorkers),
		"--rejoin-timeout", r.rejoinTimeout.String()}
}

// validate checks the elastic ring's flags.
func (r *ringFlags) validate() error {
	if r.minWorkers < 1 {
		return fmt.Errorf("--min-workers %d: want >= 1", r.minWorkers)
	}
	if r.rejoinTimeout <= 0 {
		return fmt.Errorf("--rejoin-timeout %v: want > 0", r.rejoinTimeout)
	}
	return nil
}

func (r *ringFlags) compressionMode() (collective.Compression, error) {
	c, err := collective.ParseCompression(r.compression)
	if err != nil {
		return 0, fmt.Errorf("--compression: %w", err)
	}
	return c, nil
}

// pushEncoding is --compression for parameter-server pushes.
func (r *ringFlags) pushEncoding() (pb.Encoding, error) {
	c, err := r.compressionMode()
	switch c {
	case collective.Float16:
		return pb.Encoding_FLOAT16, err
	case collective.BFloat16:
		return pb.Encoding_BFLOAT16, err
	}
	return pb.Encoding_FLOAT32, err
}

// masterAddr is --master, else MASTER_ADDR:MASTER_PORT (torchrun's).
func (r *ringFlags) masterAddr() (string, error) {
	if r.master != "" {
		return r.master, nil
	}
	if a, p := os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"); a != "" && p != "" {
		return a + ":" + p, nil
	}
	return "", fmt.Errorf("--mode ring needs rank 0's address: --master HOST:PORT or MASTER_ADDR and MASTER_PORT")
}

// ringRun is everything a ring worker needs.
type ringRun struct {
	id       cluster.Identity
	cpus     string // the CPUs the rank was bound to (--cpus); "" unbound
	model    nn.Model
	seed     uint64
	ocfg     optim.Config
	train    data.Dataset
	test     data.Dataset
	tf       trainFlags
	rf       ringFlags
	events   bool
	save     string
	timeout  time.Duration
	stdout   io.Writer
	nf       nicFlags
	sf       statFlags
	gf       gossipFlags
	log      *slog.Logger
	eval     bool // evaluate the final weights on the test set
	sec      *secure.Credentials
	mtf      metricsFlags
	stall    time.Duration // --stall-warning
	timeline *timeline.Writer
}

func runRing(ctx context.Context, r ringRun) error {
	if r.rf.elastic && r.gf.on() {
		return runElastic(ctx, r)
	}
	tr, counted, comm, closeRing, err := r.communicator(ctx)
	if err != nil {
		return err
	}
	defer closeRing()
	ring, err := r.strategy(comm)
	if err != nil {
		return err
	}
	wcfg := r.workerConfig()
	steps := launch.StepLog{Counters: func() (int64, int64) { return counted.sent.Load(), counted.received.Load() }}
	r.sf.hooks(&wcfg, &steps, r.id.Rank, r.model, r.test, r.stdout, comm)
	_, stopMetrics, err := r.mtf.workerMetrics(&wcfg, r.id.Rank, metrics.WorkerSources{Bytes: steps.Counters}, r.log, r.stdout, r.events)
	if err != nil {
		return err
	}
	defer stopMetrics()
	stopStalls := watchStalls(&wcfg, r.stall, r.log, ringStalls(func() *countingTransport { return counted }))
	defer stopStalls()
	w, err := worker.New(wcfg, r.model, r.train, ring)
	if err != nil {
		return err
	}
	defer w.Close()
	res, err := w.Run(ctx)
	stopStalls()
	if err != nil {
		return r.failure(tr, err)
	}
	return r.finish(ctx, tr, comm, ring, w.Params(), res, &steps)
}

// communicator joins the ring and makes its collective communicator over
// a transport that counts the bytes; the caller closes the ring.
func (r ringRun) communicator(ctx context.Context) (collective.Transport, *countingTransport, *collective.Communicator, func(), error) {
	comp, err := r.rf.compressionMode()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tr, closeRing, err := r.join(ctx)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	counted := newCountingTransport(tr)
	// Every collective call gets its own deadline, so a silent peer ends
	// the call instead of hanging it.
	comm, err := collective.New(counted, collective.Config{SegmentBytes: collective.DefaultConfig().SegmentBytes, Compression: comp, CallTimeout: r.timeout})
	if err != nil {
		closeRing()
		return nil, nil, nil, nil, err
	}
	return tr, counted, comm, closeRing, nil
}

// strategy is the ring's training strategy over comm: rank 0 draws the
// initial weights, which the ring broadcasts.
func (r ringRun) strategy(comm *collective.Communicator) (*worker.Ring, error) {
	n := r.model.Layout().Size()
	var initial []float32
	if r.id.Rank == 0 {
		initial = make([]float32, n)
		r.model.Init(initial, r.seed)
	}
	return worker.NewRing(comm, n, worker.RingConfig{Optimizer: r.ocfg, ReduceOp: r.rf.reduceOp, Initial: initial, DesyncEvery: r.rf.desyncEvery,
		FusionBytes: r.rf.fusionBytes, Timeline: r.timeline})
}

// workerConfig is the rank's training loop.
func (r ringRun) workerConfig() worker.Config {
	return worker.Config{Rank: r.id.Rank, WorldSize: r.id.WorldSize, Batch: r.tf.batch, Epochs: r.tf.epochs, Steps: r.tf.steps,
		Seed: r.seed, BackwardPasses: r.tf.backwardPasses, Progress: progressTo(r.stdout, r.events), ProgressEvery: max(r.tf.progressEvery, time.Nanosecond), Timeline: r.timeline}
}

// failure is err as the rank reports it: a failure that names a peer is
// reported to the job's record before the transport closes, and comes
// back naming the first rank that failed, not the neighbour that left
// because of it.
func (r ringRun) failure(tr collective.Transport, err error) error {
	return fmt.Errorf("rank %d of %d: %w", r.id.Rank, r.id.WorldSize, collnet.FirstFailure(tr, err))
}

// finish checks that the ranks' weights agree, evaluates them, saves rank
// 0's and reports the run.
func (r ringRun) finish(ctx context.Context, tr collective.Transport, comm *collective.Communicator, ring *worker.Ring, params []float32, res worker.Result, steps *launch.StepLog) error {
	if err := ring.CheckDesync(ctx, res.Steps, params); err != nil {
		return r.failure(tr, err)
	}
	ev := worker.Evaluation{Accuracy: -1}
	if r.eval {
		var err error
		if ev, err = worker.EvaluateShard(ctx, comm, r.model, params, r.test, 1000); err != nil {
			return r.failure(tr, err)
		}
	}
	if r.id.Rank == 0 && r.save != "" {
		if err := r.saveParams(params, ev); err != nil {
			return err
		}
	}
	r.report(res, ev, steps)
	return nil
}

// saveParams writes the final weights to --save.
func (r *ringRun) saveParams(params []float32, ev worker.Evaluation) error {
	meta := map[string]string{"format": "pt", "shoal_model": describeModel(r.model), "shoal_mode": r.tf.mode.String(), "test_accuracy": fmtFloat(ev.Accuracy)}
	if err := nn.SaveSafetensors(r.save, r.model.Layout(), params, meta); err != nil {
		return fmt.Errorf("--save %s: %w", r.save, err)
	}
	return nil
}

// join connects this rank to the ring through rank 0's rendezvous (rank
// 0 serves it), through the modelled NIC when there is one. The returned
// func closes what join opened.
func (r *ringRun) join(ctx context.Context) (collective.Transport, func(), error) {
	master, err := r.rf.masterAddr()
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	ccfg := collnet.Config{Rank: r.id.Rank, Size: r.id.WorldSize, Master: master, Listen: r.rf.listen, JobID: r.rf.jobID, SharedMemory: r.rf.sharedMemory, Security: r.sec}
	closeNIC := func() {}
	if r.nf.shaped() {
		// Every byte goes through the modelled NIC: no shared memory.
		nic, err := r.nf.nic()
		if err != nil {
			return nil, nil, err
		}
		closeNIC = func() { nic.Close() }
		ccfg.WrapData, ccfg.SharedMemory = nic.Conn, false
	}
	if r.id.Rank == 0 {
		lis, err := collnet.ListenMaster(master)
		if err != nil {
			closeNIC()
			return nil, nil, fmt.Errorf("--master %s: %w", master, err)
		}
		ccfg.MasterListener = lis
		if r.events {
			launch.Emit(r.stdout, launch.Event{Event: launch.Listening, Addr: lis.Addr().String()})
		}
	}
	tr, err := collnet.Connect(cctx, ccfg)
	if err != nil {
		closeNIC()
		return nil, nil, fmt.Errorf("joining the ring of %d through %s: %w", r.id.WorldSize, master, err)
	}
	return tr, func() { tr.Close(); closeNIC() }, nil
}

// report tells the launcher (a done event) or the user how the rank's run
// went.
func (r *ringRun) report(res worker.Result, ev worker.Evaluation, steps *launch.StepLog) {
	if r.events {
		done := launch.Event{Event: launch.Done, Rank: r.id.Rank, Steps: res.Steps, Samples: int(res.Samples), Seconds: res.Elapsed.Seconds(),
			TestLoss: ev.Loss, TestAccuracy: ev.Accuracy, TestSamples: ev.Samples, Stopped: res.Stopped, CPUs: r.cpus}
		if r.sf.stats {
			done.Times = steps
		}
		launch.Emit(r.stdout, done)
		return
	}
	fmt.Fprintf(r.stdout, "rank %d of %d: %d steps, %d samples in %.1fs (%.0f samples/s)\n", r.id.Rank, r.id.WorldSize, res.Steps, res.Samples,
		res.Elapsed.Seconds(), float64(res.Samples)/res.Elapsed.Seconds())
	if r.id.Rank == 0 && r.eval {
		fmt.Fprintf(r.stdout, "test: loss %.4f, accuracy %.2f%% (%d samples of %s)\n", ev.Loss, 100*ev.Accuracy, ev.Samples, r.test.Name())
	}
}
