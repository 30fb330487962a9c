package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"time"

	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/timeline"
	"github.com/shoalml/shoal/worker"
)

// computeRecord is the result of `shoal bench compute`, the object
// `--json` prints; bench/peers/torch_train.py prints the same keys.
type computeRecord struct {
	Model   string `json:"model"`
	Hidden  []int  `json:"hidden"`
	Batch   int    `json:"batch"`
	Threads int    `json:"threads"`
	// Backend is the GEMM path: "cpu/openblas", "cpu/gonum", or the
	// GPU, e.g. "cuda:0 NVIDIA H100 80GB HBM3 (sm_90)".
	Backend string `json:"backend"`
	// Precision is what the GEMMs multiplied: fp32, bf16 or fp16; for
	// fp16, LossScale is the loss scale the run ended at and Overflows
	// how many steps overflowed float16 and were taken again.
	Precision     string  `json:"precision"`
	LossScale     float32 `json:"loss_scale,omitempty"`
	Overflows     int     `json:"overflows,omitempty"`
	Parameters    int     `json:"parameters"`
	Warmup        int     `json:"warmup"`
	Steps         int     `json:"steps"`
	Seconds       float64 `json:"seconds"`
	SamplesPerSec float64 `json:"samples_per_sec"`
	// Why says why this backend (the library loaded, or why not OpenBLAS).
	Why string `json:"why"`
	// Metrics and Timeline say the steps were observed as a worker with
	// --metrics-addr and --timeline observes its own.
	Metrics  bool `json:"metrics,omitempty"`
	Timeline bool `json:"timeline,omitempty"`
}

// observer is what a worker observes of each step, when asked to.
type observer struct {
	metrics  *metrics.Worker
	timeline *timeline.Writer
}

const benchComputeSynopsis = `Measures one worker's training compute, without communication: forward pass,
backward pass and SGD-momentum update (lr 0.01, momentum 0.9) of --model on one
batch of synthetic data, repeated; --warmup untimed steps, then --steps timed
ones. Prints samples/s. On a GPU (--device) the weights and the momentum stay
in the GPU's memory and the whole step runs there, as in PyTorch eager.
bench/peers/torch_train.py is the same in PyTorch (with --device cuda on a GPU).`

