package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/sim"
)

const benchPlanSynopsis = `Predicts, by simulation (package sim), how the modes compare for a job of
--workers workers behind NICs of --nic-gbps: per mode and server count, the step
time, samples/s, scaling efficiency (against the workers computing alone) and
traffic, and which setup wins. The compute per step and the optimizer's speed are
measured on this machine first (shoal bench compute's loop, one thread) unless
--compute and --apply-gbps give them. Simulated, not measured: docs/BENCHMARKS.md
says how close the simulator comes to measured runs.`

// planRow is one simulated setup.
type planRow struct {
	Mode    string     `json:"mode"`
	Servers int        `json:"servers"`
	Result  sim.Result `json:"result"`
}

// benchPlanFlags are shoal bench plan's flags.
type benchPlanFlags struct {
	job        simJobFlags
	workers    int
	serverList string // --servers, which parseBenchPlan reads into counts
	modeList   string // --modes, which parseBenchPlan reads into modes
	batch      int
	apply      float64 // GB/s
	fusion     int64
	chunk      int64
	staleness  int64
	backup     int
	steps      int
	jsonOut    bool
	plotFile   string
	target     float64
	epochs     int
	layerFile  string
}

func (f *benchPlanFlags) register(fs *flag.FlagSet) {
	f.job.register(fs)
	fs.IntVar(&f.workers, "workers", 64, "workers of the job")
	fs.StringVar(&f.serverList, "servers", "", "server counts to try in the PS modes, e.g. 1,4,16 (default: 1, then ×4 up to the workers or 64)")
	fs.StringVar(&f.modeList, "modes", "async,sync,ssp,ring", "modes to simulate")
	fs.IntVar(&f.batch, "batch", 64, "batch per worker")
	fs.Float64Var(&f.apply, "apply-gbps", 0, "optimizer speed, GB/s of weights updated (0: measure it here)")
	fs.Int64Var(&f.fusion, "fusion-bytes", 65536, "ring: bucket size (0: one allreduce after backward)")
	fs.Int64Var(&f.chunk, "chunk-bytes", 1<<20, "PS: the shard plan's chunk size")
	fs.Int64Var(&f.staleness, "staleness", 1, "ssp: the bound")
	fs.IntVar(&f.backup, "backup-workers", 0, "sync: backup workers")
	fs.IntVar(&f.steps, "steps", 10, "steps simulated per worker")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON object per setup")
	fs.StringVar(&f.plotFile, "plot", "", "also write a PNG of each mode's efficiency against the worker count (2, 4, 8, ... up to --workers; the PS modes at their best server count)")
	fs.Float64Var(&f.target, "target", 0, "also emulate each mode's fastest setup (shoal bench emulate) and predict its time to this test accuracy, e.g. 0.8 (Shoal's models only)")
	fs.IntVar(&f.epochs, "epochs", 3, "--target: epochs each emulated job trains for")
	fs.StringVar(&f.layerFile, "layers", "", "another model: a file of its tensors' sizes, floats one a line in parameter order (sim/models: vgg16.txt, resnet101.txt, inception_v3.txt); needs --compute")
}

// benchPlan is one shoal bench plan, its flags checked: the modes and
// server counts to simulate and the model's tensors.
type benchPlan struct {
	benchPlanFlags
	modes  []consistency.Mode
	counts []int     // server counts of the PS modes
	layers []int64   // the tensors' sizes in bytes
	work   []float64 // their shares of backward (nil: by size)
	name   string    // the model, described
	floats int64
}

