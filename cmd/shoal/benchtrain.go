package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/bench/harness"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/machine"
)

const benchTrainSynopsis = `Runs shoal train over a matrix of modes × workers × servers × models with the same
data order, seed and optimizer, measures throughput, the step-time breakdown,
traffic, staleness and test accuracy over time, compares communication with the
analytic model, and writes results.json, report.md and PNG plots to --out.
Without --models/--modes/--workers/--servers it runs the built-in plan (make bench).`

func runBenchTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseBenchTrain(args, stderr)
	if err != nil {
		return err
	}
	if cfg.Exe, err = os.Executable(); err != nil {
		return fmt.Errorf("finding this binary to run shoal train: %w", err)
	}
	cfg.Command, cfg.Revision = append([]string{"shoal", "bench", "train"}, args...), machine.Revision()
	return harness.Train(ctx, cfg, stdout, stderr)
}

// benchTrainFlags are shoal bench train's flags.
type benchTrainFlags struct {
	cfg     harness.TrainConfig
	plan    planFlags
	nic     flags.NIC
	dataset flags.Data
	update  flags.Update
	local   flags.LocalSteps
}

func (f *benchTrainFlags) register(fs *flag.FlagSet) {
	cfg := &f.cfg
	f.plan.register(fs)
	fs.StringVar(&cfg.Out, "out", "bench-out", "folder for results.json, report.md and the plots")
	fs.Float64Var(&cfg.Target, "target-accuracy", 0.85, "test accuracy whose time and steps to reach are reported")
	fs.BoolVar(&cfg.Until, "until-target", false, "end each run once worker 0 measures --target-accuracy (its steps or epochs become a cap)")
	fs.Int64Var(&cfg.EvalEvery, "eval-every", 100, "worker 0 evaluates on the test set every N steps")
	fs.StringVar(&cfg.Peers, "peers", "bench/peers", "folder of the peer scripts (torch_ddp.py); empty: no peers")
	fs.StringVar(&cfg.Python, "python", "/usr/bin/python3", "the Python with torch, for the peers")
	fs.DurationVar(&cfg.RunTimeout, "run-timeout", 10*time.Minute, "the longest one run may take")
	f.nic.Register(fs)
	f.dataset.Register(fs)
	f.update.Register(fs)
	f.local.Register(fs)
	fs.Lookup("local-steps").Usage = "add to every sync and async run the same with this many local steps (DiLoCo, shoal train --local-steps H); 0: none"
	fs.Lookup("nic-gbps").DefValue, f.nic.Gbps = "1", 1
}

// parseBenchTrain reads and checks shoal bench train's flags, makes the
// plan, creates --out and checks the dataset loads.
func parseBenchTrain(args []string, stderr io.Writer) (harness.TrainConfig, error) {
	fs := flags.NewFlagSet("bench train", benchTrainSynopsis, stderr)
	f := &benchTrainFlags{}
	f.register(fs)
	cfg := &f.cfg
	if err := flags.Parse(fs, args); err != nil {
		return *cfg, err
	}
	if err := f.nic.Validate(); err != nil {
		return *cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return *cfg, err
	}
	if _, err := f.update.Config(); err != nil {
		return *cfg, err
	}
	cfg.UpdateArgs = f.update.Args()
	var err error
	if cfg.Plan, err = f.plan.plan(f.nic); err != nil {
		return *cfg, err
	}
	if f.local.F > 0 {
		return *cfg, fmt.Errorf("--fragments %d: bench train does not run streaming fragments; run shoal train --fragments, or simulate them with bench plan", f.local.F)
	}
	if err := f.local.Validate(consistency.Sync); err != nil {
		return *cfg, err
	}
	cfg.Plan.Runs = bench.WithLocalSteps(cfg.Plan.Runs, f.local.H)
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return *cfg, fmt.Errorf("--out %s: %w", cfg.Out, err)
	}
	if _, _, err := f.dataset.Load(1); err != nil {
		return *cfg, err
	}
	cfg.NIC, cfg.Dataset, cfg.Data = f.nic.Config(), f.dataset.Dataset, f.dataset.Dir
	if f.nic.Shaped() {
		cfg.NICArgs = f.nic.Args()
	}
	return *cfg, nil
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
func (p planFlags) plan(nf flags.NIC) (bench.Plan, error) {
	plan := bench.DefaultPlan(p.quick)
	if p.models != "" || p.modes != "" || p.workers != "" || p.servers != "" {
		var err error
		if plan, err = bench.ParseGrid(p.models, p.modes, p.workers, p.servers, p.steps, p.epochs); err != nil {
			return bench.Plan{}, err
		}
	}
	if !nf.Shaped() {
		plan.Runs = bench.DropLoopbackTwins(plan.Runs)
	}
	return plan, nil
}

func runBenchDiff(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags.NewFlagSet("bench diff", "Compares two results.json files of shoal bench train run by run (matched by id):\nshoal bench diff BEFORE/results.json AFTER/results.json", stderr)
	if err := flags.ParseArgs(fs, args, 2, "two results.json files"); err != nil {
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
	fs := flags.NewFlagSet("bench report", "Renders report.md and the plots again from a results.json of shoal bench train:\nshoal bench report [--out DIR] RESULTS.json", stderr)
	out := fs.String("out", "", "folder for report.md and the plots (default: the results file's folder)")
	if err := flags.ParseArgs(fs, args, 1, "one results.json file"); err != nil {
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
	return harness.WriteReport(dir, res, stdout)
}
