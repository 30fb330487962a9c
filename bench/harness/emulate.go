package harness

import (
	"context"
	"encoding/json"
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
	"github.com/shoalml/shoal/emulate"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/sim"
)

// EmulateRun is one emulated job as --json and results.json write it.
type EmulateRun struct {
	Mode      string `json:"mode"`
	Workers   int    `json:"workers"`
	Staleness int64  `json:"staleness,omitempty"`
	// Update is the shard's update rule (async and SSP).
	Update string `json:"update_rule,omitempty"`
	// LocalSteps is DiLoCo's H (0: every step's gradient pushed).
	LocalSteps int                   `json:"local_steps,omitempty"`
	Model      string                `json:"model"`
	Batch      int                   `json:"batch"`
	Epochs     int                   `json:"epochs"`
	Accuracy   float64               `json:"test_accuracy"`
	Loss       *float64              `json:"test_loss"` // null when not finite (diverged)
	Updates    int64                 `json:"updates"`
	Pushes     consistency.Staleness `json:"staleness_histogram,omitempty"`
	Curve      []emulate.Point       `json:"curve"`
	Seconds    float64               `json:"seconds"`
	Diverged   string                `json:"diverged,omitempty"`
	// Simulated: the schedule's job, as shoal bench plan would print it.
	StepSeconds float64 `json:"simulated_step_seconds"`
}

// EmulateConfig is one shoal bench emulate: the jobs to emulate at each
// worker count, mode and SSP bound, or the one recorded run to replay.
type EmulateConfig struct {
	Job       Job
	Net       SimJob
	ModelName string // the model, described
	Workers   []int
	Modes     []consistency.Mode
	Bounds    []int // ssp's
	// Rules are the update rules to emulate async and SSP with (none:
	// Job.Update's alone).
	Rules []ps.Update
	// LocalSteps are the H to emulate each sync and async job with
	// again (DiLoCo, Job.Outer the shard's optimizer); none: none.
	LocalSteps []int
	Servers    int // shards of the simulated job
	Out        string
	JSON       bool
	// Replay, when not nil, is the recorded run to follow instead.
	Replay *Replay
}

// Validate says what is wrong with cfg, in the flags' words.
func (cfg EmulateConfig) Validate() error {
	for _, m := range cfg.Modes {
		if !m.UsesServers() {
			return fmt.Errorf("--modes %s: only the parameter-server modes are emulated (the ring is sync SGD on workers×batch samples a step)", m)
		}
	}
	if err := cfg.Net.Validate(); err != nil {
		return err
	}
	for _, h := range cfg.LocalSteps {
		if h > ps.MaxLocalSteps {
			return fmt.Errorf("--local-steps %d: want 1..%d", h, ps.MaxLocalSteps)
		}
	}
	if cfg.Job.Batch < 1 || cfg.Job.Epochs < 1 || cfg.Servers < 1 || cfg.Job.EvalEvery < 0 {
		return fmt.Errorf("--batch %d, --epochs %d, --servers %d, --eval-every %d: want batch, epochs, servers >= 1, eval-every >= 0",
			cfg.Job.Batch, cfg.Job.Epochs, cfg.Servers, cfg.Job.EvalEvery)
	}
	return nil
}

// Replay is a real run recorded by shoal train --record-pushes in Dir,
// and the schedule rebuilt from it.
type Replay struct {
	Dir      string
	Recorded []emulate.Recording
	Schedule []sim.Op
}

// NewReplay rebuilds the schedule of the recordings read from dir; the
// emulation's batch and seed must be the run's.
func NewReplay(dir string, recs []emulate.Recording, batch int, seed uint64) (*Replay, error) {
	schedule, err := emulate.Replay(recs)
	if err != nil {
		return nil, fmt.Errorf("--replay %s: %w", dir, err)
	}
	r := recs[0]
	if r.Batch != batch || r.Seed != seed {
		return nil, fmt.Errorf("--replay %s: the run had --batch %d and --seed %d, this emulation --batch %d and --seed %d: give the run's", dir, r.Batch, r.Seed, batch, seed)
	}
	return &Replay{Dir: dir, Recorded: recs, Schedule: schedule}, nil
}

