package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"runtime"
	"time"

	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/gpu"
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

// benchComputeFlags are shoal bench compute's flags.
type benchComputeFlags struct {
	mf      modelFlags
	batch   int
	threads int
	steps   int
	warmup  int
	backend string
	jsonOut bool
	observe bool // --metrics
	tlf     timelineFlags
	dev     deviceFlags
}

func (f *benchComputeFlags) register(fs *flag.FlagSet) {
	f.mf.register(fs)
	fs.IntVar(&f.batch, "batch", 64, "samples per step")
	fs.IntVar(&f.threads, "threads", 1, "GEMM threads of the worker (OpenBLAS; the gonum backend is serial)")
	fs.IntVar(&f.steps, "steps", 100, "timed steps")
	fs.IntVar(&f.warmup, "warmup", 10, "untimed steps first")
	fs.StringVar(&f.backend, "backend", "auto", "GEMM path: auto (OpenBLAS when it loads, else gonum), openblas or gonum")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON object")
	fs.BoolVar(&f.observe, "metrics", false, "observe each step into Prometheus metrics, as shoal worker --metrics-addr does (to measure their cost)")
	f.tlf.register(fs)
	f.dev.register(fs)
}

// benchComputeRun is one shoal bench compute, its flags checked: the
// model's spec and where it computes.
type benchComputeRun struct {
	benchComputeFlags
	spec  nn.Spec
	place gpu.Placement
}

// parseBenchCompute reads and checks shoal bench compute's flags, and
// places the model.
func parseBenchCompute(args []string, stderr io.Writer) (*benchComputeRun, error) {
	fs := newFlagSet("bench compute", benchComputeSynopsis, stderr)
	b := &benchComputeRun{}
	b.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if b.batch < 1 || b.steps < 1 || b.warmup < 0 || b.threads < 1 {
		return nil, fmt.Errorf("--batch %d, --steps %d, --warmup %d, --threads %d: want batch, steps, threads >= 1 and warmup >= 0",
			b.batch, b.steps, b.warmup, b.threads)
	}
	var err error
	if b.spec, err = b.mf.spec(); err != nil {
		return nil, err
	}
	if b.place, err = b.dev.place(0); err != nil {
		return nil, err
	}
	return b, nil
}

func runBenchCompute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	b, err := parseBenchCompute(args, stderr)
	if err != nil {
		return err
	}
	pm, err := b.buildModel()
	if err != nil {
		return err
	}
	defer pm.close()
	rec, err := b.measure(ctx, pm.model)
	if err != nil {
		return err
	}
	return b.report(stdout, rec, pm)
}

// buildModel builds the model to time: on the GPU --device places it on,
// else on --backend's CPU GEMM path (the gonum one serial: threads is
// then 1).
func (b *benchComputeRun) buildModel() (placedModel, error) {
	if b.place.OnGPU() {
		if b.backend != "auto" {
			return placedModel{}, fmt.Errorf("--backend %s: a CPU GEMM path, but --device %s computes on cuda:%d", b.backend, b.dev.choice, b.place.Ordinal)
		}
		return b.dev.onGPU(b.spec, b.place)
	}
	be, why, err := computeBackend(b.backend, b.threads)
	if err != nil {
		return placedModel{}, err
	}
	model, err := nn.New(b.spec, be)
	if err != nil {
		return placedModel{}, err
	}
	if _, ok := be.(*nn.CPU); ok {
		b.threads = 1 // serial
	}
	return placedModel{model: model, where: be.Name(), why: why, close: func() {}}, nil
}

// measure times the steps of model, observed into metrics with
// --metrics and into a timeline with --timeline.
func (b *benchComputeRun) measure(ctx context.Context, model nn.Model) (computeRecord, error) {
	var obs observer
	if b.observe {
		obs.metrics = metrics.NewWorker(metrics.NewRegistry(), 0, metrics.WorkerSources{})
	}
	var err error
	if obs.timeline, err = b.tlf.open("bench compute", "steps"); err != nil {
		return computeRecord{}, err
	}
	rec, err := benchCompute(ctx, model, b.batch, b.warmup, b.steps, b.mf.seed, obs)
	if cerr := obs.timeline.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("--timeline: %w", cerr)
	}
	if err != nil {
		return computeRecord{}, err
	}
	rec.Metrics, rec.Timeline = obs.metrics != nil, obs.timeline != nil
	return rec, nil
}

// report completes rec with the model's shape, threads, backend and
// precision, and prints it: a line and why this backend, or with --json
// the object.
func (b *benchComputeRun) report(stdout io.Writer, rec computeRecord, pm placedModel) error {
	rec.Hidden = b.spec.Hidden
	if rec.Hidden == nil {
		rec.Hidden = []int{}
	}
	rec.Threads = b.threads
	rec.Backend, rec.Why, rec.Precision = pm.where, pm.why, b.dev.precision.String()
	if dm, ok := pm.model.(*nn.DeviceModel); ok && b.dev.precision == nn.FP16 {
		rec.LossScale, rec.Overflows = dm.LossScale()
	}
	if b.jsonOut {
		return printJSONLine(stdout, rec)
	}
	prec := ""
	if b.dev.precision.Half() {
		prec = ", " + rec.Precision
	}
	_, err := fmt.Fprintf(stdout, "%s, batch %d, %d thread(s), %s%s: %.0f samples/s (%d steps in %.3f s)\n%s\n",
		describeModel(pm.model), rec.Batch, rec.Threads, rec.Backend, prec, rec.SamplesPerSec, rec.Steps, rec.Seconds, pm.why)
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
