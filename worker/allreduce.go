package worker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
	"unsafe"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/timeline"
)

// Collective is what ring training needs from a collective.Communicator.
type Collective interface {
	Rank() int
	Size() int
	Allreduce(ctx context.Context, buf []float32, op collective.Op) error
	AllreduceAdasum(ctx context.Context, buf []float32) error
	Broadcast(ctx context.Context, buf []float32, root int) error
	Allgather(ctx context.Context, in, out []float32, counts []int) error
}

var _ Collective = (*collective.Communicator)(nil)

// Reduce operations of ring training.
const (
	ReduceAverage = "average"
	ReduceSum     = "sum"
	ReduceAdasum  = "adasum"
)

// ErrDesync: the ranks' parameters differ, which only mismatched
// collectives or nondeterminism can cause; training cannot go on.
var ErrDesync = errors.New("ranks desynchronised")

// RingConfig configures ring-allreduce training.
type RingConfig struct {
	// Optimizer is the optimizer every rank applies locally, identically.
	Optimizer optim.Config
	// ScaleLR multiplies the optimizer's learning rate by the ring's size
	// (the linear scaling rule; ScaleWarmup gives it its warm-up): an
	// elastic ring builds a Ring per generation, so the rate follows the
	// live world size as ranks leave and join.
	ScaleLR bool
	// ReduceOp combines the ranks' gradients: ReduceAverage (default),
	// ReduceSum or ReduceAdasum.
	ReduceOp string
	// Initial are rank 0's initial weights, broadcast to every rank before
	// the first step (other ranks may pass nil).
	Initial []float32
	// DesyncEvery: every that many steps the ranks compare a hash of their
	// parameters and stop with ErrDesync naming the ranks that differ (0:
	// never).
	DesyncEvery int64
	// FusionBytes, when > 0, makes the ranks allreduce the gradient in
	// buckets of at least that many bytes as backward produces them, the
	// last layers' first, so communication overlaps the rest of backward
	// (PyTorch DDP's buckets; Horovod's fusion buffer). 0 reduces the
	// whole vector in one call after backward. Only for average and sum:
	// AdaSum's combination depends on the whole vector's dot products.
	FusionBytes int
	// Synced says the ranks' replicas already hold the same weights (an
	// elastic re-form broadcast them): there is no initial broadcast, and
	// Initial is not needed.
	Synced bool
	// Interrupt, when set, is asked by rank 0 before every step but the
	// first whether the ring must stop (a member waits to join); rank 0
	// broadcasts the answer, so that every rank stops at the same step
	// boundary, with ErrInterrupted from Params.
	Interrupt func() bool
	// Timeline, when set, records each allreduce bucket (row 1 when it
	// overlaps backward, else row 0) and each optimizer step (row 0).
	Timeline *timeline.Writer
	// Resident, when set, is the model the worker trains, whose weights
	// and optimizer state then stay on its device for each run (the
	// device-resident step): Params loads them there once, Apply uploads
	// the reduced gradient and steps there, with the optimizer's scalars
	// from the host (optim.Optimizer.Advance), and the host vector and
	// state are brought up to date only for the desync check, State, a
	// SyncHost (an evaluation) and Finish. The optimizer must have a
	// device step (optim.OnDevice: not adagrad).
	Resident ResidentModel
}

// ResidentModel is a model whose weights and optimizer state can stay on
// its device between steps (nn.DeviceModel). Its methods are called from
// the worker's goroutine, one at a time; they block on the device only
// where they say so.
type ResidentModel interface {
	// LoadResident copies params and the optimizer's slots to the
	// device, and waits for the copies; from then on the model's
	// ForwardBackward and Evaluate are given params and compute with the
	// device's weights.
	LoadResident(params []float32, slots map[string][]float32) error
	// StepResident uploads the reduced gradient and applies step s on
	// the device; it may return before the device is done, and grads
	// must stay unchanged until the model's next ForwardBackward.
	StepResident(grads []float32, s optim.DeviceStep) error
	// StoreResident copies the device's weights into LoadResident's
	// params and its slots into slots (in place), and waits.
	StoreResident(slots map[string][]float32) error
	// EndResident ends it: the model uploads its params again.
	EndResident()
}

// ErrInterrupted: rank 0's RingConfig.Interrupt asked the ring to stop
// at a step boundary; every step before it is complete on every rank.
var ErrInterrupted = errors.New("ring interrupted at a step boundary")

