package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/internal/netshape"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/nn"
)

// benchTrain is one `shoal bench train`: its flags and plan.
type benchTrain struct {
	out       string
	target    float64
	until     bool
	evalEvery int64
	peers     string
	python    string
	runLimit  time.Duration
	nf        nicFlags
	df        dataFlags
	plan      bench.Plan
}

func runBenchTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	b, err := parseBenchTrain(args, stderr)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary to run shoal train: %w", err)
	}
	res := &bench.Results{Schema: bench.SchemaVersion, Started: time.Now().UTC().Truncate(time.Second),
		Command: append([]string{"shoal", "bench", "train"}, args...), Revision: revision(), Machine: describeMachine()}
	if b.nf.shaped() {
		// The NIC model must deliver its rate before anything is measured
		// through it.
		chk, err := checkShaper(ctx, b.nf, stdout)
		if err != nil {
			return err
		}
		res.Shaper = &bench.ShaperCheck{ConfiguredGbps: chk.ConfiguredGbps, MeasuredGbps: chk.MeasuredGbps, Bytes: chk.Bytes, Ratio: chk.Ratio}
	}
	peerScript := ""
	if b.peers != "" && len(b.plan.Peers) > 0 {
		peerScript = filepath.Join(b.peers, "torch_ddp.py")
		if why := peerUnavailable(ctx, b.python, peerScript); why != "" {
			fmt.Fprintf(stdout, "peers skipped: %s\n", why)
			peerScript = ""
		}
	}
	var runs []func() bench.Record
	for _, r := range b.plan.Runs {
		runs = append(runs, func() bench.Record { return b.runShoal(ctx, exe, r, stderr) })
	}
	if peerScript != "" {
		for _, r := range b.plan.Peers {
			runs = append(runs, func() bench.Record { return b.runPeer(ctx, peerScript, r, stderr) })
		}
	}
	for i, run := range runs {
		rec := run()
		res.Runs = append(res.Runs, rec)
		fmt.Fprintf(stdout, "[%d/%d] %s\n", i+1, len(runs), describeRecord(&rec))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	bench.ScalingEfficiency(res.Runs)
	return writeBenchOutputs(b.out, res, stdout)
}

// parseBenchTrain reads and checks shoal bench train's flags, makes the
// plan, creates --out and checks the dataset loads.
func parseBenchTrain(args []string, stderr io.Writer) (*benchTrain, error) {
	fs := newFlagSet("bench train", "Runs shoal train over a matrix of modes × workers × servers × models with the same\ndata order, seed and optimizer, measures throughput, the step-time breakdown,\ntraffic, staleness and test accuracy over time, compares communication with the\nanalytic model, and writes results.json, report.md and PNG plots to --out.\nWithout --models/--modes/--workers/--servers it runs the built-in plan (make bench).", stderr)
	b := &benchTrain{}
	var pf planFlags
	pf.register(fs)
	fs.StringVar(&b.out, "out", "bench-out", "folder for results.json, report.md and the plots")
	fs.Float64Var(&b.target, "target-accuracy", 0.85, "test accuracy whose time and steps to reach are reported")
	fs.BoolVar(&b.until, "until-target", false, "end each run once worker 0 measures --target-accuracy (its steps or epochs become a cap)")
	fs.Int64Var(&b.evalEvery, "eval-every", 100, "worker 0 evaluates on the test set every N steps")
	fs.StringVar(&b.peers, "peers", "bench/peers", "folder of the peer scripts (torch_ddp.py); empty: no peers")
	fs.StringVar(&b.python, "python", "/usr/bin/python3", "the Python with torch, for the peers")
	fs.DurationVar(&b.runLimit, "run-timeout", 10*time.Minute, "the longest one run may take")
	b.nf.register(fs)
	b.df.register(fs)
	fs.Lookup("nic-gbps").DefValue, b.nf.gbps = "1", 1
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := b.nf.validate(); err != nil {
		return nil, err
	}
	if b.target < 0 || b.target > 1 {
		return nil, fmt.Errorf("--target-accuracy %g: want 0 to 1", b.target)
	}
	if b.evalEvery < 1 {
		return nil, fmt.Errorf("--eval-every %d: want >= 1", b.evalEvery)
	}
	var err error
	if b.plan, err = pf.plan(b.nf); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return nil, fmt.Errorf("--out %s: %w", b.out, err)
	}
	if _, _, err := b.df.load(1); err != nil {
		return nil, err
	}
	return b, nil
}

