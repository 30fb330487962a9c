package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/shoalml/shoal/bench/harness"
	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/ps"
)

const benchEmulateSynopsis = `Emulates parameter-server jobs of --workers workers in this one process, to show
what staleness does to accuracy at worker counts this machine cannot run: each
worker's gradient is computed on the weights it would have read, in the order a
simulated job (shoal bench plan's simulator) applies pushes and answers reads, by
real workers against a real shard (package emulate). Prints each job's final test
accuracy and staleness; --out DIR also writes results.json and one plot of
accuracy against epochs per worker count. The run's timing is not emulated:
shoal bench plan predicts it. --model also takes the names of shoal bench train
--models (big, big-6m, mlp-25m, mlp-6m), whose flags yield to those given.

--replay DIR follows instead the order of a real run recorded by shoal train
--record-pushes DIR: its mode, workers and bound come from the recording; give
the run's model, data, --batch, --epochs, optimizer and --seed. With one shard
the replay is the recorded run, gradient for gradient.

--update-rules emulates async and ssp once per rule by which the shard applies
each push (shoal ps --update-rule): e.g. full,average,staleness,dcasgd.

--local-steps 10,50,100 emulates every sync and async job again with each H
(DiLoCo, shoal train --local-steps): each worker takes H steps with the
optimizer of --optimizer, --lr, … on its own weights and pushes the pseudo-
gradient, which the shard applies with --outer-optimizer, --outer-lr and
--outer-momentum; the schedule has one push-pull a round.`

// benchEmulateFlags are shoal bench emulate's flags.
type benchEmulateFlags struct {
	job        simJobFlags
	cfg        harness.EmulateConfig
	workerList string // --workers, read into cfg.Workers
	modeList   string // --modes, read into cfg.Modes
	boundList  string // --staleness, read into cfg.Bounds
	ruleList   string // --update-rules, read into cfg.Rules
	localList  string // --local-steps, read into cfg.LocalSteps
	outer      flags.Outer
	dc         flags.DC
	replay     string // --replay DIR
}

func (f *benchEmulateFlags) register(fs *flag.FlagSet) {
	f.job.register(fs)
	fs.StringVar(&f.workerList, "workers", "8,16,32,64", "worker counts, comma-separated")
	fs.StringVar(&f.modeList, "modes", "async,ssp,sync", "modes: async, ssp, sync")
	fs.StringVar(&f.boundList, "staleness", "1,4,16", "ssp: the bounds to emulate, comma-separated")
	fs.StringVar(&f.ruleList, "update-rules", ps.UpdateAuto.String(), "async, ssp: the shard's update rules to emulate, comma-separated (full, average, staleness, dcasgd; auto: each mode's default)")
	fs.StringVar(&f.localList, "local-steps", "", "sync, async: emulate each job again with each of these local steps H, comma-separated (DiLoCo: --optimizer is the workers' inner optimizer, --outer-optimizer the shard's); empty: none")
	f.outer.Register(fs)
	f.dc.Register(fs)
	fs.IntVar(&f.cfg.Job.Batch, "batch", 64, "batch per worker")
	fs.IntVar(&f.cfg.Job.Epochs, "epochs", 3, "epochs of the job")
	fs.IntVar(&f.cfg.Servers, "servers", 1, "shards of the simulated job (the emulation follows shard 0's order)")
	fs.Int64Var(&f.cfg.Job.EvalEvery, "eval-every", 0, "updates between evaluations on the test set (0: about 20 over the job)")
	fs.StringVar(&f.cfg.Out, "out", "", "folder for results.json and the plots (accuracy-n<N>.png)")
	fs.BoolVar(&f.cfg.JSON, "json", false, "print one JSON object per job")
	fs.StringVar(&f.replay, "replay", "", "follow the order of the real run recorded in DIR by shoal train --record-pushes (its mode, workers and bound), not a simulated one")
}

// parseBenchEmulate reads and checks shoal bench emulate's flags, reads
// --replay's recordings and checks --out.
func parseBenchEmulate(args []string, stderr io.Writer) (*benchEmulateFlags, error) {
	fs := flags.NewFlagSet("bench emulate", benchEmulateSynopsis, stderr)
	p := &benchEmulateFlags{}
	p.register(fs)
	if err := flags.Parse(fs, args); err != nil {
		return nil, err
	}
	if err := flags.ExpandHarnessModel(fs); err != nil {
		return nil, err
	}
	c := &p.cfg
	var err error
	if c.Workers, err = harness.PositiveInts("--workers", p.workerList); err != nil {
		return nil, err
	}
	if c.Bounds, err = harness.PositiveInts("--staleness", p.boundList); err != nil {
		return nil, err
	}
	if c.Modes, err = harness.ParseModes(p.modeList); err != nil {
		return nil, err
	}
	if c.Rules, err = harness.ParseRules(p.ruleList); err != nil {
		return nil, err
	}
	if c.Job.Update, err = p.dc.Config(c.Rules[0]); err != nil {
		return nil, err
	}
	if p.localList != "" {
		if c.LocalSteps, err = harness.PositiveInts("--local-steps", p.localList); err != nil {
			return nil, err
		}
	}
	if c.Job.Outer, err = p.outer.Config(); err != nil {
		return nil, err
	}
	c.Net = p.job.net()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if p.replay != "" {
		if len(c.LocalSteps) > 0 {
			return nil, fmt.Errorf("--replay %s with --local-steps %s: a recording of gradient pushes cannot order pseudo-gradients; leave one out", p.replay, p.localList)
		}
		if len(c.Rules) > 1 {
			return nil, fmt.Errorf("--replay %s with --update-rules %s: a replay is one run; give one rule", p.replay, p.ruleList)
		}
		if err := p.readReplay(fs); err != nil {
			return nil, err
		}
	}
	if c.Out != "" {
		if err := flags.WritableDir("--out", c.Out); err != nil {
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
	cfg := p.cfg
	if cfg.Job, err = p.job.emulation(cfg.Job.Batch, cfg.Job.Epochs, cfg.Job.EvalEvery); err != nil {
		return err
	}
	cfg.Job.Update, cfg.Job.Outer = p.cfg.Job.Update, p.cfg.Job.Outer
	model, err := cfg.Job.Model()
	if err != nil {
		return err
	}
	cfg.ModelName = flags.DescribeModel(model)
	return harness.Emulate(ctx, cfg, stdout)
}

// readReplay reads --replay's recordings and rebuilds their schedule;
// the replay takes the recorded job's mode, workers and bound, so the
// flags must not say otherwise.
func (p *benchEmulateFlags) readReplay(fs *flag.FlagSet) error {
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
	p.cfg.Replay, err = harness.NewReplay(p.replay, recs, p.cfg.Job.Batch, p.job.model.Seed)
	return err
}
