package harness

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/internal/netshape"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/sim"
)

// SimulateConfig is one shoal bench simulate: bench train's plan,
// predicted by the simulator.
type SimulateConfig struct {
	Plan bench.Plan
	// NIC is the NIC model the runs not on loopback go through.
	NIC netshape.Config
	// Out is the folder for results.json, report.md and the plots.
	Out string
	// Measured, when not nil, is the results whose compute per step (and
	// its spread, and the workers' start times) the runs take.
	Measured *bench.Results
	// Host is the host whose CPU per byte of a PS transfer is fitted.
	Host Host
	// ApplyGbps is the optimizer's speed, GB/s (0: measure it here);
	// Jitter the spread of each step's compute where Measured does not
	// give it.
	ApplyGbps float64
	Jitter    float64
	// TrainLen is the training set's size, for runs given in epochs.
	TrainLen int
	// Model is the harness's model name's spec, batch and seed.
	Model func(name string) (ModelArgs, error)
	// Command and Revision are the results' command line and revision.
	Command  []string
	Revision string
}

// ModelArgs is a model of the harness as shoal train's flags in
// bench.Models build it.
type ModelArgs struct {
	Spec  nn.Spec
	Batch int
	Seed  uint64
}

// Validate says what is wrong with cfg, in the flags' words.
func (cfg SimulateConfig) Validate() error {
	if cfg.ApplyGbps < 0 || cfg.Jitter < 0 || math.IsNaN(cfg.ApplyGbps) || math.IsNaN(cfg.Jitter) {
		return fmt.Errorf("--apply-gbps %g, --jitter %g: want >= 0", cfg.ApplyGbps, cfg.Jitter)
	}
	return nil
}

// simulation is one Simulate: cfg and what every run's prediction
// shares.
type simulation struct {
	SimulateConfig
	models     map[string]*simModel // the harness's models as the simulator takes them
	applyBytes float64              // the optimizer's speed, bytes/s
}

// Simulate predicts cfg's runs, prints a line per run, and writes
// results.json, report.md and the plots into cfg.Out, all marked
// simulated.
func Simulate(ctx context.Context, cfg SimulateConfig, stdout io.Writer) error {
	p := &simulation{SimulateConfig: cfg, models: map[string]*simModel{}, applyBytes: cfg.ApplyGbps * 1e9}
	if p.applyBytes == 0 {
		p.applyBytes = sim.MeasureOptimizer(1 << 22)
	}
	res := newResults(cfg.Command, cfg.Revision, true)
	if err := p.fitHost(stdout); err != nil {
		return err
	}
	for i, r := range p.Plan.Runs {
		in, id, err := p.input(ctx, r)
		if err != nil {
			return err
		}
		rec, err := bench.Simulate(r, in)
		if err != nil {
			fmt.Fprintf(stdout, "[%d/%d] %s: left out: %v\n", i+1, len(p.Plan.Runs), id, err)
			continue
		}
		res.Runs = append(res.Runs, rec)
		fmt.Fprintf(stdout, "[%d/%d] %s: %s samples/s, step mean %.2f ms (compute %.2f ms), simulated\n",
			i+1, len(p.Plan.Runs), id, strconv.FormatFloat(math.Round(rec.SamplesPerSec), 'g', -1, 64), 1e3*rec.StepTime.Step.Mean, 1e3*rec.StepTime.Compute.Mean)
	}
	bench.ScalingEfficiency(res.Runs)
	return WriteOutputs(cfg.Out, res, stdout)
}

// fitHost fits the host's CPU per byte of a PS transfer to its loopback
// async run, when there is one, and says what it found.
func (p *simulation) fitHost(stdout io.Writer) error {
	host := &p.Host
	if host.src == nil {
		fmt.Fprintln(stdout, "CPU per byte of a PS transfer: not modelled (no loopback async run to fit it to: --cpu-calibrate)")
		return nil
	}
	var err error
	if host.perByte, err = p.fit(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "CPU per byte of a PS transfer: %.3f ns, fitted to %s of %s (%.2f ms a step), on a host of %d cores\n",
		1e9*host.perByte, host.src.ID, host.file, 1e3*host.src.StepTime.Step.Mean, host.cores)
	return nil
}

// input is what the simulator takes to predict run r, and the ID that
// bench.Simulate gives its record. The compute per step is Measured's
// (the run of the same ID, else the model's first), or else measured here.
func (p *simulation) input(ctx context.Context, r bench.Run) (bench.SimInput, string, error) {
	m, err := p.model(r.Model)
	if err != nil {
		return bench.SimInput{}, "", err
	}
	in := bench.SimInput{Layers: m.layers, LayerWork: m.work, Batch: m.Batch, Jitter: p.Jitter, ApplyBytesPerSec: p.applyBytes, Command: p.Command,
		CPUPerByte: p.Host.perByte, HostCores: p.Host.cores}
	if !r.Loopback {
		// The NIC model's, buckets and all: the runs predicted went
		// through it.
		in.NICGbps, in.RTTMillis = p.NIC.Gbps, float64(p.NIC.RTT)/float64(time.Millisecond)
		in.NICBurst = float64(netshape.DefaultBurst(p.NIC.Gbps))
	}
	id := r.ID("", in.NICGbps) // as bench.Simulate names the record
	if p.TrainLen > 0 {
		// Each worker's batches of its share of the data, as its loader
		// cuts them (the last short batch kept).
		s, err := data.NewSampler(p.TrainLen, 0, r.Workers, 0, false)
		if err != nil {
			return bench.SimInput{}, "", err
		}
		in.StepsPerEpoch = int64(s.Steps(m.Batch, false))
	}
	if c, ok := Calibration(p.Measured, id, bench.Models[r.Model].Label); ok {
		in.Calibrate(c.StepTime.Compute)
		if c.ID == id {
			in.Start = c.StartOffsets
		}
	} else if in.Compute, err = m.measure(ctx); err != nil {
		return bench.SimInput{}, "", err
	}
	return in, id, nil
}

