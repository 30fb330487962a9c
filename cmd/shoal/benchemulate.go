package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/emulate"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/sim"
)

const benchEmulateSynopsis = `Emulates parameter-server jobs of --workers workers in this one process, to show
what staleness does to accuracy at worker counts this machine cannot run: each
worker's gradient is computed on the weights it would have read, in the order a
simulated job (shoal bench plan's simulator) applies pushes and answers reads, by
real workers against a real shard (package emulate). Prints each job's final test
accuracy and staleness; --out DIR also writes results.json and one plot of
accuracy against epochs per worker count. The run's timing is not emulated:
shoal bench plan predicts it.

--replay DIR follows instead the order of a real run recorded by shoal train
--record-pushes DIR: its mode, workers and bound come from the recording; give
the run's model, data, --batch, --epochs, optimizer and --seed. With one shard
the replay is the recorded run, gradient for gradient.`

// emulateRun is one emulated job as --json and results.json write it.
type emulateRun struct {
	Mode      string                `json:"mode"`
	Workers   int                   `json:"workers"`
	Staleness int64                 `json:"staleness,omitempty"`
	Model     string                `json:"model"`
	Batch     int                   `json:"batch"`
	Epochs    int                   `json:"epochs"`
	Accuracy  float64               `json:"test_accuracy"`
	Loss      *float64              `json:"test_loss"` // null when not finite (diverged)
	Updates   int64                 `json:"updates"`
	Pushes    consistency.Staleness `json:"staleness_histogram,omitempty"`
	Curve     []emulate.Point       `json:"curve"`
	Seconds   float64               `json:"seconds"`
	Diverged  string                `json:"diverged,omitempty"`
	// Simulated: the schedule's job, as shoal bench plan would print it.
	StepSeconds float64 `json:"simulated_step_seconds"`
}

// benchEmulateFlags are shoal bench emulate's flags.
type benchEmulateFlags struct {
	job        simJobFlags
	workerList string // --workers, which parseBenchEmulate reads into workers
	modeList   string // --modes, which parseBenchEmulate reads into modes
	boundList  string // --staleness, which parseBenchEmulate reads into bounds
	batch      int
	epochs     int
	servers    int
	evalEvery  int64
	out        string
	jsonOut    bool
	replay     string // --replay DIR
}

func (f *benchEmulateFlags) register(fs *flag.FlagSet) {
	f.job.register(fs)
	fs.StringVar(&f.workerList, "workers", "8,16,32,64", "worker counts, comma-separated")
	fs.StringVar(&f.modeList, "modes", "async,ssp,sync", "modes: async, ssp, sync")
	fs.StringVar(&f.boundList, "staleness", "1,4,16", "ssp: the bounds to emulate, comma-separated")
	fs.IntVar(&f.batch, "batch", 64, "batch per worker")
	fs.IntVar(&f.epochs, "epochs", 3, "epochs of the job")
	fs.IntVar(&f.servers, "servers", 1, "shards of the simulated job (the emulation follows shard 0's order)")
	fs.Int64Var(&f.evalEvery, "eval-every", 0, "updates between evaluations on the test set (0: about 20 over the job)")
	fs.StringVar(&f.out, "out", "", "folder for results.json and the plots (accuracy-n<N>.png)")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON object per job")
	fs.StringVar(&f.replay, "replay", "", "follow the order of the real run recorded in DIR by shoal train --record-pushes (its mode, workers and bound), not a simulated one")
}

// benchEmulate is one shoal bench emulate, its flags checked: the worker
// counts, modes and ssp bounds to emulate.
type benchEmulate struct {
	benchEmulateFlags
	workers []int
	modes   []consistency.Mode
	bounds  []int
	// recorded is --replay's run and schedule.
	recorded []emulate.Recording
	schedule []sim.Op
}