// Ring is data-parallel SGD with ring allreduce and no server (Horovod's
// design): the gradients are combined across ranks and every rank applies
// the same optimizer step to its own replica.
type Ring struct {
	comm    Collective
	cfg     RingConfig
	opt     *optim.Optimizer
	started bool
	mine    []float32 // this rank's parameter hash, as 8 bytes-in-floats
	all     []float32 // every rank's
	counts  []int
	n       int // floats in the vector
	// The buckets of the step in flight (FusionBytes > 0): sent is where
	// the part of the vector not yet handed to the reducer ends; buckets
	// feed one goroutine that reduces them in order and reports on done.
	sent    int
	flag    []float32 // Interrupt's answer, broadcast by rank 0
	checked bool      // Params has run once: later calls check Interrupt
	buckets chan []float32
	done    chan error
	cancel  context.CancelFunc
	// The device-resident step (RingConfig.Resident): whether the
	// weights and state are on the device, whether the host's copies
	// are older than the device's, and a failure to bring them back
	// from State, for the next Apply or Finish.
	loaded, stale bool
	residentErr   error
}

var (
	_ Strategy   = (*Ring)(nil)
	_ Overlapper = (*Ring)(nil)
	_ Reducer    = (*Ring)(nil)
	_ HostSyncer = (*Ring)(nil)
)

// NewRing returns the ring strategy for a vector of n floats.
func NewRing(comm Collective, n int, cfg RingConfig) (*Ring, error) {
	switch cfg.ReduceOp {
	case "":
		cfg.ReduceOp = ReduceAverage
	case ReduceAverage, ReduceSum, ReduceAdasum:
	default:
		return nil, fmt.Errorf("reduce op %q: unknown (want %s, %s or %s)", cfg.ReduceOp, ReduceAverage, ReduceSum, ReduceAdasum)
	}
	if cfg.FusionBytes < 0 {
		return nil, fmt.Errorf("ring: fusion bytes %d: want >= 0", cfg.FusionBytes)
	}
	if comm.Rank() == 0 && !cfg.Synced && len(cfg.Initial) != n {
		return nil, fmt.Errorf("ring: rank 0's initial vector has %d floats, want %d", len(cfg.Initial), n)
	}
	opt, err := optim.New(cfg.Optimizer, n)
	if err != nil {
		return nil, fmt.Errorf("ring: %w", err)
	}
	if cfg.Resident != nil && !optim.OnDevice(cfg.Optimizer.Algorithm) {
		return nil, fmt.Errorf("ring: the device-resident step: optimizer %s has no device kernel (want sgd, momentum, nesterov, adam or adamw)", cfg.Optimizer.Algorithm)
	}
	if cfg.ScaleLR {
		opt.SetLRScale(float64(comm.Size()))
	}
	r := &Ring{comm: comm, cfg: cfg, opt: opt, mine: make([]float32, 8), all: make([]float32, 8*comm.Size()), counts: make([]int, comm.Size()), n: n, sent: n,
		started: cfg.Synced, flag: make([]float32, 1)}
	for i := range r.counts {
		r.counts[i] = 8
	}
	return r, nil
}

// Params broadcasts rank 0's initial weights before the first step; after
// that the replica is already up to date. With Interrupt, every later
// call first agrees with the other ranks whether to stop here.
func (r *Ring) Params(ctx context.Context, _ int64, params []float32) error {
	if r.cfg.Interrupt != nil {
		if r.checked {
			r.flag[0] = 0
			if r.comm.Rank() == 0 && r.cfg.Interrupt() {
				r.flag[0] = 1
			}
			if err := r.comm.Broadcast(ctx, r.flag, 0); err != nil {
				return fmt.Errorf("agreeing whether to stop: %w", err)
			}
			if r.flag[0] != 0 {
				return ErrInterrupted
			}
		}
		r.checked = true
	}
	if !r.started {
		if r.comm.Rank() == 0 {
			copy(params, r.cfg.Initial)
		}
		if err := r.comm.Broadcast(ctx, params, 0); err != nil {
			return fmt.Errorf("broadcasting the initial weights: %w", err)
		}
		r.started = true
	}
	if r.cfg.Resident != nil && !r.loaded {
		if err := r.cfg.Resident.LoadResident(params, r.opt.LiveSlots()); err != nil {
			return fmt.Errorf("putting the weights and the optimizer's state on the device: %w", err)
		}
		r.loaded, r.stale = true, false
	}
	return nil
}

