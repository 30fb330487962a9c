package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/bench/harness"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/internal/netshape"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/sim"
)

const benchSimulateSynopsis = `Predicts shoal bench train's runs with the simulator instead of running them:
the same plan flags (the built-in plan of make bench, or a grid), the same NIC
model (its rate, RTT and token buckets), and the same output (results.json in the harness's schema, report.md and
the plots, all marked simulated) under the same run IDs, so that shoal bench
diff puts a prediction beside a measurement. Each model's compute per step is
--calibrate's (a bench train results.json: the run of the same ID, else the
model's first) or else measured here on one thread, and the workers start
when the run of the same ID recorded they did (else all at once); the
optimizer's speed is --apply-gbps or measured here; a PS transfer's CPU cost
per byte on the host's shared cores is fitted to the loopback async run of
--cpu-calibrate (default: --calibrate). The PyTorch peers are not simulated.`

// simModel is a model of the harness as the simulator takes it.
type simModel struct {
	layers  []int64
	work    []float64 // the tensors' shares of backward (nn.TensorWork)
	batch   int
	flags   modelFlags
	compute float64 // measured here, once a run needs it
}

// measure is one step's forward and backward of m here, on one thread
// (shoal bench compute's loop), measured once.
func (m *simModel) measure(ctx context.Context) (float64, error) {
	if m.compute > 0 {
		return m.compute, nil
	}
	fast, _, err := m.flags.buildFast(1)
	if err != nil {
		return 0, err
	}
	m.compute, err = harness.StepSeconds(ctx, fast, m.batch, 3, 10, m.flags.seed)
	return m.compute, err
}

// benchSimulateFlags are shoal bench simulate's flags.
type benchSimulateFlags struct {
	pf        planFlags
	nf        nicFlags
	df        dataFlags
	out       string
	calibrate string
	apply     float64 // GB/s
	jitter    float64
	cpuFrom   string
}

func (f *benchSimulateFlags) register(fs *flag.FlagSet) {
	f.pf.register(fs)
	f.nf.register(fs)
	f.df.register(fs)
	fs.Lookup("nic-gbps").DefValue, f.nf.gbps = "1", 1
	fs.StringVar(&f.out, "out", "bench-sim", "folder for results.json, report.md and the plots")
	fs.StringVar(&f.calibrate, "calibrate", "", "a results.json of shoal bench train whose measured compute per step (and its spread) the runs take")
	fs.Float64Var(&f.apply, "apply-gbps", 0, "optimizer speed, GB/s of weights updated (0: measure it here)")
	fs.Float64Var(&f.jitter, "jitter", 0.1, "spread of each step's compute (a log-normal's σ) where --calibrate does not give it")
	fs.StringVar(&f.cpuFrom, "cpu-calibrate", "", "a results.json of shoal bench train whose loopback async run the host's CPU cost per byte of a PS transfer is fitted to (default: --calibrate's)")
}

// benchSimulate is one shoal bench simulate: its flags, checked, and what
// every run's prediction shares.
type benchSimulate struct {
	benchSimulateFlags
	plan     bench.Plan
	measured *bench.Results // --calibrate's, or nil
	host     simHost
	// Set by runBenchSimulate before the first prediction.
	models     map[string]*simModel // the harness's models as the simulator takes them
	applyBytes float64              // the optimizer's speed, bytes/s
	trainLen   int                  // the training set's size, for runs given in epochs
}

// parseBenchSimulate reads and checks shoal bench simulate's flags, loads
// the results that calibrate the runs, and makes --out.
func parseBenchSimulate(args []string, stderr io.Writer) (*benchSimulate, error) {
	fs := newFlagSet("bench simulate", benchSimulateSynopsis, stderr)
	p := &benchSimulate{}
	p.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := p.nf.validate(); err != nil {
		return nil, err
	}
	if p.apply < 0 || p.jitter < 0 || math.IsNaN(p.apply) || math.IsNaN(p.jitter) {
		return nil, fmt.Errorf("--apply-gbps %g, --jitter %g: want >= 0", p.apply, p.jitter)
	}
	var err error
	if p.plan, err = p.pf.plan(p.nf); err != nil {
		return nil, err
	}
	if p.calibrate != "" {
		if p.measured, err = bench.Load(p.calibrate); err != nil {
			return nil, fmt.Errorf("--calibrate: %w", err)
		}
		if p.measured.Simulated {
			return nil, fmt.Errorf("--calibrate %s: these results are simulated; calibrate from measured ones (shoal bench train's)", p.calibrate)
		}
	}
	if p.host, err = hostCPU(p.cpuFrom, p.calibrate, p.measured); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(p.out, 0o755); err != nil {
		return nil, fmt.Errorf("--out %s: %w", p.out, err)
	}
	return p, nil
}

func runBenchSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	p, err := parseBenchSimulate(args, stderr)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(p.plan.Runs, func(r bench.Run) bool { return r.Epochs > 0 }) {
		train, _, err := p.df.load(1)
		if err != nil {
			return err
		}
		p.trainLen = train.Len()
	}
	p.applyBytes = p.apply * 1e9
	if p.applyBytes == 0 {
		p.applyBytes = sim.MeasureOptimizer(1 << 22)
	}
	res := &bench.Results{Schema: bench.SchemaVersion, Started: time.Now().UTC().Truncate(time.Second),
		Command: append([]string{"shoal", "bench", "simulate"}, args...), Revision: revision(), Machine: describeMachine(), Simulated: true}
	p.models = map[string]*simModel{}
	if err := p.fitHost(stdout); err != nil {
		return err
	}
	for i, r := range p.plan.Runs {
		in, id, err := p.input(ctx, r, res.Command)
		if err != nil {
			return err
		}
		rec, err := bench.Simulate(r, in)
		if err != nil {
			fmt.Fprintf(stdout, "[%d/%d] %s: left out: %v\n", i+1, len(p.plan.Runs), id, err)
			continue
		}
		res.Runs = append(res.Runs, rec)
		fmt.Fprintf(stdout, "[%d/%d] %s: %s samples/s, step mean %.2f ms (compute %.2f ms), simulated\n",
			i+1, len(p.plan.Runs), id, fmtFloat(math.Round(rec.SamplesPerSec)), 1e3*rec.StepTime.Step.Mean, 1e3*rec.StepTime.Compute.Mean)
	}
	bench.ScalingEfficiency(res.Runs)
	return writeBenchOutputs(p.out, res, stdout)
}

// fitHost fits the host's CPU per byte of a PS transfer to its loopback
// async run, when there is one, and says what it found.
func (p *benchSimulate) fitHost(stdout io.Writer) error {
	host := &p.host
	if host.src == nil {
		fmt.Fprintln(stdout, "CPU per byte of a PS transfer: not modelled (no loopback async run to fit it to: --cpu-calibrate)")
		return nil
	}
	var err error
	if host.perByte, err = host.fit(p.models, p.applyBytes); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "CPU per byte of a PS transfer: %.3f ns, fitted to %s of %s (%.2f ms a step), on a host of %d cores\n",
		1e9*host.perByte, host.src.ID, host.file, 1e3*host.src.StepTime.Step.Mean, host.cores)
	return nil
}

// input is what the simulator takes to predict run r, and the ID that
// bench.Simulate gives its record. The compute per step is --calibrate's
// (the run of the same ID, else the model's first), or else measured here.
func (p *benchSimulate) input(ctx context.Context, r bench.Run, command []string) (bench.SimInput, string, error) {
	m, err := harnessModel(p.models, r.Model)
	if err != nil {
		return bench.SimInput{}, "", err
	}
	in := bench.SimInput{Layers: m.layers, LayerWork: m.work, Batch: m.batch, Jitter: p.jitter, ApplyBytesPerSec: p.applyBytes, Command: command,
		CPUPerByte: p.host.perByte, HostCores: p.host.cores}
	if !r.Loopback {
		// The NIC model's, buckets and all: the runs predicted went
		// through it.
		in.NICGbps, in.RTTMillis = p.nf.gbps, float64(p.nf.rtt)/float64(time.Millisecond)
		in.NICBurst = float64(netshape.DefaultBurst(p.nf.gbps))
	}
	id := r.ID("", in.NICGbps) // as bench.Simulate names the record
	if p.trainLen > 0 {
		// Each worker's batches of its share of the data, as its loader
		// cuts them (the last short batch kept).
		s, err := data.NewSampler(p.trainLen, 0, r.Workers, 0, false)
		if err != nil {
			return bench.SimInput{}, "", err
		}
		in.StepsPerEpoch = int64(s.Steps(m.batch, false))
	}
	if c, ok := calibration(p.measured, id, bench.Models[r.Model].Label); ok {
		in.Calibrate(c.StepTime.Compute)
		if c.ID == id {
			in.Start = c.StartOffsets
		}
	} else if in.Compute, err = m.measure(ctx); err != nil {
		return bench.SimInput{}, "", err
	}
	return in, id, nil
}