// parseBenchEmulate reads and checks shoal bench emulate's flags, and
// makes --out.
func parseBenchEmulate(args []string, stderr io.Writer) (*benchEmulate, error) {
	fs := newFlagSet("bench emulate", benchEmulateSynopsis, stderr)
	p := &benchEmulate{}
	p.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	var err error
	if p.workers, err = positiveInts("--workers", p.workerList); err != nil {
		return nil, err
	}
	if p.bounds, err = positiveInts("--staleness", p.boundList); err != nil {
		return nil, err
	}
	if p.modes, err = parseModes(p.modeList); err != nil {
		return nil, err
	}
	for _, m := range p.modes {
		if !m.UsesServers() {
			return nil, fmt.Errorf("--modes %s: only the parameter-server modes are emulated (the ring is sync SGD on workers×batch samples a step)", m)
		}
	}
	if err := p.job.validate(); err != nil {
		return nil, err
	}
	if p.replay != "" {
		if err := p.readReplay(fs); err != nil {
			return nil, err
		}
	}
	if p.batch < 1 || p.epochs < 1 || p.servers < 1 || p.evalEvery < 0 {
		return nil, fmt.Errorf("--batch %d, --epochs %d, --servers %d, --eval-every %d: want batch, epochs, servers >= 1, eval-every >= 0",
			p.batch, p.epochs, p.servers, p.evalEvery)
	}
	if p.out != "" {
		if err := writableDir("--out", p.out); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func runBenchEmulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	p, err := parseBenchEmulate(args, stderr)
	if err != nil {
		return err
	}
	jf := p.job
	e, err := jf.emulation(p.batch, p.epochs, p.evalEvery)
	if err != nil {
		return err
	}
	model, err := e.model()
	if err != nil {
		return err
	}
	if p.replay != "" {
		return p.runReplay(ctx, e, model, stdout)
	}
	c, err := jf.stepSeconds(ctx, func() (nn.Model, error) { return model, nil }, p.batch, jf.model.seed)
	if err != nil {
		return err
	}
	name := describeModel(model)
	if !p.jsonOut {
		fmt.Fprintf(stdout, "shoal bench emulate: %s, batch %d per worker, %d epochs of %s, %s lr %g (%s decay); schedules simulated with compute %.2f ms a step (jitter %g), %d server(s), NICs of %g Gbit/s\n",
			name, p.batch, p.epochs, e.train.Name(), e.opt.Algorithm, e.opt.LR, jf.opt.decay, c*1e3, jf.jitter, p.servers, jf.gbps)
	}
	base := sim.Config{Servers: p.servers, Layers: model.Layout().Bytes(), Forward: c / 3, Backward: 2 * c / 3,
		Jitter: jf.jitter, Seed: jf.model.seed, NICGbps: jf.gbps, Latency: jf.latency.Seconds()}
	var runs []emulateRun
	for _, n := range p.workers {
		for _, m := range p.modes {
			for _, s := range p.boundsOf(m) {
				sc := base
				sc.Mode, sc.Workers, sc.Staleness = m, n, s
				run, err := p.emulate(ctx, e, sc, name, stdout)
				if err != nil {
					return err
				}
				runs = append(runs, run)
			}
		}
	}
	if p.out == "" {
		return nil
	}
	return writeEmulation(p.out, runs, stdout, p.jsonOut)
}

// readReplay reads --replay's recordings, rebuilds their schedule, and
// keeps them for runReplay, which takes the recorded job's mode, workers
// and bound; the flags must not say otherwise.
func (p *benchEmulate) readReplay(fs *flag.FlagSet) error {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "workers", "modes", "staleness", "servers", "compute", "jitter", "nic-gbps", "latency":
			set = append(set, "--"+f.Name)
		}
	})
	if len(set) > 0 {
		return fmt.Errorf("--replay %s with %s: a replay follows the recorded run's mode, workers, bound and order; leave %s out", p.replay, strings.Join(set, ", "), strings.Join(set, ", "))
	}
	recs, err := readRecordings(p.replay)
	if err != nil {
		return err
	}
	if p.schedule, err = emulate.Replay(recs); err != nil {
		return fmt.Errorf("--replay %s: %w", p.replay, err)
	}
	r := recs[0]
	if r.Batch != p.batch || r.Seed != p.job.model.seed {
		return fmt.Errorf("--replay %s: the run had --batch %d and --seed %d, this emulation --batch %d and --seed %d: give the run's", p.replay, r.Batch, r.Seed, p.batch, p.job.model.seed)
	}
	p.recorded = recs
	return nil
}