// planFlags choose the runs of shoal bench train (and of shoal bench
// simulate, which predicts them): the built-in plan, or a grid.
type planFlags struct {
	quick                           bool
	models, modes, workers, servers string
	steps                           int64
	epochs                          int
}

func (p *planFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&p.quick, "quick", false, "a small plan that finishes in under a minute")
	fs.StringVar(&p.models, "models", "", "grid: models, comma-separated: mlp, cnn, big (25M parameters)")
	fs.StringVar(&p.modes, "modes", "", "grid: modes, comma-separated: async, async-overlap (async with --overlap-push-pull), sync, ssp, ring")
	fs.StringVar(&p.workers, "workers", "", "grid: worker counts, comma-separated")
	fs.StringVar(&p.servers, "servers", "", "grid: server counts for the PS modes, comma-separated")
	fs.Int64Var(&p.steps, "steps", 200, "grid: steps per run (per worker)")
	fs.IntVar(&p.epochs, "epochs", 0, "grid: epochs per run instead of --steps")
}

// plan is the built-in plan, or the grid when one of its lists is given;
// without a NIC model (nf) the loopback runs that would repeat a run go.
func (p planFlags) plan(nf nicFlags) (bench.Plan, error) {
	plan := bench.DefaultPlan(p.quick)
	if p.models != "" || p.modes != "" || p.workers != "" || p.servers != "" {
		var err error
		if plan, err = bench.ParseGrid(p.models, p.modes, p.workers, p.servers, p.steps, p.epochs); err != nil {
			return bench.Plan{}, err
		}
	}
	if !nf.shaped() {
		plan.Runs = bench.DropLoopbackTwins(plan.Runs)
	}
	return plan, nil
}

// checkShaper measures one stream through the NIC model, up to three
// times (a moment's load on a shared machine can starve one try), and
// returns the first measurement within 10% of the configured rate, or an
// error with every try.
func checkShaper(ctx context.Context, nf nicFlags, stdout io.Writer) (netshape.Check, error) {
	bytes := int64(min(max(nf.gbps*1e9/8, 32<<20), 256<<20)) // about a second's worth
	var tries []string
	for range 3 {
		chk, err := netshape.SelfCheck(ctx, nf.config(), bytes)
		if err != nil {
			return chk, fmt.Errorf("checking the NIC model: %w", err)
		}
		fmt.Fprintf(stdout, "NIC model: %g Gbit/s configured, one stream measured %.3f Gbit/s (%.3f×)\n", nf.gbps, chk.MeasuredGbps, chk.Ratio)
		if chk.Ratio >= 0.9 && chk.Ratio <= 1.1 {
			return chk, nil
		}
		tries = append(tries, fmt.Sprintf("%.3f Gbit/s (%.2f×)", chk.MeasuredGbps, chk.Ratio))
	}
	return netshape.Check{}, fmt.Errorf("the NIC model is off: one stream through a %g Gbit/s NIC measured %s, want 0.9 to 1.1×; the machine may be too loaded to shape at that rate",
		nf.gbps, strings.Join(tries, ", "))
}

