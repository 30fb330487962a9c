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
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/internal/netshape"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/sim"
)

const benchSimulateSynopsis = `Predicts shoal bench train's runs with the simulator instead of running them:
the same plan flags (the built-in plan of make bench, or a grid), the same NIC
model, and the same output (results.json in the harness's schema, report.md and
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
	rec, err := benchCompute(ctx, fast, m.batch, 3, 10, m.flags.seed, observer{})
	if err != nil {
		return 0, err
	}
	m.compute = rec.Seconds / float64(rec.Steps)
	return m.compute, nil
}

func runBenchSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench simulate", benchSimulateSynopsis, stderr)
	var (
		pf planFlags
		nf nicFlags
		df dataFlags
	)
	pf.register(fs)
	nf.register(fs)
	df.register(fs)
	fs.Lookup("nic-gbps").DefValue, nf.gbps = "1", 1
	var (
		out       = fs.String("out", "bench-sim", "folder for results.json, report.md and the plots")
		calibrate = fs.String("calibrate", "", "a results.json of shoal bench train whose measured compute per step (and its spread) the runs take")
		apply     = fs.Float64("apply-gbps", 0, "optimizer speed, GB/s of weights updated (0: measure it here)")
		jitter    = fs.Float64("jitter", 0.1, "spread of each step's compute (a log-normal's σ) where --calibrate does not give it")
		cpuFrom   = fs.String("cpu-calibrate", "", "a results.json of shoal bench train whose loopback async run the host's CPU cost per byte of a PS transfer is fitted to (default: --calibrate's)")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := nf.validate(); err != nil {
		return err
	}
	if *apply < 0 || *jitter < 0 || math.IsNaN(*apply) || math.IsNaN(*jitter) {
		return fmt.Errorf("--apply-gbps %g, --jitter %g: want >= 0", *apply, *jitter)
	}
	plan, err := pf.plan(nf)
	if err != nil {
		return err
	}
	var measured *bench.Results
	if *calibrate != "" {
		if measured, err = bench.Load(*calibrate); err != nil {
			return fmt.Errorf("--calibrate: %w", err)
		}
		if measured.Simulated {
			return fmt.Errorf("--calibrate %s: these results are simulated; calibrate from measured ones (shoal bench train's)", *calibrate)
		}
	}
	host, err := hostCPU(*cpuFrom, *calibrate, measured)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("--out %s: %w", *out, err)
	}
	trainLen := 0 // the training set's size, for runs given in epochs
	if slices.ContainsFunc(plan.Runs, func(r bench.Run) bool { return r.Epochs > 0 }) {
		train, _, err := df.load(1)
		if err != nil {
			return err
		}
		trainLen = train.Len()
	}
	a := *apply * 1e9
	if a == 0 {
		a = sim.MeasureOptimizer(1 << 22)
	}
	res := &bench.Results{Schema: bench.SchemaVersion, Started: time.Now().UTC().Truncate(time.Second),
		Command: append([]string{"shoal", "bench", "simulate"}, args...), Revision: revision(), Machine: describeMachine(), Simulated: true}
	models := map[string]*simModel{}
	if host.src != nil {
		if host.perByte, err = host.fit(models, a); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "CPU per byte of a PS transfer: %.3f ns, fitted to %s of %s (%.2f ms a step), on a host of %d cores\n",
			1e9*host.perByte, host.src.ID, host.file, 1e3*host.src.StepTime.Step.Mean, host.cores)
	} else {
		fmt.Fprintln(stdout, "CPU per byte of a PS transfer: not modelled (no loopback async run to fit it to: --cpu-calibrate)")
	}
	for i, r := range plan.Runs {
		m, err := harnessModel(models, r.Model)
		if err != nil {
			return err
		}
		in := bench.SimInput{Layers: m.layers, LayerWork: m.work, Batch: m.batch, Jitter: *jitter, ApplyBytesPerSec: a, Command: res.Command,
			CPUPerByte: host.perByte, HostCores: host.cores}
		if !r.Loopback {
			// The NIC model's, buckets and all: the runs predicted went
			// through it.
			in.NICGbps, in.RTTMillis = nf.gbps, float64(nf.rtt)/float64(time.Millisecond)
			in.NICBurst = float64(netshape.DefaultBurst(nf.gbps))
		}
		id := r.ID("", in.NICGbps) // as bench.Simulate names the record
		if trainLen > 0 {
			// Each worker's batches of its share of the data, as its loader
			// cuts them (the last short batch kept).
			s, err := data.NewSampler(trainLen, 0, r.Workers, 0, false)
			if err != nil {
				return err
			}
			in.StepsPerEpoch = int64(s.Steps(m.batch, false))
		}
		if c, ok := calibration(measured, id, bench.Models[r.Model].Label); ok {
			in.Calibrate(c.StepTime.Compute)
			if c.ID == id {
				in.Start = c.StartOffsets
			}
		} else if in.Compute, err = m.measure(ctx); err != nil {
			return err
		}
		rec, err := bench.Simulate(r, in)
		if err != nil {
			fmt.Fprintf(stdout, "[%d/%d] %s: left out: %v\n", i+1, len(plan.Runs), id, err)
			continue
		}
		res.Runs = append(res.Runs, rec)
		fmt.Fprintf(stdout, "[%d/%d] %s: %s samples/s, step mean %.2f ms (compute %.2f ms), simulated\n",
			i+1, len(plan.Runs), id, fmtFloat(math.Round(rec.SamplesPerSec)), 1e3*rec.StepTime.Step.Mean, 1e3*rec.StepTime.Compute.Mean)
	}
	bench.ScalingEfficiency(res.Runs)
	return writeBenchOutputs(*out, res, stdout)
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