func runBenchCompute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench compute", benchComputeSynopsis, stderr)
	var mf modelFlags
	mf.register(fs)
	var (
		batch   = fs.Int("batch", 64, "samples per step")
		threads = fs.Int("threads", 1, "GEMM threads of the worker (OpenBLAS; the gonum backend is serial)")
		steps   = fs.Int("steps", 100, "timed steps")
		warmup  = fs.Int("warmup", 10, "untimed steps first")
		backend = fs.String("backend", "auto", "GEMM path: auto (OpenBLAS when it loads, else gonum), openblas or gonum")
		jsonOut = fs.Bool("json", false, "print one JSON object")
		observe = fs.Bool("metrics", false, "observe each step into Prometheus metrics, as shoal worker --metrics-addr does (to measure their cost)")
	)
	var tlf timelineFlags
	tlf.register(fs)
	var dev deviceFlags
	dev.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *batch < 1 || *steps < 1 || *warmup < 0 || *threads < 1 {
		return fmt.Errorf("--batch %d, --steps %d, --warmup %d, --threads %d: want batch, steps, threads >= 1 and warmup >= 0",
			*batch, *steps, *warmup, *threads)
	}
	spec, err := mf.spec()
	if err != nil {
		return err
	}
	place, err := dev.place(0)
	if err != nil {
		return err
	}
	var model nn.Model
	var why, where string
	if place.OnGPU() {
		if *backend != "auto" {
			return fmt.Errorf("--backend %s: a CPU GEMM path, but --device %s computes on cuda:%d", *backend, dev.choice, place.Ordinal)
		}
		pm, err := dev.onGPU(spec, place)
		if err != nil {
			return err
		}
		defer pm.close()
		model, why, where = pm.model, pm.why, pm.where
	} else {
		be, bwhy, err := computeBackend(*backend, *threads)
		if err != nil {
			return err
		}
		if model, err = nn.New(spec, be); err != nil {
			return err
		}
		why, where = bwhy, be.Name()
		if _, ok := be.(*nn.CPU); ok {
			*threads = 1 // serial
		}
	}
	var obs observer
	if *observe {
		obs.metrics = metrics.NewWorker(metrics.NewRegistry(), 0, metrics.WorkerSources{})
	}
	if obs.timeline, err = tlf.open("bench compute", "steps"); err != nil {
		return err
	}
	rec, err := benchCompute(ctx, model, *batch, *warmup, *steps, mf.seed, obs)
	if cerr := obs.timeline.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("--timeline: %w", cerr)
	}
	if err != nil {
		return err
	}
	rec.Metrics, rec.Timeline = obs.metrics != nil, obs.timeline != nil
	rec.Hidden = spec.Hidden
	if rec.Hidden == nil {
		rec.Hidden = []int{}
	}
	rec.Threads = *threads
	rec.Backend, rec.Why, rec.Precision = where, why, dev.precision.String()
	if dm, ok := model.(*nn.DeviceModel); ok && dev.precision == nn.FP16 {
		rec.LossScale, rec.Overflows = dm.LossScale()
	}
	if *jsonOut {
		return printJSONLine(stdout, rec)
	}
	prec := ""
	if dev.precision.Half() {
		prec = ", " + rec.Precision
	}
	_, err = fmt.Fprintf(stdout, "%s, batch %d, %d thread(s), %s%s: %.0f samples/s (%d steps in %.3f s)\n%s\n",
		describeModel(model), rec.Batch, rec.Threads, rec.Backend, prec, rec.SamplesPerSec, rec.Steps, rec.Seconds, why)
	return err
}

// computeBackend returns the backend --backend names, with threads GEMM
// threads, and why it is the one.
func computeBackend(name string, threads int) (nn.Backend, string, error) {
	switch name {
	case "auto":
		be, why := nn.NewBestCPU(threads)
		return be, why, nil
	case "openblas":
		o, err := nn.NewOpenBLAS(threads)
		if err != nil {
			return nil, "", fmt.Errorf("--backend openblas: %w", err)
		}
		return o, o.Describe(), nil
	case "gonum":
		return nn.NewCPU(), "gonum: asked for with --backend gonum", nil
	}
	return nil, "", fmt.Errorf("--backend %q: want auto, openblas or gonum", name)
}

// benchCompute times training steps of model on one synthetic batch.
func benchCompute(ctx context.Context, model nn.Model, batch, warmup, steps int, seed uint64, obs observer) (computeRecord, error) {
	s, err := newComputeStep(model, batch, seed, obs)
	if err != nil {
		return computeRecord{}, err
	}
	for range warmup {
		if err := s.step(ctx); err != nil {
			return computeRecord{}, err
		}
	}
	start := time.Now()
	for range steps {
		if err := s.step(ctx); err != nil {
			return computeRecord{}, err
		}
	}
	secs := time.Since(start).Seconds()
	return computeRecord{
		Model: model.Name(), Batch: batch, Parameters: len(s.params), Warmup: warmup, Steps: steps,
		Seconds: secs, SamplesPerSec: float64(batch*steps) / secs,
	}, nil
}

// computeStep is the training step shoal bench compute times: the model,
// its weights, gradients and optimizer, and the one batch it trains on.
type computeStep struct {
	model    nn.Model
	resident *nn.DeviceModel // model, when it trains on a device
	params   []float32
	grads    []float32
	x        []float32
	labels   []int32
	ocfg     optim.Config
	opt      *optim.Optimizer
	obs      observer
}