// runReplay emulates the recorded run along its schedule.
func (p *benchEmulate) runReplay(ctx context.Context, e emulation, model nn.Model, stdout io.Writer) error {
	r := p.recorded[0]
	if n := model.Layout().Size(); n != r.Floats {
		return fmt.Errorf("--replay %s: the run's model had %d floats, this one (%s) %d: give the run's model flags", p.replay, r.Floats, describeModel(model), n)
	}
	if !p.jsonOut {
		fmt.Fprintf(stdout, "shoal bench emulate: replaying %s: %s, %d workers, batch %d, %d epochs of %s, %s lr %g (%s decay), in the order shard 0 of its %d server(s) applied the pushes\n",
			p.replay, r.Mode, r.WorldSize, p.batch, p.epochs, e.train.Name(), e.opt.Algorithm, e.opt.LR, p.job.opt.decay, r.Servers)
	}
	e.schedule = p.schedule
	run, err := p.emulate(ctx, e, sim.Config{Mode: r.Mode, Workers: r.WorldSize, Staleness: r.Staleness, Servers: 1}, describeModel(model), stdout)
	if err != nil {
		return err
	}
	if p.out == "" {
		return nil
	}
	return writeEmulation(p.out, []emulateRun{run}, stdout, p.jsonOut)
}

// boundsOf is the staleness bounds to emulate mode m at: --staleness's
// for ssp, else none (0).
func (p *benchEmulate) boundsOf(m consistency.Mode) []int64 {
	if m != consistency.SSP {
		return []int64{0}
	}
	var bs []int64
	for _, s := range p.bounds {
		bs = append(bs, int64(s))
	}
	return bs
}

// emulate runs e as the job that sc simulates and prints how it went: a
// line (two when it diverged), or with --json an object.
func (p *benchEmulate) emulate(ctx context.Context, e emulation, sc sim.Config, name string, stdout io.Writer) (emulateRun, error) {
	m, n, s := sc.Mode, sc.Workers, sc.Staleness
	start := time.Now()
	res, err := e.run(ctx, sc)
	if err != nil {
		return emulateRun{}, fmt.Errorf("%s, %d workers: %w", strings.TrimSpace(m.String()+" "+boundLabel(m, s)), n, err)
	}
	run := emulateRun{Mode: m.String(), Workers: n, Staleness: s, Model: name, Batch: p.batch, Epochs: p.epochs,
		Accuracy: res.Final.Accuracy, Loss: finite(res.Final.Loss), Updates: res.Updates, Pushes: res.Staleness, Curve: res.Curve,
		Seconds: time.Since(start).Seconds(), StepSeconds: res.Simulated.StepSeconds, Diverged: res.Diverged}
	if p.jsonOut {
		return run, printJSONLine(stdout, run)
	}
	fmt.Fprintf(stdout, "%-6s %-5s N=%-4d test accuracy %6.2f%%  loss %.4f  %6d updates  staleness mean %5.2f max %3d  (%.1fs)\n",
		m, boundLabel(m, s), n, 100*res.Final.Accuracy, res.Final.Loss, res.Updates, res.Staleness.Mean(), max(res.Staleness.Worst(), 0), run.Seconds)
	if res.Diverged != "" {
		fmt.Fprintf(stdout, "       diverged after %d updates: %s\n", res.Updates, res.Diverged)
	}
	return run, nil
}

// finite is &x, or nil when x is NaN or infinite (JSON has no such
// numbers).
func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// emulation is what every emulated job of one command shares.
type emulation struct {
	model       func() (nn.Model, error)
	seed        uint64
	batch       int
	epochs      int
	opt         optim.Config
	wholeJob    bool  // the decay spans the job, as in shoal train
	warmup      int64 // updates
	train, test data.Dataset
	evalEvery   int64
	// schedule, when not nil, is followed instead of simulating one.
	schedule []sim.Op
}