// Apply combines the gradients across ranks and steps the local optimizer.
func (r *Ring) Apply(ctx context.Context, step int64, params, grads []float32) error {
	var err error
	if r.Overlaps() {
		err = r.finishBuckets(ctx, grads)
	} else {
		err = r.reduce(ctx, 0, grads)
	}
	if err != nil {
		return fmt.Errorf("allreduce of the gradients: %w", err)
	}
	to := time.Now()
	if err := r.step(params, grads); err != nil {
		return err
	}
	r.cfg.Timeline.Since(0, "optimizer step", to, timeline.Arg{Key: "step", Val: step})
	if r.cfg.DesyncEvery > 0 && (step+1)%r.cfg.DesyncEvery == 0 {
		if err := r.SyncHost(); err != nil {
			return fmt.Errorf("desynchronisation check: %w", err)
		}
		return r.CheckDesync(ctx, step, params)
	}
	return nil
}

// step applies the optimizer: on the host, or on the device in a
// resident run.
func (r *Ring) step(params, grads []float32) error {
	if !r.loaded {
		return r.opt.Step(params, grads)
	}
	if err := r.residentErr; err != nil {
		return err
	}
	s, err := r.opt.Advance()
	if err != nil {
		return err
	}
	r.stale = true
	if err := r.cfg.Resident.StepResident(grads, s); err != nil {
		return fmt.Errorf("the optimizer step on the device: %w", err)
	}
	return nil
}

// SyncHost brings the host's weights (the vector Params was given) and
// optimizer state up to date with the device's in a resident run
// (RingConfig.Resident), waiting for the copies; elsewhere they are the
// host's already, and it does nothing. A worker calls it before it
// hands the vector to an evaluation.
func (r *Ring) SyncHost() error {
	if !r.loaded || !r.stale {
		return nil
	}
	if err := r.cfg.Resident.StoreResident(r.opt.LiveSlots()); err != nil {
		return fmt.Errorf("copying the weights and the optimizer's state from the device: %w", err)
	}
	r.stale = false
	return nil
}

// reduce combines buf across the ranks with the configured op; the
// timeline shows it on row tid.
func (r *Ring) reduce(ctx context.Context, tid int, buf []float32) error {
	defer r.cfg.Timeline.Since(tid, "allreduce bucket", time.Now(), timeline.Arg{Key: "floats", Val: int64(len(buf))})
	switch r.cfg.ReduceOp {
	case ReduceSum:
		return r.comm.Allreduce(ctx, buf, collective.Sum)
	case ReduceAdasum:
		return r.comm.AllreduceAdasum(ctx, buf)
	}
	return r.comm.Allreduce(ctx, buf, collective.Average)
}

// Overlaps: with FusionBytes (and not Adasum) the ring reduces buckets
// while backward runs.
func (r *Ring) Overlaps() bool { return r.cfg.FusionBytes > 0 && r.cfg.ReduceOp != ReduceAdasum }

// GradReady hands grads[off:r.sent] to the reducer once it has reached
// FusionBytes. Every rank runs the same model, so every rank cuts the
// same buckets and issues the same collectives in the same order.
func (r *Ring) GradReady(ctx context.Context, grads []float32, off int) {
	if 4*(r.sent-off) < r.cfg.FusionBytes {
		return
	}
	r.send(ctx, grads[off:r.sent])
	r.sent = off
}

// send queues one bucket, starting the step's reducer on the first.
func (r *Ring) send(ctx context.Context, bucket []float32) {
	if r.buckets == nil {
		ctx, r.cancel = context.WithCancel(ctx)
		r.buckets, r.done = make(chan []float32, 16), make(chan error, 1)
		go func() {
			var err error
			for b := range r.buckets {
				if err == nil {
					err = r.reduce(ctx, 1, b)
				}
			}
			r.done <- err
		}()
	}
	r.buckets <- bucket
}

// finishBuckets queues what backward has not yet handed over and waits
// for every bucket of the step.
func (r *Ring) finishBuckets(ctx context.Context, grads []float32) error {
	if r.sent > 0 {
		r.send(ctx, grads[:r.sent])
	}
	return r.endStep()
}

func (r *Ring) endStep() error {
	close(r.buckets)
	err := <-r.done
	r.cancel()
	r.buckets, r.done, r.cancel, r.sent = nil, nil, nil, r.n
	return err
}

