package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/timeline"
)

// Strategy is how a worker obtains weights and hands over gradients; one
// per mode. Its methods are called from the worker's goroutine, one at a
// time, and may block (on the network); they return ctx's error once ctx
// is done.
type Strategy interface {
	// Params makes params hold the weights that step will use.
	Params(ctx context.Context, step int64, params []float32) error
	// Apply hands over the gradient of step (the mean over its batch, or
	// over its BackwardPasses batches). Strategies that update the weights
	// locally (ring) update params; the strategy must not keep params or
	// grads after Apply returns.
	Apply(ctx context.Context, step int64, params, grads []float32) error
	// Finish sends whatever is still pending after the last step and
	// waits for what the strategy still has under way. Run calls it once
	// at the end of every run, also one that failed: after Finish the
	// strategy holds nothing of the run.
	Finish(ctx context.Context) error
}

// Config configures a Worker.
type Config struct {
	// Rank and WorldSize place this worker among its peers; the data is
	// sharded by them (PyTorch DistributedSampler semantics).
	Rank, WorldSize int
	// Batch is the per-worker batch size.
	Batch int
	// Epochs to train, unless Steps is set.
	Epochs int
	// Steps, when > 0, is the number of steps to train, overriding Epochs.
	Steps int64
	// StartStep is the step the worker begins at, counted from the run's
	// start: 0 for a new run, and for a worker that joins a run under way
	// (a restart) where the servers say (client.JoinWorker). The data
	// resumes at that step's batch of its epoch; the run still ends after
	// Epochs or Steps.
	StartStep int64
	// Seed drives the data order (the same on every rank).
	Seed uint64
	// BackwardPasses is how many batches' gradients are averaged into
	// each step (Horovod's backward_passes_per_step; default 1).
	BackwardPasses int
	// Prefetch is how many batches the loader prepares ahead (default 2).
	Prefetch int
	// Progress, when set, is called every ProgressEvery (default 250ms) and
	// at the end of each epoch.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// Logger receives events; nil discards them.
	Logger *slog.Logger
	// OnStep, when set, receives where each step's time went, after the
	// step.
	OnStep func(step int64, t StepTimes)
	// Eval, when set, is called after every EvalEvery-th step (default
	// 100) and after the last one, with the step count done and the
	// weights of the last step. Its time is outside every step. An error
	// wrapping ErrStop ends the run there, cleanly (Result.Stopped).
	Eval      func(ctx context.Context, steps int64, params []float32) error
	EvalEvery int64
	// Timeline, when set, records each step's spans on row 0: pull (and
	// the barrier wait the servers reported within it), data, forward
	// and backward (backward alone when the model cannot tell them
	// apart: compute), and push; a ring's strategy records its own.
	Timeline *timeline.Writer
	// Params, when set, is the parameter vector the worker trains in
	// place (elastic training carries one vector across the workers of
	// its generations); it must hold the model's Layout().Size() floats.
	// Nil: the worker allocates its own.
	Params []float32
}

// StepTimes is where one step's time went. Step is the whole step; Data
// is waiting for batches, Compute forward and backward; Wait is how long
// the pull was held before any weight arrived (a sync barrier, the SSP
// bound), Pull the rest of it; Push is the gradient push of the parameter
// server modes, with the next step's weights when they come in the same
// round trip (a push-pull: Pull is then near zero), Reduce the allreduce
// and local update of ring mode. Samples is how many samples the step
// computed gradients on.
type StepTimes struct {
	Step, Data, Compute, Wait, Pull, Push, Reduce time.Duration
	Samples                                       int
}

// DefaultConfig is one worker of one, batch 64, one epoch.
func DefaultConfig() Config {
	return Config{WorldSize: 1, Batch: 64, Epochs: 1, Prefetch: 2, ProgressEvery: 250 * time.Millisecond}
}