// parseBenchPlan reads and checks shoal bench plan's flags, and the
// model's tensors.
func parseBenchPlan(args []string, stderr io.Writer) (*benchPlan, error) {
	fs := newFlagSet("bench plan", benchPlanSynopsis, stderr)
	p := &benchPlan{}
	p.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := p.job.validate(); err != nil {
		return nil, err
	}
	if p.workers < 1 || p.batch < 1 || p.steps < 1 || p.apply < 0 {
		return nil, fmt.Errorf("--workers %d, --batch %d, --steps %d, --apply-gbps %g: want workers, batch, steps >= 1 and an optimizer speed >= 0",
			p.workers, p.batch, p.steps, p.apply)
	}
	var err error
	if p.modes, err = parseModes(p.modeList); err != nil {
		return nil, err
	}
	if p.counts, err = serverCounts(p.serverList, p.workers); err != nil {
		return nil, err
	}
	if p.layers, p.work, p.name, err = planLayers(p.job.model, p.layerFile); err != nil {
		return nil, err
	}
	for _, l := range p.layers {
		p.floats += l / 4
	}
	if p.target < 0 || p.target >= 1 || p.epochs < 1 {
		return nil, fmt.Errorf("--target %g, --epochs %d: want a test accuracy in [0, 1) (0: none) and epochs >= 1", p.target, p.epochs)
	}
	if p.target > 0 && p.layerFile != "" {
		return nil, fmt.Errorf("--target with --layers %s: only Shoal's own models can be emulated (their accuracy needs training them)", p.layerFile)
	}
	if p.job.compute == 0 && p.layerFile != "" {
		return nil, fmt.Errorf("--layers %s: give the model's --compute (forward+backward of one step at --batch): shoal measures only its own models", p.layerFile)
	}
	return p, nil
}

func runBenchPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	p, err := parseBenchPlan(args, stderr)
	if err != nil {
		return err
	}
	base, c, err := p.simConfig(ctx)
	if err != nil {
		return err
	}
	if !p.jsonOut {
		fmt.Fprintf(stdout, "shoal bench plan: %s (%.1f MB), %d workers of batch %d, NICs of %g Gbit/s, latency %v; compute %.2f ms a step, optimizer %.2f GB/s; simulated, %d steps each\n",
			p.name, float64(p.floats)*4/1e6, p.workers, p.batch, p.job.gbps, p.job.latency, c*1e3, base.ApplyBytesPerSec/1e9, p.steps)
		fmt.Fprintf(stdout, "%-6s %7s %10s %12s %10s %14s\n", "mode", "servers", "step ms", "samples/s", "efficiency", "MB/worker/step")
	}
	rows, err := p.simulate(base, stdout)
	if err != nil {
		return err
	}
	if p.plotFile != "" {
		if err := plotEfficiency(p.plotFile, p.name, base, p.modes, p.serverList, p.floats); err != nil {
			return err
		}
		if !p.jsonOut {
			fmt.Fprintf(stdout, "wrote %s\n", p.plotFile)
		}
	}
	tj := targetJob{job: p.job, batch: p.batch, epochs: p.epochs, target: p.target}
	if p.jsonOut || len(rows) == 0 {
		if p.target > 0 && len(rows) > 0 {
			return tj.run(ctx, base, rows, stdout, true)
		}
		return nil
	}
	printFastest(stdout, rows)
	if p.target == 0 {
		fmt.Fprintln(stdout, "; async and ssp trade staleness for it (see sim's staleness), which this does not price in (--target does)")
		return nil
	}
	fmt.Fprintln(stdout)
	return tj.run(ctx, base, rows, stdout, false)
}

// simConfig is the job to simulate, less its mode and servers, and its
// compute per step in seconds: --compute and --apply-gbps, or else
// measured here.
func (p *benchPlan) simConfig(ctx context.Context) (sim.Config, float64, error) {
	mf := p.job.model
	c, err := p.job.stepSeconds(ctx, func() (nn.Model, error) {
		fast, _, err := mf.buildFast(1)
		return fast, err
	}, p.batch, mf.seed)
	if err != nil {
		return sim.Config{}, 0, err
	}
	a := p.apply * 1e9
	if a == 0 {
		a = sim.MeasureOptimizer(int(min(p.floats, 1<<24)))
	}
	jf := p.job
	return sim.Config{Workers: p.workers, Staleness: p.staleness, BackupWorkers: p.backup, Batch: p.batch, Steps: p.steps, Layers: p.layers, LayerWork: p.work,
		ChunkBytes: p.chunk, FusionBytes: p.fusion, Forward: c / 3, Backward: 2 * c / 3, Jitter: jf.jitter, Seed: mf.seed,
		NICGbps: jf.gbps, Latency: jf.latency.Seconds(), ApplyBytesPerSec: a}, c, nil
}