// run emulates the job that sc simulates (its mode, workers, bound).
func (e emulation) run(ctx context.Context, sc sim.Config) (emulate.Result, error) {
	opt := e.opt
	n := sc.Workers
	perRank := (e.train.Len() + n - 1) / n
	perEpoch := emulate.UpdatesPerEpoch(sc.Mode, sc.Staleness, n, int64((perRank+e.batch-1)/e.batch))
	if e.wholeJob {
		opt.Schedule.DecaySteps = max(perEpoch*int64(e.epochs)-e.warmup, 1)
	}
	return emulate.Run(ctx, emulate.Config{Sim: sc, Model: e.model, Seed: e.seed, Batch: e.batch, Epochs: e.epochs, Optimizer: opt,
		Train: e.train, Test: e.test, EvalEvery: e.evalEvery, Schedule: e.schedule})
}

// emulation is f's job to emulate at batch for epochs: its optimizer,
// data and model.
func (f simJobFlags) emulation(batch, epochs int, evalEvery int64) (emulation, error) {
	// Decay over the whole job, as shoal train does, once its length is
	// known; the flags are checked here.
	ocfg, wholeJob, err := decayFlags(f.opt)
	if err != nil {
		return emulation{}, err
	}
	train, test, err := f.data.load(f.model.seed)
	if err != nil {
		return emulation{}, err
	}
	spec, err := f.model.spec()
	if err != nil {
		return emulation{}, err
	}
	newModel := func() (nn.Model, error) {
		be, _ := nn.NewBestCPU(1)
		return nn.New(spec, be)
	}
	return emulation{model: newModel, seed: f.model.seed, batch: batch, epochs: epochs, opt: ocfg, wholeJob: wholeJob, warmup: f.opt.warmup,
		train: train, test: test, evalEvery: evalEvery}, nil
}

// decayFlags checks the optimizer flags of an emulation and says whether
// the decay spans the whole job (its length is known per job).
func decayFlags(of optFlags) (optim.Config, bool, error) {
	wholeJob := of.decay != "none" && of.decaySteps == 0
	probe := of
	if wholeJob {
		probe.decaySteps = 1
	}
	cfg, err := probe.config()
	return cfg, wholeJob, err
}

func boundLabel(m consistency.Mode, s int64) string {
	if m != consistency.SSP {
		return ""
	}
	return "s=" + strconv.FormatInt(s, 10)
}

// writeEmulation writes results.json and, per worker count, a plot of
// accuracy against epochs into dir.
func writeEmulation(dir string, runs []emulateRun, stdout io.Writer, quiet bool) error {
	b, err := json.MarshalIndent(map[string]any{"simulated": true, "emulated": runs}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	byN := map[int][]bench.Curve{}
	var order []int
	for _, r := range runs {
		if _, ok := byN[r.Workers]; !ok {
			order = append(order, r.Workers)
		}
		c := bench.Curve{Mode: r.Mode, Label: r.Mode}
		if r.Mode == consistency.SSP.String() {
			c.Label += fmt.Sprintf(" (s = %d)", r.Staleness)
			c.Dash = len(byN[r.Workers]) % 4
		}
		if r.Diverged != "" {
			c.Label += fmt.Sprintf(", diverged after %d updates", r.Updates)
		}
		for _, p := range r.Curve {
			c.X, c.Y = append(c.X, p.Epochs), append(c.Y, 100*p.Accuracy)
		}
		byN[r.Workers] = append(byN[r.Workers], c)
	}
	for _, n := range order {
		path := filepath.Join(dir, fmt.Sprintf("accuracy-n%d.png", n))
		title := fmt.Sprintf("Emulated: %d workers, %s, batch %d", n, runs[0].Model, runs[0].Batch)
		lp := bench.LinePlot{Title: title, XLabel: "epochs trained (passes over the training set)", YLabel: "test accuracy (%)", Curves: byN[n]}
		if err := lp.Write(path); err != nil {
			return err
		}
		if !quiet {
			fmt.Fprintf(stdout, "wrote %s\n", path)
		}
	}
	return nil
}

// positiveInts parses a flag's comma-separated counts.
func positiveInts(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s %q: want positive integers separated by commas, e.g. 1,4,16", flag, s)
		}
		out = append(out, n)
	}
	return out, nil
}