func (c Config) validate() error {
	switch {
	case c.WorldSize < 1 || c.Rank < 0 || c.Rank >= c.WorldSize:
		return fmt.Errorf("rank %d of %d: want 0 <= rank < world size", c.Rank, c.WorldSize)
	case c.Batch < 1:
		return fmt.Errorf("batch %d: want >= 1", c.Batch)
	case c.StartStep < 0:
		return fmt.Errorf("start step %d: want >= 0", c.StartStep)
	case c.Steps < 0:
		return fmt.Errorf("steps %d: want >= 0", c.Steps)
	case c.Steps == 0 && c.Epochs < 1:
		return fmt.Errorf("epochs %d: want >= 1 (or steps > 0)", c.Epochs)
	case c.BackwardPasses < 1:
		return fmt.Errorf("backward passes per step %d: want >= 1", c.BackwardPasses)
	case c.EvalEvery < 1:
		return fmt.Errorf("eval every %d steps: want >= 1", c.EvalEvery)
	}
	return nil
}

// Progress reports a worker's position in its epoch.
type Progress struct {
	Rank int
	// Epoch counts from 0; Epochs is the total (for Steps runs, the number
	// of epochs the steps span).
	Epoch, Epochs int
	// Step is the number of steps done in this epoch, of EpochSteps.
	Step, EpochSteps int
	// Samples, LossSum and Correct accumulate over this epoch's steps.
	Samples int
	LossSum float64
	Correct int
	// Elapsed is the time since the epoch started.
	Elapsed time.Duration
	// EpochDone is set on the last report of an epoch.
	EpochDone bool
}

// Loss is the mean training loss over the epoch so far.
func (p Progress) Loss() float64 { return p.LossSum / float64(max(p.Samples, 1)) }

// Accuracy is the training accuracy over the epoch so far.
func (p Progress) Accuracy() float64 { return float64(p.Correct) / float64(max(p.Samples, 1)) }

// ErrStop, wrapped in an error from Config.Eval, ends a run early and
// cleanly: a target was reached.
var ErrStop = errors.New("stop requested")

// ErrDiverged: a step's training loss was NaN or infinite.
var ErrDiverged = errors.New("the model diverged")

// errEpochDone: the epoch had no batch left. It is its own value, never
// wrapped, because an error of the network can wrap io.EOF (a peer that
// closed): only the loader's end of the epoch ends it.
var errEpochDone = errors.New("epoch done")

// ErrRunComplete, from a strategy, says the servers have applied every
// step of the run: there is nothing left for this worker to compute. A
// sync worker with backup workers gets it when its late pushes were
// dropped and it skipped steps: the others' pushes finished the run
// before its own step count ran out, and a step past the end would wait
// for pushes no one sends.
var ErrRunComplete = errors.New("the servers applied every step of the run")

// Result summarises a Run.
type Result struct {
	// Steps is the step the worker reached, counted from the run's start
	// (for a worker that joined late, Config.StartStep plus its own).
	Steps   int64
	Samples int64
	Elapsed time.Duration
	// Stopped says Eval ended the run early with ErrStop.
	Stopped bool
	// Complete says the run ended before this worker's own step count,
	// because the servers had applied every step (ErrRunComplete).
	Complete bool
	// Last is the final progress report (the last epoch's statistics).
	Last Progress
}

// Worker trains one model replica.
type Worker struct {
	cfg      Config
	model    nn.Model
	strategy Strategy
	loader   *data.Loader
	params   []float32
	grads    []float32
	pass     []float32 // one batch's gradient, when BackwardPasses > 1
	log      *slog.Logger
	// What the strategy and model can do, found once in New: waits splits
	// a pull's time; overlap and notifier, when both are set, send
	// gradients during backward; reduces says Apply is an allreduce.
	waits    WaitReporter
	overlap  Overlapper
	notifier nn.GradNotifier
	reduces  bool
	phased   nn.Phased // for the timeline's forward and backward
	syncer   HostSyncer
}