// simulate runs base in every mode at each of its server counts and
// prints each setup as it comes: a table row, or with --json an object.
func (p *benchPlan) simulate(base sim.Config, stdout io.Writer) ([]planRow, error) {
	var rows []planRow
	for _, m := range p.modes {
		ss := p.counts
		if !m.UsesServers() {
			ss = []int{0}
		}
		for _, s := range ss {
			cfg := base
			cfg.Mode, cfg.Servers = m, s
			if int64(s) > p.floats {
				continue
			}
			r, err := sim.Run(cfg)
			if err != nil {
				return nil, fmt.Errorf("%s with %d servers: %w", m, s, err)
			}
			rows = append(rows, planRow{Mode: m.String(), Servers: s, Result: r})
			if p.jsonOut {
				if err := printJSONLine(stdout, rows[len(rows)-1]); err != nil {
					return nil, err
				}
				continue
			}
			fmt.Fprintf(stdout, "%-6s %7s %10.2f %12.0f %9.1f%% %14.2f\n", m, serversLabel(s), r.StepSeconds*1e3, r.SamplesPerSec, 100*r.Efficiency,
				(r.BytesSent+r.BytesReceived)/1e6)
		}
	}
	return rows, nil
}

// printFastest names the fastest of rows and how much faster it is than
// the fastest setup of another mode, leaving the line open.
func printFastest(stdout io.Writer, rows []planRow) {
	best, second := rows[0], planRow{}
	for _, r := range rows[1:] {
		switch {
		case r.Result.SamplesPerSec > best.Result.SamplesPerSec:
			if r.Mode != best.Mode {
				second = best
			}
			best = r
		case r.Mode != best.Mode && r.Result.SamplesPerSec > second.Result.SamplesPerSec:
			second = r
		}
	}
	fmt.Fprintf(stdout, "fastest: %s%s, %.0f samples/s", best.Mode, withServers(best.Servers), best.Result.SamplesPerSec)
	if second.Mode != "" {
		fmt.Fprintf(stdout, ", %.2f× the best other mode (%s%s)", best.Result.SamplesPerSec/second.Result.SamplesPerSec, second.Mode, withServers(second.Servers))
	}
}

// plotEfficiency simulates base at 2, 4, 8, ... workers up to its own
// count, each mode at its best server count, and plots efficiency
// against workers.
func plotEfficiency(path, name string, base sim.Config, ms []consistency.Mode, servers string, floats int64) error {
	var ns []int
	for n := 2; n < base.Workers; n *= 2 {
		ns = append(ns, n)
	}
	ns = append(ns, base.Workers)
	var curves []bench.Curve
	for _, m := range ms {
		c := bench.Curve{Label: m.String(), Mode: m.String()}
		if m == consistency.SSP {
			c.Label = fmt.Sprintf("ssp (s = %d)", base.Staleness)
		}
		if m.UsesServers() {
			c.Label += ", best server count"
		}
		for _, n := range ns {
			ss := []int{0}
			if m.UsesServers() {
				var err error
				if ss, err = serverCounts(servers, n); err != nil {
					return err
				}
			}
			best := 0.0
			for _, s := range ss {
				if int64(s) > floats {
					continue
				}
				cfg := base
				cfg.Mode, cfg.Workers, cfg.Servers, cfg.BackupWorkers = m, n, s, min(base.BackupWorkers, n-1)
				r, err := sim.Run(cfg)
				if err != nil {
					return fmt.Errorf("%s, %d workers, %d servers: %w", m, n, s, err)
				}
				best = max(best, r.Efficiency)
			}
			c.X, c.Y = append(c.X, float64(n)), append(c.Y, 100*best)
		}
		curves = append(curves, c)
	}
	lp := bench.LinePlot{Title: fmt.Sprintf("Simulated: scaling efficiency, %s at %g Gbit/s", name, base.NICGbps),
		XLabel: "workers", YLabel: "scaling efficiency (%)", LogX: true, Curves: curves}
	return lp.Write(path)
}

// simJobFlags are the simulated job (its model, optimizer and data, its
// network and compute), which shoal bench plan and shoal bench emulate
// both take.
type simJobFlags struct {
	model            modelFlags
	opt              optFlags
	data             dataFlags
	gbps, jitter     float64
	latency, compute time.Duration
}

func (f *simJobFlags) register(fs *flag.FlagSet) {
	f.model.register(fs)
	f.opt.register(fs, "cosine")
	f.data.register(fs)
	fs.Float64Var(&f.gbps, "nic-gbps", 25, "every process's NIC, Gbit/s per direction")
	fs.DurationVar(&f.latency, "latency", 25*time.Microsecond, "one-way network latency")
	fs.DurationVar(&f.compute, "compute", 0, "forward+backward time of one step (0: measure it here, one thread)")
	fs.Float64Var(&f.jitter, "jitter", 0.1, "standard deviation of each step's compute time, relative (log-normal)")
}

