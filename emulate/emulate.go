package emulate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/sim"
	"github.com/shoalml/shoal/worker"
)

// Config is one job to emulate.
type Config struct {
	// Sim is the job whose schedule the emulation follows: its mode,
	// workers, SSP bound, compute times and network. Run sets its Steps,
	// Batch and Trace.
	Sim sim.Config
	// Schedule, when not nil, is followed instead of simulating one: a
	// real run's (Replay), with Sim's mode, workers and bound. Each
	// worker's pushes in it must be the job's steps.
	Schedule []sim.Op
	// Model returns a new replica of the model (one per worker, one to
	// evaluate with); Seed its initial weights and the data order, as
	// shoal train's --seed.
	Model func() (nn.Model, error)
	Seed  uint64
	// Batch is per worker and step; Epochs how many passes over Train
	// the job makes (each worker over its 1/N of it).
	Batch, Epochs int
	// Optimizer is the shard's, as shoal train's flags make it (its
	// schedule's DecaySteps counted in updates); with LocalSteps, the
	// outer optimizer.
	Optimizer optim.Config
	// LocalSteps, when > 0 (sync and async), is low-communication
	// training (DiLoCo, shoal train --local-steps): each worker takes
	// LocalSteps steps with an Inner optimizer of its own (its
	// DecaySteps counted in the worker's steps), then pushes the
	// pseudo-gradient, which the shard applies with Optimizer. The
	// schedule is then one read and one push a round (Sim.LocalSteps is
	// set to LocalSteps), and the shard's updates count rounds.
	LocalSteps int
	Inner      optim.Config
	// Update is how the shard applies each push in async and SSP (its
	// zero value: the mode's default rule).
	Update      ps.UpdateConfig
	Train, Test data.Dataset
	// EvalEvery is how many updates of the shard pass between two
	// evaluations on Test (0: about 20 over the run); EvalBatch the batch
	// they use (0: 1000).
	EvalEvery int64
	EvalBatch int
}

// Point is one evaluation of the shard's weights.
type Point struct {
	// Updates the shard had applied; Epochs the passes over the training
	// set they amount to.
	Updates  int64   `json:"updates"`
	Epochs   float64 `json:"epochs"`
	Accuracy float64 `json:"accuracy"`
	Loss     float64 `json:"loss"`
}

// MarshalJSON writes a loss that is not finite (a diverged job's) as
// null, which JSON can hold.
func (p Point) MarshalJSON() ([]byte, error) {
	type plain Point
	out := struct {
		plain
		Loss *float64 `json:"loss"`
	}{plain: plain(p)}
	if !math.IsNaN(p.Loss) && !math.IsInf(p.Loss, 0) {
		out.Loss = &p.Loss
	}
	return json.Marshal(out)
}

// Result is what an emulated job did.
type Result struct {
	// Curve has a point every EvalEvery updates and one after the last.
	Curve []Point `json:"curve"`
	// Final is the last point's evaluation.
	Final worker.Evaluation `json:"final"`
	// Steps each worker ran; Updates the shard applied.
	Steps   int64 `json:"steps"`
	Updates int64 `json:"updates"`
	// Staleness counts the pushes by the updates the shard had applied
	// since their worker read its weights (async and SSP).
	Staleness consistency.Staleness `json:"staleness"`
	// Diverged, when not empty, says that a worker's training loss became
	// NaN or infinite and the job stopped there (worker.ErrDiverged): the
	// curve ends with the shard's weights at that point.
	Diverged string `json:"diverged,omitempty"`
	// Recordings are the workers' pushes (async and SSP), as a real run
	// records them: Replay(Recordings) is the schedule followed.
	Recordings []Recording `json:"-"`
	// Simulated is the simulation the schedule came from (zero when
	// Config.Schedule was given).
	Simulated sim.Result `json:"simulated"`
}

// UpdatesPerEpoch is how many updates the shard applies for one pass
// over the data: one per worker and step in async and SSP, one per step
// in sync (and SSP with bound 0, which the shards run as sync).
func UpdatesPerEpoch(mode consistency.Mode, staleness int64, workers int, stepsPerEpoch int64) int64 {
	if mode.Synchronous(staleness) {
		return stepsPerEpoch
	}
	return int64(workers) * stepsPerEpoch
}