// Emulate emulates cfg's jobs and prints how each went: a line, or with
// JSON an object; with Out it writes results.json and one plot of
// accuracy against epochs per worker count there.
func Emulate(ctx context.Context, cfg EmulateConfig, stdout io.Writer) error {
	model, err := cfg.Job.Model()
	if err != nil {
		return err
	}
	if cfg.Replay != nil {
		return cfg.replay(ctx, model, stdout)
	}
	c, err := cfg.Net.stepSeconds(ctx, func() (nn.Model, error) { return model, nil }, cfg.Job.Batch)
	if err != nil {
		return err
	}
	j, n := cfg.Job, cfg.Net
	if !cfg.JSON {
		fmt.Fprintf(stdout, "shoal bench emulate: %s, batch %d per worker, %d epochs of %s, %s lr %g (%s decay); schedules simulated with compute %.2f ms a step (jitter %g), %d server(s), NICs of %g Gbit/s\n",
			cfg.ModelName, j.Batch, j.Epochs, j.Train.Name(), j.Optimizer.Algorithm, j.Optimizer.LR, j.Decay, c*1e3, n.Jitter, cfg.Servers, n.NICGbps)
		if len(cfg.LocalSteps) > 0 {
			delay := ""
			if j.Outer.Algorithm == optim.DelayedNesterov {
				delay = fmt.Sprintf(" delay %d (0: the workers)", j.Outer.Delay)
			}
			fmt.Fprintf(stdout, "with local steps H: the workers' inner optimizer is the above, the shard's outer %s lr %g momentum %g%s\n", j.Outer.Algorithm, j.Outer.LR, j.Outer.Momentum, delay)
		}
	}
	base := sim.Config{Servers: cfg.Servers, Layers: model.Layout().Bytes(), Forward: c / 3, Backward: 2 * c / 3,
		Jitter: n.Jitter, Seed: n.Seed, NICGbps: n.NICGbps, Latency: n.Latency.Seconds()}
	runs, err := cfg.sweep(ctx, base, stdout)
	if err != nil || cfg.Out == "" {
		return err
	}
	return writeEmulation(cfg.Out, runs, stdout, cfg.JSON)
}

// sweep emulates base at every worker count, mode and bound.
func (cfg EmulateConfig) sweep(ctx context.Context, base sim.Config, stdout io.Writer) ([]EmulateRun, error) {
	var runs []EmulateRun
	for _, n := range cfg.Workers {
		for _, m := range cfg.Modes {
			for _, s := range cfg.boundsOf(m) {
				for _, u := range cfg.rulesOf(m, s) {
					for _, h := range cfg.localStepsOf(m) {
						sc := base
						sc.Mode, sc.Workers, sc.Staleness = m, n, s
						j := cfg.Job
						j.Update.Rule, j.LocalSteps = u, h
						run, err := cfg.emulate(ctx, j, sc, stdout)
						if err != nil {
							return nil, err
						}
						runs = append(runs, run)
					}
				}
			}
		}
	}
	return runs, nil
}

// replay emulates the recorded run along its schedule.
func (cfg EmulateConfig) replay(ctx context.Context, model nn.Model, stdout io.Writer) error {
	p, j := cfg.Replay, cfg.Job
	r := p.Recorded[0]
	if n := model.Layout().Size(); n != r.Floats {
		return fmt.Errorf("--replay %s: the run's model had %d floats, this one (%s) %d: give the run's model flags", p.Dir, r.Floats, cfg.ModelName, n)
	}
	if !cfg.JSON {
		fmt.Fprintf(stdout, "shoal bench emulate: replaying %s: %s, %d workers, batch %d, %d epochs of %s, %s lr %g (%s decay), in the order shard 0 of its %d server(s) applied the pushes\n",
			p.Dir, r.Mode, r.WorldSize, j.Batch, j.Epochs, j.Train.Name(), j.Optimizer.Algorithm, j.Optimizer.LR, j.Decay, r.Servers)
	}
	j.Schedule = p.Schedule
	run, err := cfg.emulate(ctx, j, sim.Config{Mode: r.Mode, Workers: r.WorldSize, Staleness: r.Staleness, Servers: 1}, stdout)
	if err != nil || cfg.Out == "" {
		return err
	}
	return writeEmulation(cfg.Out, []EmulateRun{run}, stdout, cfg.JSON)
}

// boundsOf is the staleness bounds to emulate mode m at: Bounds for
// ssp, else none (0).
func (cfg EmulateConfig) boundsOf(m consistency.Mode) []int64 {
	if m != consistency.SSP {
		return []int64{0}
	}
	var bs []int64
	for _, s := range cfg.Bounds {
		bs = append(bs, int64(s))
	}
	return bs
}

// localStepsOf is the local steps to emulate mode m with: none (0), then
// LocalSteps in sync and async.
func (cfg EmulateConfig) localStepsOf(m consistency.Mode) []int {
	if m != consistency.Sync && m != consistency.Async {
		return []int{0}
	}
	return append([]int{0}, cfg.LocalSteps...)
}

// rulesOf is the update rules to emulate mode m at bound s with: Rules
// (or Job.Update's) in async and SSP, the barrier's alone in sync.
func (cfg EmulateConfig) rulesOf(m consistency.Mode, s int64) []ps.Update {
	if m.Synchronous(s) {
		return []ps.Update{ps.UpdateAuto}
	}
	if len(cfg.Rules) == 0 {
		return []ps.Update{cfg.Job.Update.Rule}
	}
	return cfg.Rules
}