// Abort stops the step's reducer when the step fails before Apply.
func (r *Ring) Abort() {
	if r.buckets == nil {
		r.sent = r.n
		return
	}
	r.cancel()
	_ = r.endStep()
}

// State returns a copy of the optimizer's state (momentum, step count…),
// brought from the device first in a resident run (a failure to is
// returned by the next Apply or Finish).
func (r *Ring) State() optim.State {
	if err := r.SyncHost(); err != nil && r.residentErr == nil {
		r.residentErr = err
	}
	return r.opt.State()
}

// LR is the learning rate of the ring's next step.
func (r *Ring) LR() float64 { return r.opt.LR() }

// Restore replaces the optimizer's state, as State returned it on a
// rank whose state the ring adopts.
// It is an error in a resident run, whose state is on the device.
func (r *Ring) Restore(s optim.State) error {
	if r.loaded {
		return errors.New("ring: restoring the optimizer's state while a resident run holds it on the device")
	}
	return r.opt.Restore(s)
}

// Finish ends a resident run: the device's weights and state are copied
// into the host's (the vector Params was given), also after a failed
// run, whose last completed step they hold (the update comes after the
// allreduce). Otherwise nothing is pending.
func (r *Ring) Finish(context.Context) error {
	if !r.loaded {
		return nil
	}
	err := r.SyncHost()
	if err == nil {
		err = r.residentErr
	}
	r.cfg.Resident.EndResident()
	r.loaded, r.stale, r.residentErr = false, false, nil
	return err
}

// Allreduces: Apply is an allreduce and a local optimizer step.
func (r *Ring) Allreduces() bool { return true }

// CheckDesync compares a hash of every rank's parameters and returns
// ErrDesync naming the ranks whose parameters differ from rank 0's.
func (r *Ring) CheckDesync(ctx context.Context, step int64, params []float32) error {
	h := fnv.New64a()
	h.Write(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(params))), 4*len(params)))
	sum := h.Sum64()
	// One byte per float: exact even when the wire is float16 or bfloat16.
	for i := range r.mine {
		r.mine[i] = float32((sum >> (8 * i)) & 0xff)
	}
	if err := r.comm.Allgather(ctx, r.mine, r.all, r.counts); err != nil {
		return fmt.Errorf("desynchronisation check: %w", err)
	}
	var differ []string
	for rank := 1; rank < r.comm.Size(); rank++ {
		for i := range 8 {
			if r.all[8*rank+i] != r.all[i] {
				differ = append(differ, fmt.Sprint(rank))
				break
			}
		}
	}
	if len(differ) > 0 {
		return fmt.Errorf("%w: after step %d the parameters of rank(s) %s differ from rank 0's", ErrDesync, step, strings.Join(differ, ", "))
	}
	return nil
}

// EvaluateShard evaluates params on this rank's share of ds (samples
// rank, rank+world, …) and sums loss, correct predictions and samples
// over all ranks with the communicator, so every rank gets the metrics of
// the whole dataset.
func EvaluateShard(ctx context.Context, comm Collective, model nn.Model, params []float32, ds data.Dataset, batch int) (Evaluation, error) {
	rank, world := comm.Rank(), comm.Size()
	c, h, w := ds.Shape()
	x := make([]float32, batch*c*h*w)
	y := make([]int32, batch)
	idx := make([]int, 0, batch)
	var lossSum float64
	var correct, n int
	flush := func() {
		if len(idx) == 0 {
			return
		}
		ds.Gather(idx, x, y)
		l, k := model.Evaluate(params, x[:len(idx)*c*h*w], y[:len(idx)])
		lossSum += l
		correct += k
		n += len(idx)
		idx = idx[:0]
	}
	for i := rank; i < ds.Len(); i += world {
		idx = append(idx, i)
		if len(idx) == batch {
			flush()
		}
	}
	flush()
	totals := []float32{float32(lossSum), float32(correct), float32(n)}
	if err := comm.Allreduce(ctx, totals, collective.Sum); err != nil {
		return Evaluation{}, fmt.Errorf("summing the test metrics: %w", err)
	}
	if totals[2] == 0 {
		return Evaluation{}, errors.New("evaluate: empty dataset")
	}
	return Evaluation{Loss: float64(totals[0] / totals[2]), Accuracy: float64(totals[1] / totals[2]), Samples: int(totals[2])}, nil
}