// trainArgs is the shoal train command line of r.
func trainArgs(r bench.Run, nf nicFlags, df dataFlags, evalEvery int64) []string {
	args := []string{"train", "--mode", r.Mode, "--workers", strconv.Itoa(r.Workers)}
	if r.Mode == "async-overlap" {
		args = []string{"train", "--mode", consistency.Async.String(), "--overlap-push-pull", "--workers", strconv.Itoa(r.Workers)}
	}
	if r.Mode != consistency.Ring.String() {
		args = append(args, "--servers", strconv.Itoa(r.Servers))
	}
	args = append(args, bench.Models[r.Model].Args...)
	if r.Epochs > 0 {
		args = append(args, "--epochs", strconv.Itoa(r.Epochs))
	} else {
		args = append(args, "--steps", strconv.FormatInt(r.Steps, 10))
	}
	if bench.Models[r.Model].Big {
		evalEvery = 0
		args = append(args, "--test=false")
	}
	// A constant learning rate (shoal train decays it by default), as the
	// peer uses: the same optimizer for every system.
	args = append(args, "--lr-decay", "none", "--seed", "1", "--data", df.dir, "--dataset", df.dataset, "--stats",
		"--eval-every", strconv.FormatInt(evalEvery, 10), "--json")
	if nf.shaped() {
		args = append(args, nf.args()...)
	}
	return args
}

// runShoal runs one shoal train and turns its summary into a record.
func (b *benchTrain) runShoal(ctx context.Context, exe string, r bench.Run, stderr io.Writer) bench.Record {
	nf, target := b.nf, b.target
	if r.Loopback {
		nf = nicFlags{}
	}
	args := trainArgs(r, nf, b.df, b.evalEvery)
	if b.until && target > 0 && !bench.Models[r.Model].Big {
		args = append(args, "--stop-at-accuracy", fmtFloat(target))
	}
	rec := bench.Record{ID: r.ID("", nf.gbps), Command: append([]string{"shoal"}, args...), Mode: r.Mode, Model: bench.Models[r.Model].Label,
		Workers: r.Workers, Servers: r.Servers, Seed: 1, NICGbps: nf.gbps, RTTMillis: float64(nf.rtt) / float64(time.Millisecond), TestAccuracy: -1}
	if target > 0 {
		rec.TargetAccuracy = target
	}
	var sum launch.Result
	if !b.runInto(ctx, &rec, "shoal train's summary", exe, args, &sum, stderr) {
		return rec
	}
	rec.Fill(&sum)
	if bench.Models[r.Model].Big {
		rec.TargetAccuracy = 0
	}
	bench.ToTarget(&rec)
	if nf.gbps > 0 {
		rec.Comm = bench.CommModel(&rec, nf.gbps)
	}
	return rec
}

