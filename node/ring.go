package node

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/collective/collnet"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/worker"
)

// ringRun is a worker that trains as a rank of a ring.
type ringRun struct {
	*WorkerConfig
	out io.Writer
}

// runRing trains as one rank of a ring (an elastic one with gossip on),
// with the optimizer every rank runs itself.
func runRing(ctx context.Context, r ringRun) error {
	if r.Ring.Elastic && r.Gossip != nil {
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
	r.Stats.hooks(&wcfg, &steps, r.ID.Rank, r.Model, r.Test, r.out, comm)
	_, stopMetrics, err := workerMetrics(r.MetricsAddr, &wcfg, r.ID.Rank, metrics.WorkerSources{Bytes: steps.Counters}, r.Logger, r.out, r.Events)
	if err != nil {
		return err
	}
	defer stopMetrics()
	stopStalls := watchStalls(&wcfg, r.Stall, r.Logger, ringStalls(func() *countingTransport { return counted }))
	defer stopStalls()
	w, err := worker.New(wcfg, r.Model, r.Train, ring)
	if err != nil {
		return err
	}
	defer w.Close()
	start := time.Now()
	res, err := w.Run(ctx)
	stopStalls()
	if err != nil && !r.Events && signalled(ctx) {
		res.Elapsed = time.Since(start)
		return r.stoppedBySignal(res, w.Params())
	}
	if err != nil {
		return r.failure(tr, err)
	}
	return r.finish(ctx, tr, comm, ring, w.Params(), res, &steps)
}

// signalGrace is how long a rank whose ring failed waits for a signal of
// its own: a stop signalled to the whole step (scancel, Slurm's time
// limit) reaches the ranks one by one, so a rank may first see its
// neighbour leave, and should then stop as signalled, not as failed.
const signalGrace = 5 * time.Second

// signalled says whether ctx (done on SIGINT or SIGTERM) is done, or ends
// within signalGrace.
func signalled(ctx context.Context) bool {
	t := time.NewTimer(signalGrace)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return true
	case <-t.C:
		return false
	}
}

// stoppedBySignal reports a rank that SIGINT or SIGTERM stopped (scancel,
// Slurm at the time limit) and exits cleanly. A static ring has no way to
// agree on a last step once its ranks are signalled one by one, so the
// step in flight is abandoned; a rank's weights stay those of its last
// completed step (the optimizer runs only after the allreduce), and rank 0
// evaluates its own alone, on the whole test set, saying so, rather than
// dying with "context canceled" and no test line.
func (r ringRun) stoppedBySignal(res worker.Result, params []float32) error {
	fmt.Fprintf(r.out, "rank %d of %d: %d steps, %d samples in %.1fs, stopped early by a signal\n", r.ID.Rank, r.ID.WorldSize, res.Steps, res.Samples, res.Elapsed.Seconds())
	if r.ID.Rank != 0 || !r.Eval {
		return nil
	}
	// ctx is done: the evaluation has a deadline of its own.
	ctx, cancel := context.WithTimeout(context.Background(), r.CallTimeout)
	defer cancel()
	ev, err := worker.Evaluate(ctx, r.Model, params, r.Test, 1000)
	if err != nil {
		return fmt.Errorf("rank 0 of %d: evaluating after a signal: %w", r.ID.WorldSize, err)
	}
	fmt.Fprintf(r.out, "test: loss %.4f, accuracy %.2f%% (%d samples of %s; rank 0's weights after step %d, evaluated alone: a signal stopped the ring)\n",
		ev.Loss, 100*ev.Accuracy, ev.Samples, r.Test.Name(), res.Steps)
	return nil
}

// communicator joins the ring and makes its collective communicator over
// a transport that counts the bytes; the caller closes the ring.
func (r ringRun) communicator(ctx context.Context) (collective.Transport, *countingTransport, *collective.Communicator, func(), error) {
	comp := r.Ring.Compression
	tr, closeRing, err := r.join(ctx)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	counted := newCountingTransport(tr)
	// Every collective call gets its own deadline, so a silent peer ends
	// the call instead of hanging it.
	comm, err := collective.New(counted, collective.Config{SegmentBytes: collective.DefaultConfig().SegmentBytes, Compression: comp, CallTimeout: r.CallTimeout, Algorithm: r.Ring.Algorithm})
	if err != nil {
		closeRing()
		return nil, nil, nil, nil, err
	}
	return tr, counted, comm, closeRing, nil
}

// strategy is the ring's training strategy over comm: rank 0 draws the
// initial weights, which the ring broadcasts.
func (r ringRun) strategy(comm *collective.Communicator) (*worker.Ring, error) {
	n := r.Model.Layout().Size()
	var initial []float32
	if r.ID.Rank == 0 {
		initial = make([]float32, n)
		r.Model.Init(initial, r.Seed)
	}
	resident, err := r.resident()
	if err != nil {
		return nil, err
	}
	return worker.NewRing(comm, n, worker.RingConfig{Optimizer: r.Ring.Optimizer, ScaleLR: r.Ring.ScaleLR, ReduceOp: r.Ring.ReduceOp, Initial: initial, DesyncEvery: r.Ring.DesyncEvery,
		FusionBytes: r.Ring.FusionBytes, Timeline: r.Timeline, Resident: resident})
}