func (c Config) validate() error {
	switch {
	case !c.Sim.Mode.UsesServers():
		return fmt.Errorf("emulate: mode %s: only the parameter-server modes (async, sync, ssp) are emulated; the ring is sync SGD on N·batch", c.Sim.Mode)
	case c.Sim.Mode == consistency.Sync && c.Sim.BackupWorkers > 0:
		return fmt.Errorf("emulate: sync with %d backup workers: not emulated (a late worker skips steps the schedule cannot know of); want 0", c.Sim.BackupWorkers)
	case c.Sim.Workers < 1 || c.Sim.Workers > ps.MaxWorkers:
		return fmt.Errorf("emulate: %d workers, want 1..%d", c.Sim.Workers, ps.MaxWorkers)
	case c.Batch < 1 || c.Epochs < 1:
		return fmt.Errorf("emulate: batch %d, epochs %d: want both >= 1", c.Batch, c.Epochs)
	case c.Model == nil || c.Train == nil || c.Test == nil:
		return errors.New("emulate: want a model, a training set and a test set")
	case c.EvalEvery < 0 || c.EvalBatch < 0:
		return fmt.Errorf("emulate: eval every %d updates, batch %d: want >= 0", c.EvalEvery, c.EvalBatch)
	case c.LocalSteps < 0 || c.LocalSteps > ps.MaxLocalSteps:
		return fmt.Errorf("emulate: %d local steps, want 0..%d (0: workers push gradients)", c.LocalSteps, ps.MaxLocalSteps)
	case c.LocalSteps > 0 && c.Sim.Mode != consistency.Sync && c.Sim.Mode != consistency.Async:
		return fmt.Errorf("emulate: %d local steps in %s mode: only %s and %s take local steps", c.LocalSteps, c.Sim.Mode, consistency.Sync, consistency.Async)
	case c.LocalSteps > 0 && c.Schedule != nil:
		return fmt.Errorf("emulate: %d local steps with a replayed schedule: a recording of pushes of gradients cannot order pseudo-gradients; emulate a simulated schedule", c.LocalSteps)
	}
	return nil
}