// simModel is a model of the harness as the simulator takes it.
type simModel struct {
	ModelArgs
	layers  []int64
	work    []float64 // the tensors' shares of backward (nn.TensorWork)
	compute float64   // measured here, once a run needs it
}

// measure is one step's forward and backward of m here, on one thread
// (shoal bench compute's loop), measured once.
func (m *simModel) measure(ctx context.Context) (float64, error) {
	if m.compute > 0 {
		return m.compute, nil
	}
	be, _ := nn.NewBestCPU(1)
	fast, err := nn.New(m.Spec, be)
	if err != nil {
		return 0, err
	}
	m.compute, err = StepSeconds(ctx, fast, m.Batch, 3, 10, m.Seed)
	return m.compute, err
}

// model is the simulator's view of the harness's model name: its layer
// sizes and batch (cached).
func (p *simulation) model(name string) (*simModel, error) {
	if m, ok := p.models[name]; ok {
		return m, nil
	}
	args, err := p.Model(name)
	if err != nil {
		return nil, err
	}
	_, layers, work, err := ModelLayers(args.Spec)
	if err != nil {
		return nil, err
	}
	m := &simModel{ModelArgs: args, layers: layers, work: work}
	p.models[name] = m
	return m, nil
}

// Host is the host bench simulate predicts shoal bench train on: its
// cores and its CPU cost per byte of a PS transfer, fitted to src, a
// loopback run of file.
type Host struct {
	file    string
	src     *bench.Record
	cores   int
	perByte float64
}

// LoadCalibration loads --calibrate's results, which must be measured.
func LoadCalibration(file string) (*bench.Results, error) {
	measured, err := bench.Load(file)
	if err != nil {
		return nil, fmt.Errorf("--calibrate: %w", err)
	}
	if measured.Simulated {
		return nil, fmt.Errorf("--calibrate %s: these results are simulated; calibrate from measured ones (shoal bench train's)", file)
	}
	return measured, nil
}

// HostCPU finds the run to fit the host's CPU per byte to: in the
// results of file, else in measured (--calibrate's); the host's cores
// are those results' machine's. calibrated names measured's file.
func HostCPU(file, calibrated string, measured *bench.Results) (Host, error) {
	rs := measured
	if file != "" {
		var err error
		if rs, err = bench.Load(file); err != nil {
			return Host{}, fmt.Errorf("--cpu-calibrate: %w", err)
		}
		if rs.Simulated {
			return Host{}, fmt.Errorf("--cpu-calibrate %s: these results are simulated; fit to measured ones (shoal bench train's)", file)
		}
	}
	if rs == nil {
		return Host{}, nil
	}
	h := Host{file: file, src: bench.CPUSource(rs), cores: rs.Machine.CPUs}
	if h.file == "" {
		h.file = calibrated
	}
	if h.src == nil && file != "" {
		return Host{}, fmt.Errorf("--cpu-calibrate %s: no async run of 2 or more workers without the NIC model to fit the CPU per byte to (make bench's mlp/async/w2/s1)", file)
	}
	return h, nil
}

// fit is the CPU per byte with which the simulator reproduces the
// host's source run.
func (p *simulation) fit() (float64, error) {
	h := p.Host
	key := ""
	for k, m := range bench.Models {
		if m.Label == h.src.Model {
			key = k
		}
	}
	m, err := p.model(key)
	if err != nil {
		return 0, fmt.Errorf("fitting the CPU per byte to %s: %w", h.src.ID, err)
	}
	return bench.FitCPUPerByte(h.src, bench.SimInput{Layers: m.layers, LayerWork: m.work, Batch: h.src.Batch, ApplyBytesPerSec: p.applyBytes,
		HostCores: h.cores, Command: []string{"fit"}})
}

// Calibration is the measured run id in measured, or else the first run
// of the same model, whose compute per step (and, for the run itself, its
// workers' start times) a prediction takes; false when measured has
// neither.
func Calibration(measured *bench.Results, id, model string) (*bench.Record, bool) {
	if measured == nil {
		return nil, false
	}
	var first *bench.Record
	for i := range measured.Runs {
		r := &measured.Runs[i]
		if r.Peer != "" || r.Error != "" || r.StepTime.Compute.Mean <= 0 {
			continue
		}
		if r.ID == id {
			return r, true
		}
		if first == nil && r.Model == model {
			first = r
		}
	}
	return first, first != nil
}