// peerUnavailable says why the PyTorch peer cannot run, or "".
func peerUnavailable(ctx context.Context, python, script string) string {
	if _, err := os.Stat(script); err != nil {
		return fmt.Sprintf("%s: %v", script, err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, python, "-c", "import torch.distributed").CombinedOutput(); err != nil {
		return fmt.Sprintf("%s cannot import torch.distributed (apt-get install python3-torch): %v %s", python, err, bytes.TrimSpace(out))
	}
	return ""
}

// runPeer runs the PyTorch DDP peer on the same model, data, batch,
// optimizer and seed; it prints a bench.Record.
func (b *benchTrain) runPeer(ctx context.Context, script string, r bench.Run, stderr io.Writer) bench.Record {
	python, df, target, until, evalEvery := b.python, b.df, b.target, b.until, b.evalEvery
	args := []string{script, "--workers", strconv.Itoa(r.Workers), "--model", "mlp", "--hidden", "256,128", "--batch", "64",
		"--lr", "0.01", "--momentum", "0.9", "--seed", "1", "--data", df.dir, "--eval-every", strconv.FormatInt(evalEvery, 10),
		"--target-accuracy", fmtFloat(target), "--json"}
	if r.Epochs > 0 {
		args = append(args, "--epochs", strconv.Itoa(r.Epochs))
	} else {
		args = append(args, "--steps", strconv.FormatInt(r.Steps, 10))
	}
	if until && target > 0 {
		args = append(args, "--stop-at-accuracy", fmtFloat(target))
	}
	rec := bench.Record{ID: r.ID("pytorch-ddp-gloo", 0), Peer: "pytorch-ddp-gloo", Command: append([]string{python}, args...),
		Mode: "ddp", Model: bench.Models[r.Model].Label, Workers: r.Workers, Seed: 1, TestAccuracy: -1}
	var got bench.Record
	if !b.runInto(ctx, &rec, "the peer's record", python, args, &got, stderr) {
		return rec
	}
	got.ID, got.Command = rec.ID, rec.Command
	return got
}

// runInto runs exe with args to its end (within --run-timeout) and decodes
// the last JSON line it printed, what, into v. A failure becomes rec's
// Error, and runInto returns false.
func (b *benchTrain) runInto(ctx context.Context, rec *bench.Record, what, exe string, args []string, v any, stderr io.Writer) bool {
	line, err := launch.RunJSON(ctx, b.runLimit, exe, args, nil, stderr)
	if err == nil {
		err = json.Unmarshal(line, v)
		if err != nil {
			err = fmt.Errorf("reading %s: %w", what, err)
		}
	}
	if err != nil {
		rec.Error = err.Error()
		return false
	}
	return true
}

// describeRecord is one progress line.
func describeRecord(r *bench.Record) string {
	name := r.ID
	if r.Error != "" {
		return fmt.Sprintf("%s: FAILED: %s", name, firstLine(r.Error))
	}
	s := fmt.Sprintf("%s: %.0f samples/s, step p50 %.1f ms", name, r.SamplesPerSec, 1e3*r.StepTime.Step.P50)
	if r.Comm != nil {
		s += fmt.Sprintf(", comm %.1f ms (model %.1f ms, %.2f×)", 1e3*r.Comm.MeasuredSeconds, 1e3*r.Comm.AnalyticSeconds, r.Comm.Ratio)
	}
	if r.TestAccuracy >= 0 {
		s += fmt.Sprintf(", test %.2f%%", 100*r.TestAccuracy)
	}
	return s
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// writeBenchOutputs writes results.json (validated against the schema),
// the plots and report.md into dir.
func writeBenchOutputs(dir string, res *bench.Results, stdout io.Writer) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := bench.Validate(b); err != nil {
		return fmt.Errorf("the results do not match their schema (a bug): %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return writeReport(dir, res, stdout)
}

// writeReport writes the plots and report.md of res into dir.
func writeReport(dir string, res *bench.Results, stdout io.Writer) error {
	plots, err := bench.WritePlots(dir, res)
	if err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		return err
	}
	if err := bench.WriteReport(f, res, plots); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: report.md and %d plots\n", dir, len(plots))
	return nil
}

// revision is the git revision of this binary: from its build info, else
// from git in the current folder, else "unknown".
func revision() string {
	if b := readBuild(); b.revision != "unknown" {
		if b.modified {
			return b.revision + "+dirty"
		}
		return b.revision
	}
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += "+dirty"
	}
	return rev + " (from git in the current folder)"
}

// describeMachine describes this host.
func describeMachine() bench.Machine {
	m := bench.Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version()}
	m.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for l := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m.MemBytes = kb << 10
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 0 {
			m.LoadAvg, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	be, _ := nn.NewBestCPU(1)
	m.GEMM = be.Name()
	if math.IsNaN(m.LoadAvg) {
		m.LoadAvg = 0
	}
	return m
}

func runBenchDiff(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench diff", "Compares two results.json files of shoal bench train run by run (matched by id):\nshoal bench diff BEFORE/results.json AFTER/results.json", stderr)
	if err := parseArgs(fs, args, 2, "two results.json files"); err != nil {
		return err
	}
	a, err := bench.Load(fs.Arg(0))
	if err != nil {
		return err
	}
	b, err := bench.Load(fs.Arg(1))
	if err != nil {
		return err
	}
	return bench.WriteDiff(stdout, a, b)
}

func runBenchReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench report", "Renders report.md and the plots again from a results.json of shoal bench train:\nshoal bench report [--out DIR] RESULTS.json", stderr)
	out := fs.String("out", "", "folder for report.md and the plots (default: the results file's folder)")
	if err := parseArgs(fs, args, 1, "one results.json file"); err != nil {
		return err
	}
	res, err := bench.Load(fs.Arg(0))
	if err != nil {
		return err
	}
	dir := *out
	if dir == "" {
		dir = filepath.Dir(fs.Arg(0))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	return writeReport(dir, res, stdout)
}
