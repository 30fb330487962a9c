package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/shoalml/shoal/bench/harness"
	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/gpu"
	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/nn"
)

const benchComputeSynopsis = `Measures one worker's training compute, without communication: forward pass,
backward pass and SGD-momentum update (lr 0.01, momentum 0.9) of --model on one
batch of synthetic data, repeated; --warmup untimed steps, then --steps timed
ones. Prints samples/s. On a GPU (--device) the weights and the momentum stay
in the GPU's memory and the whole step runs there, as in PyTorch eager.
bench/peers/torch_train.py is the same in PyTorch (with --device cuda on a GPU).
--sweep times several models and batches in one process (each point --rounds
times, in each of --precisions), one line or JSON object per point.`

// computeRecord is the object `shoal bench compute --json` prints (info_test
// reads it).
type computeRecord = harness.ComputeRecord

// benchComputeFlags are shoal bench compute's flags.
type benchComputeFlags struct {
	arch     flags.Model
	cfg      harness.ComputeConfig
	threads  int
	backend  string
	jsonOut  bool
	observe  bool // --metrics
	timeline flags.Timeline
	device   flags.Device

	sweep      string // --sweep, with --precisions and --rounds
	precisions string
	rounds     int
}

func (f *benchComputeFlags) register(fs *flag.FlagSet) {
	def := harness.DefaultComputeConfig()
	f.arch.Register(fs)
	fs.IntVar(&f.cfg.Batch, "batch", def.Batch, "samples per step")
	fs.IntVar(&f.threads, "threads", 1, "GEMM threads of the worker (OpenBLAS; the gonum backend is serial)")
	fs.IntVar(&f.cfg.Steps, "steps", def.Steps, "timed steps")
	fs.IntVar(&f.cfg.Warmup, "warmup", def.Warmup, "untimed steps first")
	fs.StringVar(&f.backend, "backend", "auto", "GEMM path: auto (OpenBLAS when it loads, else gonum), openblas or gonum")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON object")
	fs.BoolVar(&f.observe, "metrics", false, "observe each step into Prometheus metrics, as shoal worker --metrics-addr does (to measure their cost)")
	f.timeline.Register(fs)
	f.device.Register(fs)
	fs.StringVar(&f.sweep, "sweep", "", "models and their batches to time in turn, e.g. 'mlp:64,256,1024,4096 cnn:64,256' (instead of --model and --batch; --hidden is the MLP's)")
	fs.StringVar(&f.precisions, "precisions", "", "with --sweep: the precisions to time each point in, e.g. fp32,bf16,fp16 (default: --precision)")
	fs.IntVar(&f.rounds, "rounds", 1, "with --sweep: how many times to time each point (the rounds outermost)")
	fs.BoolVar(&f.cfg.BatchOnDevice, "batch-on-device", false, "on a GPU, upload the batch once and keep it there, as bench/peers/torch_train.py keeps its own (default: every step uploads it, as a training worker does)")
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
	fs := flags.NewFlagSet("bench compute", benchComputeSynopsis, stderr)
	b := &benchComputeRun{}
	b.register(fs)
	if err := flags.Parse(fs, args); err != nil {
		return nil, err
	}
	if err := flags.ExpandHarnessModel(fs); err != nil { // --model big, as shoal bench train --models names it
		return nil, err
	}
	if err := b.cfg.Validate(b.threads); err != nil {
		return nil, err
	}
	var err error
	if b.spec, err = b.arch.Spec(); err != nil {
		return nil, err
	}
	if b.place, err = b.device.Place(0); err != nil {
		return nil, err
	}
	b.cfg.Seed = b.arch.Seed
	if b.sweep == "" && (b.precisions != "" || b.rounds != 1) {
		return nil, fmt.Errorf("--precisions and --rounds: only with --sweep")
	}
	return b, nil
}