// Run emulates cfg: it simulates the job for its schedule, then trains
// through it.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	if cfg.EvalBatch == 0 {
		cfg.EvalBatch = 1000
	}
	n := cfg.Sim.Workers
	evalModel, err := cfg.Model()
	if err != nil {
		return Result{}, err
	}
	layout := evalModel.Layout()
	initial := make([]float32, layout.Size())
	evalModel.Init(initial, cfg.Seed)
	plan, err := shard.New(layout.Size(), 1, shard.DefaultChunkBytes)
	if err != nil {
		return Result{}, err
	}
	srv, err := ps.New(ps.Config{Mode: cfg.Sim.Mode, Plan: plan, Layout: layout, Optimizer: cfg.Optimizer, Update: cfg.Update,
		Workers: n, Staleness: cfg.Sim.Staleness, LocalSteps: cfg.LocalSteps, MaxWait: 10 * time.Minute}, initial)
	if err != nil {
		return Result{}, err
	}
	defer srv.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := &turns{srv: srv, ranges: srv.Ranges(), live: n, asks: map[int]sim.Op{}}
	t.cond = sync.NewCond(&t.mu)
	stop := context.AfterFunc(ctx, func() {
		t.mu.Lock()
		t.cond.Broadcast()
		t.mu.Unlock()
	})
	defer stop()

	workers := make([]*worker.Worker, n)
	asyncs := make([]*worker.Async, n)
	defer func() {
		for _, w := range workers {
			if w != nil {
				w.Close()
			}
		}
	}()
	for r := range n {
		model, err := cfg.Model()
		if err != nil {
			return Result{}, err
		}
		g := &gate{t: t, w: r}
		// The emulated workers are the shard's own callers: each is bound
		// to its id without a join, which would change what the schedule
		// drives.
		if g.session, err = srv.Rebind(int64(r)); err != nil {
			return Result{}, fmt.Errorf("emulate: worker %d: %w", r, err)
		}
		var s worker.Strategy
		if cfg.Sim.Mode == consistency.Sync {
			s = worker.NewSync(g, int64(r), 1)
		} else {
			a, err := worker.NewAsync(g, layout.Size(), 1, worker.AsyncConfig{WorkerID: int64(r), Record: true})
			if err != nil {
				return Result{}, err
			}
			s, asyncs[r] = a, a
		}
		if cfg.LocalSteps > 0 {
			inner, err := optim.New(cfg.Inner, layout.Size())
			if err != nil {
				return Result{}, fmt.Errorf("emulate: worker %d's inner optimizer: %w", r, err)
			}
			if s, err = worker.NewLocal(s, inner, cfg.LocalSteps); err != nil {
				return Result{}, fmt.Errorf("emulate: worker %d: %w", r, err)
			}
		}
		wc := worker.DefaultConfig()
		wc.Rank, wc.WorldSize, wc.Batch, wc.Epochs, wc.Seed, wc.Prefetch = r, n, cfg.Batch, cfg.Epochs, cfg.Seed, 1
		wc.ProgressEvery = time.Hour
		if workers[r], err = worker.New(wc, model, cfg.Train, s); err != nil {
			return Result{}, fmt.Errorf("emulate: worker %d: %w", r, err)
		}
	}
	perEpoch := int64(workers[0].StepsPerEpoch())
	steps := perEpoch * int64(cfg.Epochs)
	// With local steps the shard sees rounds: the strategies below the
	// workers' Local count them as their steps.
	h := int64(max(cfg.LocalSteps, 1))
	rounds := (steps + h - 1) / h
	t.steps = rounds

	var simulated sim.Result
	if cfg.Schedule != nil {
		if err := checkSchedule(cfg.Schedule, n, steps); err != nil {
			return Result{}, err
		}
		t.ops = cfg.Schedule
	} else {
		sc := cfg.Sim
		sc.Steps, sc.Batch, sc.Trace, sc.LocalSteps = int(steps), cfg.Batch, true, cfg.LocalSteps
		if simulated, err = sim.Run(sc); err != nil {
			return Result{}, fmt.Errorf("emulate: simulating the schedule: %w", err)
		}
		t.ops, simulated.Schedule = simulated.Schedule, nil
		// The simulation names each op by the worker's step (a push by
		// its round's last step, a read by its round's first); the shard
		// sees the round.
		for i := range t.ops {
			t.ops[i].Step /= h
		}
	}

	totalUpdates := UpdatesPerEpoch(cfg.Sim.Mode, cfg.Sim.Staleness, n, rounds)
	updatesPerEpoch := float64(totalUpdates) / float64(cfg.Epochs)
	every := cfg.EvalEvery
	if every == 0 {
		every = max(totalUpdates/20, 1)
	}
	params := make([]float32, layout.Size())
	var curve []Point
	evaluate := func(ctx context.Context) error {
		clock, err := srv.Snapshot(params)
		if err != nil {
			return err
		}
		ev, err := worker.Evaluate(ctx, evalModel, params, cfg.Test, cfg.EvalBatch)
		if err != nil {
			return err
		}
		curve = append(curve, Point{Updates: clock, Epochs: float64(clock) / updatesPerEpoch, Accuracy: ev.Accuracy, Loss: ev.Loss})
		return nil
	}
	t.evalAt, t.every, t.evaluate = every, every, evaluate

	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, w := range workers {
		wg.Go(func() {
			_, err := w.Run(ctx)
			if err != nil {
				errs[r] = fmt.Errorf("worker %d: %w", r, err)
				cancel()
			}
			t.leave()
		})
	}
	wg.Wait()
	res := Result{Steps: steps, Simulated: simulated}
	if err := t.failure(errs); errors.Is(err, worker.ErrDiverged) {
		res.Diverged = err.Error()
	} else if err != nil {
		return Result{}, err
	}
	res.Updates = srv.Clock()
	if len(curve) == 0 || curve[len(curve)-1].Updates != res.Updates {
		if err := evaluate(context.WithoutCancel(ctx)); err != nil {
			return Result{}, err
		}
	}
	res.Curve = curve
	last := curve[len(curve)-1]
	res.Final = worker.Evaluation{Accuracy: last.Accuracy, Loss: last.Loss, Samples: cfg.Test.Len()}
	for r, a := range asyncs {
		if a != nil {
			res.Staleness.Merge(a.Staleness)
			res.Recordings = append(res.Recordings, Recording{Rank: r, WorldSize: n, Mode: cfg.Sim.Mode, Staleness: cfg.Sim.Staleness, Servers: 1,
				Floats: layout.Size(), Batch: cfg.Batch, Seed: cfg.Seed, Pushes: a.Pushes})
		}
	}
	return res, nil
}

// checkSchedule checks that a given schedule has n workers pushing every
// one of the job's steps.
func checkSchedule(ops []sim.Op, n int, steps int64) error {
	pushes := make([]int64, n)
	for _, op := range ops {
		if op.Worker < 0 || op.Worker >= n {
			return fmt.Errorf("emulate: the schedule has %s in a job of %d workers", describe(op), n)
		}
		if !op.Read {
			pushes[op.Worker]++
		}
	}
	for w, p := range pushes {
		if p != steps {
			return fmt.Errorf("emulate: the schedule has %d pushes of worker %d, the job %d steps a worker: replay it with the recorded job's dataset, --epochs and --batch", p, w, steps)
		}
	}
	return nil
}