// New returns a worker training model on its shard of train. It allocates
// the parameter and gradient vectors once.
func New(cfg Config, model nn.Model, train data.Dataset, s Strategy) (*Worker, error) {
	if cfg.Prefetch == 0 {
		cfg.Prefetch = 2
	}
	if cfg.ProgressEvery == 0 {
		cfg.ProgressEvery = 250 * time.Millisecond
	}
	if cfg.BackwardPasses == 0 {
		cfg.BackwardPasses = 1
	}
	if cfg.EvalEvery == 0 {
		cfg.EvalEvery = 100
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	c, h, w := train.Shape()
	if c*h*w != model.InputSize() {
		return nil, fmt.Errorf("worker: dataset %s has samples of %d×%d×%d = %d values, model %s takes %d", train.Name(), c, h, w, c*h*w, model.Name(), model.InputSize())
	}
	if train.Classes() > model.Classes() {
		return nil, fmt.Errorf("worker: dataset %s has %d classes, model %s outputs %d", train.Name(), train.Classes(), model.Name(), model.Classes())
	}
	sampler, err := data.NewSampler(train.Len(), cfg.Rank, cfg.WorldSize, cfg.Seed, true)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	loader, err := data.NewLoader(data.LoaderConfig{Batch: cfg.Batch, Depth: cfg.Prefetch}, train, sampler)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := model.Layout().Size()
	params := cfg.Params
	if params == nil {
		params = make([]float32, n)
	} else if len(params) != n {
		loader.Close()
		return nil, fmt.Errorf("worker: Config.Params has %d floats, model %s has %d", len(params), model.Name(), n)
	}
	wk := &Worker{
		cfg: cfg, model: model, strategy: s, loader: loader,
		params: params, grads: make([]float32, n),
		log: log.With("component", "worker", "rank", cfg.Rank),
	}
	if cfg.BackwardPasses > 1 {
		wk.pass = make([]float32, n)
	}
	wk.waits, _ = s.(WaitReporter)
	wk.syncer, _ = s.(HostSyncer)
	wk.phased, _ = model.(nn.Phased)
	if r, ok := s.(Reducer); ok {
		wk.reduces = r.Allreduces()
	}
	// With one backward pass per step, a strategy that can send the later
	// layers' gradients while backward goes on gets them as they are final.
	if ov, ok := s.(Overlapper); ok && ov.Overlaps() && cfg.BackwardPasses == 1 {
		if gn, ok := model.(nn.GradNotifier); ok {
			wk.overlap, wk.notifier = ov, gn
		}
	}
	return wk, nil
}

// StepsPerEpoch is the number of steps in each epoch for this worker: its
// batches, BackwardPasses of them to a step.
func (w *Worker) StepsPerEpoch() int {
	k := w.cfg.BackwardPasses
	return (w.loader.Steps() + k - 1) / k
}

// Epochs is the number of epochs Run will (at least partly) go through.
func (w *Worker) Epochs() int {
	if w.cfg.Steps > 0 {
		per := int64(w.StepsPerEpoch())
		return int((w.cfg.Steps + per - 1) / per)
	}
	return w.cfg.Epochs
}

// Params returns the worker's parameter vector: after Run, the weights of
// its last step. The slice is the worker's own.
func (w *Worker) Params() []float32 { return w.params }

// Close stops the data loader. Run's caller calls it once done.
func (w *Worker) Close() error { return w.loader.Close() }

// Run trains until the configured epochs or steps are done, ctx ends, or
// a step fails. It calls the strategy's Finish in every case, so nothing
// the strategy started outlives Run.
func (w *Worker) Run(ctx context.Context) (Result, error) {
	start := time.Now()
	res, err := w.train(ctx)
	if ferr := w.strategy.Finish(ctx); err == nil {
		err = ferr
	}
	if err != nil {
		return res, err
	}
	if w.cfg.Eval != nil && res.Steps%w.cfg.EvalEvery != 0 && !res.Stopped {
		if err := w.cfg.Eval(ctx, res.Steps, w.params); err != nil && !errors.Is(err, ErrStop) {
			return res, fmt.Errorf("evaluating after step %d: %w", res.Steps, err)
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// train runs the epochs' steps; Run finishes after it.
func (w *Worker) train(ctx context.Context) (Result, error) {
	res := Result{Steps: w.cfg.StartStep}
	epochs := w.Epochs()
	if ls, ok := w.strategy.(LastStepper); ok {
		total := int64(epochs) * int64(w.StepsPerEpoch())
		if w.cfg.Steps > 0 {
			total = min(total, w.cfg.Steps)
		}
		ls.SetLastStep(total - 1)
	}
	if st, ok := w.strategy.(Starter); ok {
		st.StartAt(w.cfg.StartStep)
	}
	per := int64(w.StepsPerEpoch())
	for epoch := int(w.cfg.StartStep / per); epoch < epochs && !res.Stopped && !res.Complete; epoch++ {
		// A worker that joined late begins mid-epoch, at its step's batch.
		skip := int(res.Steps - int64(epoch)*per)
		if err := w.loader.StartAt(ctx, epoch, skip*w.cfg.BackwardPasses); err != nil {
			return res, err
		}
		p := Progress{Rank: w.cfg.Rank, Epoch: epoch, Epochs: epochs, Step: skip, EpochSteps: int(per)}
		if last := w.cfg.Steps - int64(epoch)*per; w.cfg.Steps > 0 && last < per {
			p.EpochSteps = int(last)
		}
		epochStart, lastReport := time.Now(), time.Now()
		for p.Step < p.EpochSteps {
			n, loss, correct, err := w.step(ctx, res.Steps)
			if err == errEpochDone {
				break
			}
			if errors.Is(err, ErrRunComplete) {
				res.Complete = true
				break
			}
			if err != nil {
				return res, err
			}
			res.Steps++
			res.Samples += int64(n)
			p.Step++
			p.Samples += n
			p.LossSum += loss
			p.Correct += correct
			if w.cfg.Eval != nil && res.Steps%w.cfg.EvalEvery == 0 {
				if w.syncer != nil {
					if err := w.syncer.SyncHost(); err != nil {
						return res, fmt.Errorf("evaluating after step %d: %w", res.Steps, err)
					}
				}
				err := w.cfg.Eval(ctx, res.Steps, w.params)
				if errors.Is(err, ErrStop) {
					res.Stopped = true
					break
				}
				if err != nil {
					return res, fmt.Errorf("evaluating after step %d: %w", res.Steps, err)
				}
			}
			if w.cfg.Progress != nil && time.Since(lastReport) >= w.cfg.ProgressEvery {
				lastReport = time.Now()
				p.Elapsed = lastReport.Sub(epochStart)
				w.cfg.Progress(p)
			}
		}
		p.Elapsed, p.EpochDone = time.Since(epochStart), true
		res.Last = p
		if w.cfg.Progress != nil {
			w.cfg.Progress(p)
		}
		w.log.Info("epoch done", "epoch", epoch, "loss", p.Loss(), "accuracy", p.Accuracy(), "seconds", p.Elapsed.Seconds())
	}
	return res, nil
}

// step runs one step: BackwardPasses batches forward and backward, their
// mean gradient handed to the strategy. It returns the samples, the summed
// loss and the correct predictions, or errEpochDone if the epoch had no batch
// left.
func (w *Worker) step(ctx context.Context, step int64) (samples int, lossSum float64, correct int, err error) {
	var t StepTimes
	t0 := time.Now()
	if err := w.strategy.Params(ctx, step, w.params); err != nil {
		return 0, 0, 0, fmt.Errorf("step %d: %w", step, err)
	}
	t.Pull = time.Since(t0)
	if w.waits != nil {
		t.Wait = min(w.waits.LastWait(), t.Pull)
		t.Pull -= t.Wait
	}
	tl, stepArg := w.cfg.Timeline, timeline.Arg{Key: "step", Val: step}
	if tl != nil && !w.reduces {
		tl.Span(0, "pull", t0, t.Pull+t.Wait, stepArg)
		if t.Wait > 0 {
			tl.Span(0, "barrier wait", t0, t.Wait, stepArg)
		}
	}
	k := w.cfg.BackwardPasses
	passes := 0
	for ; passes < k; passes++ {
		td := time.Now()
		b, err := w.loader.Next(ctx)
		t.Data += time.Since(td)
		tl.Since(0, "data", td, stepArg)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, 0, 0, err
		}
		dst := w.grads
		if passes > 0 {
			dst = w.pass
		}
		tc := time.Now()
		var loss float64
		var c int
		var ready func(int)
		if w.overlap != nil {
			ready = func(off int) { w.overlap.GradReady(ctx, dst, off) }
		}
		switch {
		case tl != nil && w.phased != nil:
			var tf time.Time
			loss, c = w.phased.ForwardBackwardPhased(w.params, dst, b.X, b.Y, func() { tf = time.Now() }, ready)
			tl.Span(0, "forward", tc, tf.Sub(tc), stepArg)
			tl.Since(0, "backward", tf, stepArg)
		case ready != nil:
			loss, c = w.notifier.ForwardBackwardNotify(w.params, dst, b.X, b.Y, ready)
			tl.Since(0, "compute", tc, stepArg)
		default:
			loss, c = w.model.ForwardBackward(w.params, dst, b.X, b.Y)
			tl.Since(0, "compute", tc, stepArg)
		}
		n := b.Len()
		w.loader.Release(b)
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			if w.overlap != nil {
				w.overlap.Abort()
			}
			if err := modelErr(w.model); err != nil {
				return 0, 0, 0, fmt.Errorf("step %d: %w", step, err)
			}
			return 0, 0, 0, fmt.Errorf("step %d: training loss is %v; %w (learning rate too high?)", step, loss, ErrDiverged)
		}
		if passes > 0 {
			for i, g := range w.pass {
				w.grads[i] += g
			}
		}
		t.Compute += time.Since(tc)
		samples += n
		lossSum += loss * float64(n)
		correct += c
	}
	if passes == 0 {
		return 0, 0, 0, errEpochDone
	}
	if passes > 1 {
		inv := 1 / float32(passes)
		for i := range w.grads {
			w.grads[i] *= inv
		}
	}
	ta := time.Now()
	if err := w.strategy.Apply(ctx, step, w.params, w.grads); err != nil {
		return 0, 0, 0, fmt.Errorf("step %d: %w", step, err)
	}
	if w.reduces {
		t.Reduce = time.Since(ta)
	} else {
		t.Push = time.Since(ta)
		tl.Span(0, "push", ta, t.Push, stepArg)
		if w.waits != nil { // a push-pull held at the barrier or bound
			held := min(w.waits.LastWait(), t.Push)
			if held > 0 {
				// Where in the push-pull the servers held it is not known;
				// the timeline shows the wait at its end.
				tl.Span(0, "barrier wait", ta.Add(t.Push-held), held, stepArg)
			}
			t.Wait += held
			t.Push -= held
		}
	}
	if w.cfg.OnStep != nil {
		t.Step, t.Samples = time.Since(t0), samples
		w.cfg.OnStep(step, t)
	}
	return samples, lossSum, correct, nil
}

// The optional capabilities of a Strategy. A Worker finds them by type
// assertion on the Strategy given to New (so a wrapper that embeds a
// strategy hides them unless it has the methods too); each is called from
// the worker's goroutine, like the Strategy's own methods, unless its
// comment says otherwise. A Strategy written outside this package may
// implement any of them.

// WaitReporter is a strategy that knows how long its last Params or
// Apply call was held before any weight arrived (waiting for other
// workers, not for the network): StepTimes.Wait.
type WaitReporter interface {
	// LastWait is that wait; it does not block.
	LastWait() time.Duration
}

// FinalPuller is a strategy that knows, once its run's last step is
// pushed, the pull that reads the run's final weights (sync: waiting for
// the last step to be applied on every shard). ok is false when it does
// not know (a run stopped before its last step).
type FinalPuller interface {
	FinalPull() (args PullArgs, ok bool)
}

// LastStepper is a strategy that fetches the next step's weights with the
// last step's push, and so wants to know which step is the last: nothing
// is fetched after it (a sync or SSP pull for a step no one computes would
// wait for nothing).
type LastStepper interface {
	// SetLastStep is called once, before the first step, with the last
	// step the run computes.
	SetLastStep(step int64)
}

// Starter is a strategy that must know where a worker that joins late
// begins (Config.StartStep): a sync worker's first pull waits for it.
type Starter interface {
	// StartAt is called once, before the first Params, with
	// Config.StartStep.
	StartAt(step int64)
}

// HostSyncer is a strategy whose updates may leave the worker's
// parameter vector older than the weights it trains (a ring whose
// weights stay on the device: RingConfig.Resident); Finish brings it up
// to date at the end of every run.
type HostSyncer interface {
	// SyncHost brings the vector up to date; the worker calls it before
	// it hands the vector to Config.Eval. It may block on the device.
	SyncHost() error
}

// Reducer is a strategy whose Apply may combine the gradients across the
// ranks and update params itself (an allreduce) instead of pushing them:
// its time then counts as StepTimes.Reduce, not Push.
type Reducer interface {
	// Allreduces reports whether Apply is an allreduce; New asks once.
	Allreduces() bool
}

// Overlapper is a strategy that can start sending a step's gradients
// while backward is still computing the earlier layers'.
type Overlapper interface {
	// Overlaps reports whether it wants GradReady calls; New asks once
	// (and makes none with Config.BackwardPasses above 1).
	Overlaps() bool
	// GradReady says grads[off:] are final for the current step, called
	// from backward as each layer's gradient is done, off decreasing;
	// Apply then gets the whole vector. Backward waits while it runs, so
	// it should hand the work on rather than do it; the strategy may read
	// grads[off:] until Apply or Abort returns, and must not write them.
	GradReady(ctx context.Context, grads []float32, off int)
	// Abort cancels what GradReady started, when the step fails before
	// Apply; it waits for it to stop.
	Abort()
}

// Evaluation is a model's loss and accuracy on a dataset.
type Evaluation struct {
	Loss     float64
	Accuracy float64
	Samples  int
}

// modelErr returns the error of a model whose device failed (nn.Failer):
// its NaN loss is not divergence.
func modelErr(m nn.Model) error {
	if f, ok := m.(nn.Failer); ok {
		return f.Err()
	}
	return nil
}

// Evaluate runs ds through model with params, in batches, and returns the
// mean loss and the accuracy.
func Evaluate(ctx context.Context, model nn.Model, params []float32, ds data.Dataset, batch int) (Evaluation, error) {
	var lossSum float64
	var correct, n int
	for b := range data.Batches(ds, batch) {
		if err := ctx.Err(); err != nil {
			return Evaluation{}, err
		}
		l, c := model.Evaluate(params, b.X, b.Y)
		if err := modelErr(model); err != nil {
			return Evaluation{}, fmt.Errorf("evaluate: %w", err)
		}
		lossSum += l
		correct += c
		n += b.Len()
	}
	if n == 0 {
		return Evaluation{}, errors.New("evaluate: empty dataset")
	}
	return Evaluation{Loss: lossSum / float64(n), Accuracy: float64(correct) / float64(n), Samples: n}, nil
}