// newComputeStep makes a batch of batch synthetic samples for model,
// initialises its weights from seed and, on a device, loads them there.
func newComputeStep(model nn.Model, batch int, seed uint64, obs observer) (*computeStep, error) {
	x, labels, err := syntheticBatch(model, batch, seed)
	if err != nil {
		return nil, err
	}
	s := &computeStep{model: model, x: x, labels: labels, obs: obs}
	s.params = make([]float32, model.Layout().Size())
	s.grads = make([]float32, len(s.params))
	model.Init(s.params, seed)
	s.ocfg = optim.DefaultConfig()
	s.ocfg.Algorithm = optim.Momentum
	if s.opt, err = optim.New(s.ocfg, len(s.params)); err != nil {
		return nil, err
	}
	// A model on a device trains there, weights resident (unobserved: a
	// timeline or metrics time the host's view of a step).
	s.resident, _ = model.(*nn.DeviceModel)
	if s.resident != nil && obs != (observer{}) {
		return nil, fmt.Errorf("--metrics and --timeline: not with a model on %s", s.resident.Device().Name())
	}
	if s.resident != nil {
		if err := s.resident.Load(s.params); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// syntheticBatch is one batch of batch synthetic samples shaped for
// model: the inputs and their labels.
func syntheticBatch(model nn.Model, batch int, seed uint64) ([]float32, []int32, error) {
	spec := nn.DefaultSpec(model.Name())
	cfg := data.DefaultSyntheticConfig()
	cfg.Train, cfg.Test, cfg.Seed = batch, 1, seed
	cfg.C, cfg.H, cfg.W, cfg.Classes = spec.Channels, spec.Height, spec.Width, model.Classes()
	train, _, err := data.Synthetic(cfg)
	if err != nil {
		return nil, nil, err
	}
	idx := make([]int, batch)
	for i := range idx {
		idx[i] = i
	}
	x := make([]float32, batch*model.InputSize())
	labels := make([]int32, batch)
	train.Gather(idx, x, labels)
	return x, labels, nil
}

// step takes one training step.
func (s *computeStep) step(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// A worker enters the scheduler every step when it communicates;
	// this loop, which does not, yields instead. A goroutine that has
	// not been scheduled for 10ms loses its P when it is next in a cgo
	// call (an OpenBLAS GEMM), after which sysmon polls every 20µs for
	// a while: about ten context switches per MLP step, and 3-15% more
	// CPU per step on a busy machine.
	runtime.Gosched()
	if s.resident != nil {
		loss, _ := s.resident.TrainStep(s.x, s.labels, float32(s.ocfg.LR), float32(s.ocfg.Momentum))
		if math.IsNaN(loss) {
			return fmt.Errorf("step on %s: loss is NaN: %w", s.resident.Device().Name(), s.resident.Err())
		}
		return nil
	}
	if s.obs == (observer{}) {
		s.model.ForwardBackward(s.params, s.grads, s.x, s.labels)
		return s.opt.Step(s.params, s.grads)
	}
	return s.observedStep()
}

// observedStep takes one training step on the host, observed as
// worker.Worker and worker.Ring observe a step.
func (s *computeStep) observedStep() error {
	obs := s.obs
	t0 := time.Now()
	if phased, ok := s.model.(nn.Phased); ok && obs.timeline != nil {
		var tf time.Time
		phased.ForwardBackwardPhased(s.params, s.grads, s.x, s.labels, func() { tf = time.Now() }, nil)
		obs.timeline.Span(0, "forward", t0, tf.Sub(t0))
		obs.timeline.Since(0, "backward", tf)
	} else {
		s.model.ForwardBackward(s.params, s.grads, s.x, s.labels)
	}
	to := time.Now()
	err := s.opt.Step(s.params, s.grads)
	obs.timeline.Since(0, "optimizer step", to)
	if obs.metrics != nil {
		obs.metrics.Step(worker.StepTimes{Step: time.Since(t0), Compute: to.Sub(t0), Samples: len(s.labels)})
	}
	return err
}