// simHost is the host bench simulate predicts shoal bench train on:
// its cores and its CPU cost per byte of a PS transfer, fitted to src, a
// loopback run of file.
type simHost struct {
	file    string
	src     *bench.Record
	cores   int
	perByte float64
}

// hostCPU finds the run to fit the host's CPU per byte to: in the
// results of file, else in measured (--calibrate's); the host's cores
// are those results' machine's. calibrated names measured's file.
func hostCPU(file, calibrated string, measured *bench.Results) (simHost, error) {
	rs := measured
	if file != "" {
		var err error
		if rs, err = bench.Load(file); err != nil {
			return simHost{}, fmt.Errorf("--cpu-calibrate: %w", err)
		}
		if rs.Simulated {
			return simHost{}, fmt.Errorf("--cpu-calibrate %s: these results are simulated; fit to measured ones (shoal bench train's)", file)
		}
	}
	if rs == nil {
		return simHost{}, nil
	}
	h := simHost{file: file, src: bench.CPUSource(rs), cores: rs.Machine.CPUs}
	if h.file == "" {
		h.file = calibrated
	}
	if h.src == nil && file != "" {
		return simHost{}, fmt.Errorf("--cpu-calibrate %s: no async run of 2 or more workers without the NIC model to fit the CPU per byte to (make bench's mlp/async/w2/s1)", file)
	}
	return h, nil
}

// fit is the CPU per byte with which the simulator reproduces h.src.
func (h simHost) fit(models map[string]*simModel, apply float64) (float64, error) {
	key := ""
	for k, m := range bench.Models {
		if m.Label == h.src.Model {
			key = k
		}
	}
	m, err := harnessModel(models, key)
	if err != nil {
		return 0, fmt.Errorf("fitting the CPU per byte to %s: %w", h.src.ID, err)
	}
	return bench.FitCPUPerByte(h.src, bench.SimInput{Layers: m.layers, LayerWork: m.work, Batch: h.src.Batch, ApplyBytesPerSec: apply, HostCores: h.cores, Command: []string{"fit"}})
}

// harnessModel is the simulator's view of the harness's model name: its
// layer sizes and batch from the shoal train flags that build it (cached
// in models).
func harnessModel(models map[string]*simModel, name string) (*simModel, error) {
	if m, ok := models[name]; ok {
		return m, nil
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var mf modelFlags
	mf.register(fs)
	batch := fs.Int("batch", 64, "")
	if err := fs.Parse(bench.Models[name].Args); err != nil {
		return nil, fmt.Errorf("the harness's model %s: %w (a bug)", name, err)
	}
	spec, err := mf.spec()
	if err != nil {
		return nil, err
	}
	model, err := nn.New(spec, nn.NewCPU())
	if err != nil {
		return nil, err
	}
	work, err := nn.TensorWork(spec)
	if err != nil {
		return nil, err
	}
	m := &simModel{layers: model.Layout().Bytes(), work: work, batch: *batch, flags: mf}
	models[name] = m
	return m, nil
}

// calibration is the measured run id in measured, or else the first run
// of the same model, whose compute per step (and, for the run itself, its
// workers' start times) a prediction takes; false when measured has
// neither.
func calibration(measured *bench.Results, id, model string) (*bench.Record, bool) {
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