// ruleLabel names the rule j's shard applies pushes with in the mode and
// bound of sc ("" where it has none: sync).
func ruleLabel(j Job, sc sim.Config) string {
	if sc.Mode.Synchronous(sc.Staleness) {
		return ""
	}
	alg := j.Optimizer.Algorithm
	if j.LocalSteps > 0 {
		alg = j.Outer.Algorithm
	}
	return j.Update.ResolveFor(sc.Mode, alg).Rule.String()
}

// emulate runs j as the job that sc simulates and prints how it went: a
// line (two when it diverged), or with JSON an object.
func (cfg EmulateConfig) emulate(ctx context.Context, j Job, sc sim.Config, stdout io.Writer) (EmulateRun, error) {
	m, n, s := sc.Mode, sc.Workers, sc.Staleness
	rule := ruleLabel(j, sc)
	start := time.Now()
	res, err := j.Run(ctx, sc)
	if err != nil {
		return EmulateRun{}, fmt.Errorf("%s, %d workers: %w", strings.Join(strings.Fields(m.String()+" "+boundLabel(m, s)+" "+localLabel(j.LocalSteps)+" "+rule), " "), n, err)
	}
	run := EmulateRun{Mode: m.String(), Workers: n, Staleness: s, Update: rule, LocalSteps: j.LocalSteps, Model: cfg.ModelName, Batch: j.Batch, Epochs: j.Epochs,
		Accuracy: res.Final.Accuracy, Loss: Finite(res.Final.Loss), Updates: res.Updates, Pushes: res.Staleness, Curve: res.Curve,
		Seconds: time.Since(start).Seconds(), StepSeconds: res.Simulated.StepSeconds, Diverged: res.Diverged}
	if cfg.JSON {
		return run, json.NewEncoder(stdout).Encode(run)
	}
	// SSP's bound and DiLoCo's H share a column: SSP takes no local steps.
	fmt.Fprintf(stdout, "%-6s %-5s %-9s N=%-4d test accuracy %6.2f%%  loss %.4f  %6d updates  staleness mean %5.2f max %3d  (%.1fs)\n",
		m, boundLabel(m, s)+localLabel(j.LocalSteps), rule, n, 100*res.Final.Accuracy, res.Final.Loss, res.Updates, res.Staleness.Mean(), max(res.Staleness.Worst(), 0), run.Seconds)
	if res.Diverged != "" {
		fmt.Fprintf(stdout, "       diverged after %d updates: %s\n", res.Updates, res.Diverged)
	}
	return run, nil
}

// Finite is &x, or nil when x is NaN or infinite (JSON has no such
// numbers).
func Finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// localLabel names DiLoCo's H ("" without local steps).
func localLabel(h int) string {
	if h == 0 {
		return ""
	}
	return "H=" + strconv.Itoa(h)
}

func boundLabel(m consistency.Mode, s int64) string {
	if m != consistency.SSP {
		return ""
	}
	return "s=" + strconv.FormatInt(s, 10)
}

// writeEmulation writes results.json and, per worker count, a plot of
// accuracy against epochs into dir.
func writeEmulation(dir string, runs []EmulateRun, stdout io.Writer, quiet bool) error {
	b, err := json.MarshalIndent(map[string]any{"simulated": true, "emulated": runs}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	byN, order := accuracyCurves(runs)
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

// accuracyCurves is each run's accuracy against epochs, by worker count,
// and the worker counts in the order of runs.
func accuracyCurves(runs []EmulateRun) (map[int][]bench.Curve, []int) {
	byN := map[int][]bench.Curve{}
	var order []int
	for _, r := range runs {
		if _, ok := byN[r.Workers]; !ok {
			order = append(order, r.Workers)
		}
		c := bench.Curve{Mode: r.Mode, Label: r.Mode}
		// A mode's lines (SSP's bounds, the rules) differ in their dashes.
		for _, o := range byN[r.Workers] {
			if o.Mode == r.Mode {
				c.Dash = (c.Dash + 1) % 4
			}
		}
		var notes []string
		if r.Mode == consistency.SSP.String() {
			notes = append(notes, fmt.Sprintf("s = %d", r.Staleness))
		}
		if r.LocalSteps > 0 {
			notes = append(notes, fmt.Sprintf("H = %d", r.LocalSteps))
		}
		if r.Update != "" && (r.Mode != consistency.SSP.String() || r.Update != ps.UpdateAverage.String()) {
			notes = append(notes, r.Update)
		}
		if len(notes) > 0 {
			c.Label += " (" + strings.Join(notes, ", ") + ")"
		}
		if r.Diverged != "" {
			c.Label += fmt.Sprintf(", diverged after %d updates", r.Updates)
		}
		for _, p := range r.Curve {
			c.X, c.Y = append(c.X, p.Epochs), append(c.Y, 100*p.Accuracy)
		}
		byN[r.Workers] = append(byN[r.Workers], c)
	}
	return byN, order
}