func runBenchCompute(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	b, err := parseBenchCompute(args, stderr)
	if err != nil {
		return err
	}
	if b.sweep != "" {
		return b.runSweep(ctx, stdout)
	}
	pm, err := b.buildModel(b.spec)
	if err != nil {
		return err
	}
	defer pm.Close()
	rec, err := b.measure(ctx, pm.Model)
	if err != nil {
		return err
	}
	return b.report(stdout, rec, pm)
}

// buildModel builds spec's model to time: on the GPU --device places it
// on, else on --backend's CPU GEMM path (the gonum one serial: threads is
// then 1).
func (b *benchComputeRun) buildModel(spec nn.Spec) (flags.Placed, error) {
	if b.place.OnGPU() {
		if b.backend != "auto" {
			return flags.Placed{}, fmt.Errorf("--backend %s: a CPU GEMM path, but --device %s computes on cuda:%d", b.backend, b.device.Choice, b.place.Ordinal)
		}
		return b.device.OnGPU(spec, b.place)
	}
	model, where, why, threads, err := harness.CPUModel(spec, b.backend, b.threads)
	b.threads = threads
	return flags.Placed{Model: model, Where: where, Why: why, Close: func() {}}, err
}

// measure times the steps of model, observed into metrics with
// --metrics and into a timeline with --timeline.
func (b *benchComputeRun) measure(ctx context.Context, model nn.Model) (harness.ComputeRecord, error) {
	cfg := b.cfg
	if b.observe {
		cfg.Observer.Metrics = metrics.NewWorker(metrics.NewRegistry(), 0, metrics.WorkerSources{})
	}
	var err error
	if cfg.Observer.Timeline, err = b.timeline.Open("bench compute", "steps"); err != nil {
		return harness.ComputeRecord{}, err
	}
	rec, err := harness.Compute(ctx, model, cfg)
	if cerr := cfg.Observer.Timeline.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("--timeline: %w", cerr)
	}
	if err != nil {
		return harness.ComputeRecord{}, err
	}
	rec.Metrics, rec.Timeline = cfg.Observer.Metrics != nil, cfg.Observer.Timeline != nil
	return rec, nil
}

// report completes rec with the model's shape, threads, backend and
// precision, and prints it: a line and why this backend, or with --json
// the object.
func (b *benchComputeRun) report(stdout io.Writer, rec harness.ComputeRecord, pm flags.Placed) error {
	rec.Complete(b.spec, b.threads, pm.Where, pm.Why, pm.Model, b.device.Precision)
	if b.jsonOut {
		return printJSONLine(stdout, rec)
	}
	_, err := fmt.Fprint(stdout, rec.Text(flags.DescribeModel(pm.Model)))
	return err
}

// runSweep is shoal bench compute --sweep: harness.Sweep over the points,
// each record printed as it comes.
func (b *benchComputeRun) runSweep(ctx context.Context, stdout io.Writer) error {
	if b.timeline.Path != "" || b.observe {
		return fmt.Errorf("--sweep: not with --metrics or --timeline")
	}
	cfg := harness.SweepConfig{Hidden: b.spec.Hidden, Rounds: b.rounds, Warmup: b.cfg.Warmup, Steps: b.cfg.Steps, Seed: b.cfg.Seed, BatchOnDevice: b.cfg.BatchOnDevice}
	cfg.Precisions = []nn.Precision{b.device.Precision}
	var err error
	if b.precisions != "" {
		if cfg.Precisions, err = harness.ParsePrecisions(b.precisions); err != nil {
			return err
		}
	}
	if cfg.Models, err = harness.ParseSweep(b.sweep); err != nil {
		return err
	}
	build := func(spec nn.Spec) (harness.Built, error) {
		pm, err := b.buildModel(spec)
		return harness.Built{Model: pm.Model, Where: pm.Where, Why: pm.Why, Threads: b.threads, Close: pm.Close}, err
	}
	return harness.Sweep(ctx, cfg, build, func(rec harness.ComputeRecord) error {
		if b.jsonOut {
			return printJSONLine(stdout, rec)
		}
		_, err := fmt.Fprintf(stdout, "round %d: %s", rec.Round, rec.Text(rec.Model))
		return err
	})
}