func (f simJobFlags) validate() error {
	if f.gbps <= 0 || f.latency < 0 || f.compute < 0 || f.jitter < 0 {
		return fmt.Errorf("--nic-gbps %g, --latency %v, --compute %v, --jitter %g: want a positive NIC rate, the rest >= 0", f.gbps, f.latency, f.compute, f.jitter)
	}
	return nil
}

// stepSeconds is --compute, or else one step's forward and backward of
// the model that build returns, at batch, measured here (shoal bench
// compute's loop: 5 steps of warm-up, 30 timed).
func (f simJobFlags) stepSeconds(ctx context.Context, build func() (nn.Model, error), batch int, seed uint64) (float64, error) {
	if f.compute > 0 {
		return f.compute.Seconds(), nil
	}
	model, err := build()
	if err != nil {
		return 0, err
	}
	rec, err := benchCompute(ctx, model, batch, 5, 30, seed, observer{})
	if err != nil {
		return 0, err
	}
	return rec.Seconds / float64(rec.Steps), nil
}

// parseModes reads --modes: mode names, comma-separated.
func parseModes(list string) ([]consistency.Mode, error) {
	var ms []consistency.Mode
	for _, s := range strings.Split(list, ",") {
		m, err := consistency.Parse(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("--modes: %w", err)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// planLayers is the model's tensor sizes in bytes, from --layers or
// Shoal's model flags, their shares of backward (Shoal's models only:
// nn.TensorWork; nil for a file, whose layers count by size), and its
// name.
func planLayers(mf modelFlags, file string) ([]int64, []float64, string, error) {
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, nil, "", fmt.Errorf("--layers: %w", err)
		}
		defer f.Close()
		layers, err := sim.ReadLayers(f)
		if err != nil {
			return nil, nil, "", fmt.Errorf("--layers %s: %w", file, err)
		}
		return layers, nil, strings.TrimSuffix(filepath.Base(file), ".txt"), nil
	}
	spec, err := mf.spec()
	if err != nil {
		return nil, nil, "", err
	}
	model, err := nn.New(spec, nn.NewCPU())
	if err != nil {
		return nil, nil, "", err
	}
	work, err := nn.TensorWork(spec)
	if err != nil {
		return nil, nil, "", err
	}
	return model.Layout().Bytes(), work, describeModel(model), nil
}

func serversLabel(s int) string {
	if s == 0 {
		return "-"
	}
	return strconv.Itoa(s)
}

func withServers(s int) string {
	if s == 0 {
		return ""
	}
	return fmt.Sprintf(" with %d servers", s)
}

// serverCounts parses --servers, or gives 1 and then ×4 up to the
// workers or 64.
func serverCounts(s string, workers int) ([]int, error) {
	if s == "" {
		out := []int{1}
		for n := 4; n <= min(workers, 64); n *= 4 {
			out = append(out, n)
		}
		return out, nil
	}
	return positiveInts("--servers", s)
}

// targetJob predicts the time to a test accuracy: each mode's fastest
// simulated setup is emulated (package emulate) for its accuracy against
// epochs, and the epochs to the target are timed at the setup's
// simulated samples/s. The ring trains as sync does (the mean of N
// gradients applied once a step), so it is emulated as sync.
type targetJob struct {
	job           simJobFlags
	batch, epochs int
	target        float64
}

// targetRow is one mode's prediction, as --json prints it.
type targetRow struct {
	Mode    string  `json:"mode"`
	Servers int     `json:"servers"`
	Target  float64 `json:"target_accuracy"`
	// Epochs and Seconds to the target; both 0 when the job did not get
	// there in the epochs emulated (Final says how close it came).
	Epochs   float64 `json:"epochs_to_target"`
	Seconds  float64 `json:"seconds_to_target"`
	Final    float64 `json:"final_accuracy"`
	Diverged string  `json:"diverged,omitempty"`
}

func (j targetJob) run(ctx context.Context, base sim.Config, rows []planRow, stdout io.Writer, jsonOut bool) error {
	e, err := j.job.emulation(j.batch, j.epochs, 0)
	if err != nil {
		return err
	}
	ocfg, test := e.opt, e.test
	fastest, order := fastestPerMode(rows)
	if !jsonOut {
		fmt.Fprintf(stdout, "time to %.1f%% test accuracy on %s (emulated, %d epochs at most, %s lr %g, %s decay):\n", 100*j.target, test.Name(), j.epochs, ocfg.Algorithm, ocfg.LR, j.job.opt.decay)
	}
	var results []targetRow
	for _, mode := range order {
		row, updates, err := j.predict(ctx, e, base, fastest[mode])
		if err != nil {
			return err
		}
		results = append(results, row)
		if jsonOut {
			if err := printJSONLine(stdout, row); err != nil {
				return err
			}
			continue
		}
		j.printRow(stdout, row, updates)
	}
	if jsonOut {
		return nil
	}
	j.printFirst(stdout, results)
	return nil
}

// fastestPerMode is each mode's row of the most samples/s, and the modes
// in the order rows has them.
func fastestPerMode(rows []planRow) (map[string]planRow, []string) {
	fastest := map[string]planRow{}
	var order []string
	for _, r := range rows {
		if b, ok := fastest[r.Mode]; !ok || r.Result.SamplesPerSec > b.Result.SamplesPerSec {
			if !ok {
				order = append(order, r.Mode)
			}
			fastest[r.Mode] = r
		}
	}
	return fastest, order
}

// predict emulates r's setup (the ring as sync) and times its epochs to
// the target at r's simulated samples/s. It also returns the updates the
// emulated job applied.
func (j targetJob) predict(ctx context.Context, e emulation, base sim.Config, r planRow) (targetRow, int64, error) {
	m, err := consistency.Parse(r.Mode)
	if err != nil {
		return targetRow{}, 0, err
	}
	sc := base
	sc.Mode, sc.Servers = m, max(r.Servers, 1)
	if sc.Mode == consistency.Ring {
		sc.Mode = consistency.Sync
	}
	res, err := e.run(ctx, sc)
	if err != nil {
		return targetRow{}, 0, fmt.Errorf("--target: emulating %s: %w", r.Mode, err)
	}
	row := targetRow{Mode: r.Mode, Servers: r.Servers, Target: j.target, Final: res.Final.Accuracy, Diverged: res.Diverged}
	for _, p := range res.Curve {
		if p.Accuracy >= j.target {
			row.Epochs = p.Epochs
			row.Seconds = p.Epochs * float64(e.train.Len()) / r.Result.SamplesPerSec
			break
		}
	}
	return row, res.Updates, nil
}

// printRow prints one mode's prediction: its epochs and time to the
// target, or that it diverged (after updates updates), or how close it
// came.
func (j targetJob) printRow(stdout io.Writer, row targetRow, updates int64) {
	switch {
	case row.Epochs > 0:
		fmt.Fprintf(stdout, "  %-6s %7s  %.2f epochs, %s\n", row.Mode, serversLabel(row.Servers), row.Epochs, time.Duration(row.Seconds*float64(time.Second)).Round(time.Millisecond))
	case row.Diverged != "":
		fmt.Fprintf(stdout, "  %-6s %7s  never: diverged after %d updates (lower --lr for async: each push moves the weights by the full rate)\n", row.Mode, serversLabel(row.Servers), updates)
	default:
		fmt.Fprintf(stdout, "  %-6s %7s  not in %d epochs (%.2f%% at the end)\n", row.Mode, serversLabel(row.Servers), j.epochs, 100*row.Final)
	}
}

// printFirst names the mode first to the target, and how much sooner it
// gets there than the next.
func (j targetJob) printFirst(stdout io.Writer, results []targetRow) {
	var best *targetRow
	for i := range results {
		if r := &results[i]; r.Epochs > 0 && (best == nil || r.Seconds < best.Seconds) {
			best = r
		}
	}
	if best == nil {
		fmt.Fprintf(stdout, "first to %.1f%%: none within %d epochs\n", 100*j.target, j.epochs)
		return
	}
	fmt.Fprintf(stdout, "first to %.1f%%: %s%s", 100*j.target, best.Mode, withServers(best.Servers))
	var next *targetRow
	for i := range results {
		if r := &results[i]; r != best && r.Epochs > 0 && (next == nil || r.Seconds < next.Seconds) {
			next = r
		}
	}
	if next != nil {
		fmt.Fprintf(stdout, ", %.2f× sooner than %s%s", next.Seconds/best.Seconds, next.Mode, withServers(next.Servers))
	}
	fmt.Fprintln(stdout)
}
