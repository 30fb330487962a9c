package harness

import (
	"context"
	"fmt"
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

// ComputeRecord is the result of `shoal bench compute`, the object
// `--json` prints; bench/peers/torch_train.py prints the same keys.
type ComputeRecord struct {
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
	// Round is the round of a sweep (--sweep) the record is of, from 1;
	// 0 outside a sweep.
	Round int `json:"round,omitempty"`
	// Graphs, on a device, says whether the steps were replayed as CUDA
	// graphs: "on", or "off: " and why.
	Graphs string `json:"graphs,omitempty"`
	// BatchOnDevice says the batch was uploaded once and stayed on the
	// device (--batch-on-device), as the PyTorch peer keeps its batch;
	// otherwise every step uploads it, as a training worker does.
	BatchOnDevice bool `json:"batch_on_device,omitempty"`
}

// Observer is what a worker observes of each step, when asked to; the
// zero Observer observes nothing.
type Observer struct {
	Metrics  *metrics.Worker
	Timeline *timeline.Writer
}

// ComputeConfig is one timing of training steps on one synthetic batch:
// Warmup untimed steps, then Steps timed ones, of Batch samples each, the
// weights and the batch from Seed. On a device, BatchOnDevice uploads the
// batch once instead of every step.
type ComputeConfig struct {
	Batch, Warmup, Steps int
	Seed                 uint64
	Observer             Observer
	BatchOnDevice        bool
}

// DefaultComputeConfig is shoal bench compute's defaults.
func DefaultComputeConfig() ComputeConfig {
	return ComputeConfig{Batch: 64, Warmup: 10, Steps: 100, Seed: 1}
}

// Validate says what is wrong with cfg, in the flags' words; threads is
// the GEMM threads, checked with them.
func (cfg ComputeConfig) Validate(threads int) error {
	if cfg.Batch < 1 || cfg.Steps < 1 || cfg.Warmup < 0 || threads < 1 {
		return fmt.Errorf("--batch %d, --steps %d, --warmup %d, --threads %d: want batch, steps, threads >= 1 and warmup >= 0",
			cfg.Batch, cfg.Steps, cfg.Warmup, threads)
	}
	return nil
}

// Compute times training steps of model (forward, backward and an
// SGD-momentum update) on one synthetic batch; a model on a device
// trains there, weights resident. The record has the model's name, the
// batch, the parameters and the timing; the caller fills in the rest.
func Compute(ctx context.Context, model nn.Model, cfg ComputeConfig) (ComputeRecord, error) {
	s, err := newComputeStep(model, cfg.Batch, cfg.Seed, cfg.Observer)
	if err != nil {
		return ComputeRecord{}, err
	}
	if cfg.BatchOnDevice {
		if s.resident == nil {
			return ComputeRecord{}, fmt.Errorf("--batch-on-device: %s computes on the CPU, where the batch is in memory already; it is for a model on a GPU (--device)", model.Name())
		}
		if err := s.resident.KeepBatch(s.x, s.labels); err != nil {
			return ComputeRecord{}, err
		}
		s.kept = true
	}
	for range cfg.Warmup {
		if err := s.step(ctx); err != nil {
			return ComputeRecord{}, err
		}
	}
	start := time.Now()
	for range cfg.Steps {
		if err := s.step(ctx); err != nil {
			return ComputeRecord{}, err
		}
	}
	secs := time.Since(start).Seconds()
	return ComputeRecord{
		Model: model.Name(), Batch: cfg.Batch, Parameters: len(s.params), Warmup: cfg.Warmup, Steps: cfg.Steps,
		Seconds: secs, SamplesPerSec: float64(cfg.Batch*cfg.Steps) / secs, BatchOnDevice: cfg.BatchOnDevice,
	}, nil
}

// StepSeconds is one training step of model at batch, measured here,
// unobserved: warmup untimed steps, then the mean of steps timed ones.
func StepSeconds(ctx context.Context, model nn.Model, batch, warmup, steps int, seed uint64) (float64, error) {
	rec, err := Compute(ctx, model, ComputeConfig{Batch: batch, Warmup: warmup, Steps: steps, Seed: seed})
	if err != nil {
		return 0, err
	}
	return rec.Seconds / float64(rec.Steps), nil
}

// CPUBackend returns the CPU GEMM path that name (shoal bench compute's
// --backend: auto, openblas or gonum) picks, with threads GEMM threads,
// and why it is the one.
func CPUBackend(name string, threads int) (nn.Backend, string, error) {
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

// computeStep is the training step Compute times: the model, its
// weights, gradients and optimizer, and the one batch it trains on.
type computeStep struct {
	model    nn.Model
	resident *nn.DeviceModel // model, when it trains on a device
	kept     bool            // the batch is on the device (KeepBatch)
	params   []float32
	grads    []float32
	x        []float32
	labels   []int32
	ocfg     optim.Config
	opt      *optim.Optimizer
	obs      Observer
}

// newComputeStep makes a batch of batch synthetic samples for model,
// initialises its weights from seed and, on a device, loads them there.
func newComputeStep(model nn.Model, batch int, seed uint64, obs Observer) (*computeStep, error) {
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
	if s.resident != nil && obs != (Observer{}) {
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
		return nil, nil, fmt.Errorf("--batch %d: a batch of synthetic data that large does not fit: %w", batch, err)
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
	// a while: context switches every MLP step, and more CPU per step
	// on a busy machine (docs/BENCHMARKS.md).
	runtime.Gosched()
	if s.resident != nil {
		var loss float64
		if s.kept {
			loss, _ = s.resident.TrainKept(float32(s.ocfg.LR), float32(s.ocfg.Momentum))
		} else {
			loss, _ = s.resident.TrainStep(s.x, s.labels, float32(s.ocfg.LR), float32(s.ocfg.Momentum))
		}
		if math.IsNaN(loss) {
			return fmt.Errorf("step on %s: loss is NaN: %w", s.resident.Device().Name(), s.resident.Err())
		}
		return nil
	}
	if s.obs == (Observer{}) {
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
	if phased, ok := s.model.(nn.Phased); ok && obs.Timeline != nil {
		var tf time.Time
		phased.ForwardBackwardPhased(s.params, s.grads, s.x, s.labels, func() { tf = time.Now() }, nil)
		obs.Timeline.Span(0, "forward", t0, tf.Sub(t0))
		obs.Timeline.Since(0, "backward", tf)
	} else {
		s.model.ForwardBackward(s.params, s.grads, s.x, s.labels)
	}
	to := time.Now()
	err := s.opt.Step(s.params, s.grads)
	obs.Timeline.Since(0, "optimizer step", to)
	if obs.Metrics != nil {
		obs.Metrics.Step(worker.StepTimes{Step: time.Since(t0), Compute: to.Sub(t0), Samples: len(s.labels)})
	}
	return err
}

// CPUModel builds spec's model on the CPU GEMM path that backend names
// (see CPUBackend) with threads GEMM threads, and says where it computes,
// why there, and with how many threads (the gonum path is serial: 1).
func CPUModel(spec nn.Spec, backend string, threads int) (model nn.Model, where, why string, usedThreads int, err error) {
	be, why, err := CPUBackend(backend, threads)
	if err != nil {
		return nil, "", "", 0, err
	}
	if model, err = nn.New(spec, be); err != nil {
		return nil, "", "", 0, err
	}
	if _, ok := be.(*nn.CPU); ok {
		threads = 1 // serial
	}
	return model, be.Name(), why, threads, nil
}

// Complete fills in what Compute leaves to its caller: the model's hidden
// widths (never null), the GEMM threads, where the model computed and
// why, and in what precision; on a device, whether its steps were CUDA
// graphs, and in fp16 the loss scale it ended at and its overflows.
func (rec *ComputeRecord) Complete(spec nn.Spec, threads int, where, why string, model nn.Model, precision nn.Precision) {
	rec.Hidden = spec.Hidden
	if rec.Hidden == nil {
		rec.Hidden = []int{}
	}
	rec.Threads = threads
	rec.Backend, rec.Why, rec.Precision = where, why, precision.String()
	if dm, ok := model.(*nn.DeviceModel); ok && precision == nn.FP16 {
		rec.LossScale, rec.Overflows = dm.LossScale()
	}
	if dm, ok := model.(*nn.DeviceModel); ok {
		rec.Graphs = "on"
		if _, off := dm.Graphs(); off != "" {
			rec.Graphs = "off: " + off
		}
	}
}

// Text is rec as shoal bench compute prints it without --json, for the
// model described as name: a line, and why this backend.
func (rec ComputeRecord) Text(name string) string {
	prec := ""
	if p, err := nn.ParsePrecision(rec.Precision); err == nil && p.Half() {
		prec = ", " + rec.Precision
	}
	return fmt.Sprintf("%s, batch %d, %d thread(s), %s%s: %.0f samples/s (%d steps in %.3f s)\n%s\n",
		name, rec.Batch, rec.Threads, rec.Backend, prec, rec.SamplesPerSec, rec.Steps, rec.Seconds, rec.Why)
}