// resident is the model as the ring's device-resident step takes it,
// nil without DeviceResident.
func (r ringRun) resident() (worker.ResidentModel, error) {
	if !r.Ring.DeviceResident {
		return nil, nil
	}
	rm, ok := r.Model.(worker.ResidentModel)
	if !ok {
		return nil, fmt.Errorf("--device-resident: model %s computes in host memory (not on a GPU), where its weights are already: use --device cuda, or leave the flag out", r.Model.Name())
	}
	return rm, nil
}

// workerConfig is the rank's training loop.
func (r ringRun) workerConfig() worker.Config {
	return worker.Config{Rank: r.ID.Rank, WorldSize: r.ID.WorldSize, Batch: r.Loop.Batch, Epochs: r.Loop.Epochs, Steps: r.Loop.Steps,
		Seed: r.Seed, BackwardPasses: r.Loop.BackwardPasses, Progress: r.Progress, ProgressEvery: max(r.Loop.ProgressEvery, time.Nanosecond), Timeline: r.Timeline}
}

// failure is err as the rank reports it: a failure that names a peer is
// reported to the job's record before the transport closes, and comes
// back naming the first rank that failed, not the neighbour that left
// because of it.
func (r ringRun) failure(tr collective.Transport, err error) error {
	return fmt.Errorf("rank %d of %d: %w", r.ID.Rank, r.ID.WorldSize, collnet.FirstFailure(tr, err))
}

// finish checks that the ranks' weights agree, evaluates them, saves rank
// 0's and reports the run.
func (r ringRun) finish(ctx context.Context, tr collective.Transport, comm *collective.Communicator, ring *worker.Ring, params []float32, res worker.Result, steps *launch.StepLog) error {
	if err := ring.CheckDesync(ctx, res.Steps, params); err != nil {
		return r.failure(tr, err)
	}
	ev := worker.Evaluation{Accuracy: -1}
	if r.Eval {
		var err error
		if ev, err = worker.EvaluateShard(ctx, comm, r.Model, params, r.Test, 1000); err != nil {
			return r.failure(tr, err)
		}
	}
	if r.ID.Rank == 0 && r.Ring.Save != "" {
		if err := r.saveParams(params, ev); err != nil {
			return err
		}
	}
	r.report(res, ev, steps)
	return nil
}

// saveParams writes the final weights to --save.
func (r *ringRun) saveParams(params []float32, ev worker.Evaluation) error {
	meta := map[string]string{"format": "pt", "shoal_model": r.ModelName, "shoal_mode": r.Loop.Mode.String(), "test_accuracy": strconv.FormatFloat(ev.Accuracy, 'g', -1, 64)}
	if err := nn.SaveSafetensors(r.Ring.Save, r.Model.Layout(), params, meta); err != nil {
		return fmt.Errorf("--save %s: %w", r.Ring.Save, err)
	}
	return nil
}

// join connects this rank to the ring through rank 0's rendezvous (rank
// 0 serves it), through the modelled NIC when there is one. The returned
// func closes what join opened.
func (r *ringRun) join(ctx context.Context) (collective.Transport, func(), error) {
	master := r.Ring.Master
	cctx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	defer cancel()
	ccfg := collnet.Config{Rank: r.ID.Rank, Size: r.ID.WorldSize, Master: master, Listen: r.Ring.Listen, JobID: r.Ring.JobID, SharedMemory: r.Ring.SharedMemory, Security: r.Creds}
	closeNIC := func() {}
	if shaped(r.NIC) {
		// Every byte goes through the modelled NIC: no shared memory.
		nic, err := newNIC(r.NIC)
		if err != nil {
			return nil, nil, err
		}
		closeNIC = func() { nic.Close() }
		ccfg.WrapData, ccfg.SharedMemory = nic.Conn, false
	}
	if r.ID.Rank == 0 {
		lis, err := collnet.ListenMaster(master)
		if err != nil {
			closeNIC()
			return nil, nil, fmt.Errorf("--master %s: %w", master, err)
		}
		ccfg.MasterListener = lis
		if r.Events {
			launch.Emit(r.out, launch.Event{Event: launch.Listening, Addr: lis.Addr().String()})
		}
	}
	tr, err := collnet.Connect(cctx, ccfg)
	if err != nil {
		closeNIC()
		return nil, nil, fmt.Errorf("joining the ring of %d through %s: %w", r.ID.WorldSize, master, err)
	}
	return tr, func() { tr.Close(); closeNIC() }, nil
}

// report tells the launcher (a done event) or the user how the rank's run
// went.
func (r *ringRun) report(res worker.Result, ev worker.Evaluation, steps *launch.StepLog) {
	if r.Events {
		done := launch.Event{Event: launch.Done, Rank: r.ID.Rank, Steps: res.Steps, Samples: int(res.Samples), Seconds: res.Elapsed.Seconds(),
			TestLoss: ev.Loss, TestAccuracy: ev.Accuracy, TestSamples: ev.Samples, Stopped: res.Stopped, CPUs: r.CPUs}
		if r.Stats.Times {
			done.Times = steps
		}
		launch.Emit(r.out, done)
		return
	}
	fmt.Fprintf(r.out, "rank %d of %d: %d steps, %d samples in %.1fs (%.0f samples/s)\n", r.ID.Rank, r.ID.WorldSize, res.Steps, res.Samples,
		res.Elapsed.Seconds(), float64(res.Samples)/res.Elapsed.Seconds())
	if r.ID.Rank == 0 && r.Eval {
		fmt.Fprintf(r.out, "test: loss %.4f, accuracy %.2f%% (%d samples of %s)\n", ev.Loss, 100*ev.Accuracy, ev.Samples, r.Test.Name())
	}
}
