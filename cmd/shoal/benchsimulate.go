package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/bench/harness"
	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/machine"
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

// benchSimulateFlags are shoal bench simulate's flags.
type benchSimulateFlags struct {
	cfg       harness.SimulateConfig
	plan      planFlags
	nic       flags.NIC
	dataset   flags.Data
	calibrate string
	cpuFrom   string
}

func (f *benchSimulateFlags) register(fs *flag.FlagSet) {
	f.plan.register(fs)
	f.nic.Register(fs)
	f.dataset.Register(fs)
	fs.Lookup("nic-gbps").DefValue, f.nic.Gbps = "1", 1
	fs.StringVar(&f.cfg.Out, "out", "bench-sim", "folder for results.json, report.md and the plots")
	fs.StringVar(&f.calibrate, "calibrate", "", "a results.json of shoal bench train whose measured compute per step (and its spread) the runs take")
	fs.Float64Var(&f.cfg.ApplyGbps, "apply-gbps", 0, "optimizer speed, GB/s of weights updated (0: measure it here)")
	fs.Float64Var(&f.cfg.Jitter, "jitter", 0.1, "spread of each step's compute (a log-normal's σ) where --calibrate does not give it")
	fs.StringVar(&f.cpuFrom, "cpu-calibrate", "", "a results.json of shoal bench train whose loopback async run the host's CPU cost per byte of a PS transfer is fitted to (default: --calibrate's)")
}

// parseBenchSimulate reads and checks shoal bench simulate's flags, loads
// the results that calibrate the runs, and makes --out.
func parseBenchSimulate(args []string, stderr io.Writer) (*benchSimulateFlags, error) {
	fs := flags.NewFlagSet("bench simulate", benchSimulateSynopsis, stderr)
	p := &benchSimulateFlags{}
	p.register(fs)
	if err := flags.Parse(fs, args); err != nil {
		return nil, err
	}
	if err := p.nic.Validate(); err != nil {
		return nil, err
	}
	c := &p.cfg
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var err error
	if c.Plan, err = p.plan.plan(p.nic); err != nil {
		return nil, err
	}
	if p.calibrate != "" {
		if c.Measured, err = harness.LoadCalibration(p.calibrate); err != nil {
			return nil, err
		}
	}
	if c.Host, err = harness.HostCPU(p.cpuFrom, p.calibrate, c.Measured); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return nil, fmt.Errorf("--out %s: %w", c.Out, err)
	}
	c.NIC, c.Model = p.nic.Config(), harnessModel
	return p, nil
}

func runBenchSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	p, err := parseBenchSimulate(args, stderr)
	if err != nil {
		return err
	}
	cfg := p.cfg
	if slices.ContainsFunc(cfg.Plan.Runs, func(r bench.Run) bool { return r.Epochs > 0 }) {
		train, _, err := p.dataset.Load(1)
		if err != nil {
			return err
		}
		cfg.TrainLen = train.Len()
	}
	cfg.Command, cfg.Revision = append([]string{"shoal", "bench", "simulate"}, args...), machine.Revision()
	return harness.Simulate(ctx, cfg, stdout)
}

// harnessModel is the harness's model name as the shoal train flags in
// bench.Models build it: its spec, batch and seed.
func harnessModel(name string) (harness.ModelArgs, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var arch flags.Model
	arch.Register(fs)
	batch := fs.Int("batch", 64, "")
	if err := fs.Parse(bench.Models[name].Args); err != nil {
		return harness.ModelArgs{}, fmt.Errorf("the harness's model %s: %w (a bug)", name, err)
	}
	spec, err := arch.Spec()
	if err != nil {
		return harness.ModelArgs{}, err
	}
	return harness.ModelArgs{Spec: spec, Batch: *batch, Seed: arch.Seed}, nil
}
