package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/emulate"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/sim"
)

// SimJob is the network and compute of a simulated job, which shoal
// bench plan and shoal bench emulate both take.
type SimJob struct {
	// NICGbps is every process's NIC, Gbit/s per direction; Latency the
	// one-way network latency.
	NICGbps float64
	Latency time.Duration
	// Compute is the forward+backward time of one step; 0: measure it
	// here, one thread.
	Compute time.Duration
	// Jitter is the standard deviation of each step's compute time,
	// relative (log-normal).
	Jitter float64
	// Seed seeds the weights, the data order and the simulated jitter.
	Seed uint64
}

// DefaultSimJob is shoal bench plan's and emulate's defaults.
func DefaultSimJob() SimJob {
	return SimJob{NICGbps: 25, Latency: 25 * time.Microsecond, Jitter: 0.1, Seed: 1}
}

// Validate says what is wrong with j, in the flags' words.
func (j SimJob) Validate() error {
	if j.NICGbps <= 0 || j.Latency < 0 || j.Compute < 0 || j.Jitter < 0 {
		return fmt.Errorf("--nic-gbps %g, --latency %v, --compute %v, --jitter %g: want a positive NIC rate, the rest >= 0", j.NICGbps, j.Latency, j.Compute, j.Jitter)
	}
	return nil
}

// stepSeconds is Compute, or else one step's forward and backward of the
// model that build returns, at batch, measured here: shoal bench
// compute's loop, 5 steps of warm-up and 30 timed where a step is short,
// fewer where that would take more than about a second (at least 3
// timed after 1 of warm-up; a probe's 2 steps, which choose the count,
// are the first of the warm-up), so that a large model's plan is not spent
// measuring it (the 25.4M-parameter MLP takes about 0.3 s a step here).
func (j SimJob) stepSeconds(ctx context.Context, build func() (nn.Model, error), batch int) (float64, error) {
	if j.Compute > 0 {
		return j.Compute.Seconds(), nil
	}
	model, err := build()
	if err != nil {
		return 0, err
	}
	probe, err := StepSeconds(ctx, model, batch, 1, 1, j.Seed)
	if err != nil {
		return 0, err
	}
	steps, warmup := measureSteps(probe)
	// The probe's two steps count as warm-up.
	return StepSeconds(ctx, model, batch, max(0, warmup-2), steps, j.Seed)
}

// measureSteps is how many steps to time, and to warm up with first,
// for a step that took probe seconds once: 30 and 5, or as many as take
// about a second (at least 3, after 1).
func measureSteps(probe float64) (steps, warmup int) {
	steps = 30
	if probe > 0 {
		steps = int(min(30, max(3, 1/probe)))
	}
	return steps, min(5, max(1, steps/6))
}

// Job is what every emulated job of one command shares: the model, its
// optimizer and data.
type Job struct {
	// Model returns a new replica of the model.
	Model func() (nn.Model, error)
	Seed  uint64
	Batch int
	// Epochs of each job; EvalEvery the updates between evaluations (0:
	// about 20 over the job).
	Epochs    int
	EvalEvery int64
	Optimizer optim.Config
	// LocalSteps, when > 0 (sync, async), is DiLoCo: Optimizer becomes
	// each worker's inner optimizer (its decay over the worker's steps)
	// and Outer the shard's.
	LocalSteps int
	Outer      optim.Config
	// Update is the shard's update rule in async and SSP.
	Update ps.UpdateConfig
	// WholeJob: the decay spans the job, as in shoal train (its length
	// is known per job); Warmup is the optimizer's warm-up updates.
	WholeJob    bool
	Warmup      int64
	Decay       string // the decay's name, as printed
	Train, Test data.Dataset
	// Schedule, when not nil, is followed instead of simulating one.
	Schedule []sim.Op
}

// Run emulates the job that sc simulates (its mode, workers, bound).
func (j Job) Run(ctx context.Context, sc sim.Config) (emulate.Result, error) {
	opt := j.Optimizer
	n := sc.Workers
	perRank := (j.Train.Len() + n - 1) / n
	steps := int64((perRank + j.Batch - 1) / j.Batch)
	perEpoch := emulate.UpdatesPerEpoch(sc.Mode, sc.Staleness, n, steps)
	if j.LocalSteps > 0 {
		// The inner optimizer decays over the worker's own steps, as
		// shoal train's workers' do.
		perEpoch = steps
	}
	if j.WholeJob {
		opt.Schedule.DecaySteps = max(perEpoch*int64(j.Epochs)-j.Warmup, 1)
	}
	cfg := emulate.Config{Sim: sc, Model: j.Model, Seed: j.Seed, Batch: j.Batch, Epochs: j.Epochs, Optimizer: opt, Update: j.Update,
		Train: j.Train, Test: j.Test, EvalEvery: j.EvalEvery, Schedule: j.Schedule}
	if j.LocalSteps > 0 {
		cfg.LocalSteps, cfg.Inner, cfg.Optimizer = j.LocalSteps, opt, j.Outer
	}
	return emulate.Run(ctx, cfg)
}

// ParseModes reads --modes: mode names, comma-separated.
func ParseModes(list string) ([]consistency.Mode, error) {
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

// ParseRules reads --update-rules: update rule names, comma-separated.
func ParseRules(list string) ([]ps.Update, error) {
	var us []ps.Update
	for _, s := range strings.Split(list, ",") {
		u, err := ps.ParseUpdate(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("--update-rules: %w", err)
		}
		us = append(us, u)
	}
	return us, nil
}

// PositiveInts parses a flag's comma-separated counts.
func PositiveInts(flag, s string) ([]int, error) {
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

// ServerCounts parses --servers, or gives 1 and then ×4 up to the
// workers, and the workers' count (as many servers as workers, their
// NICs' bandwidth the workers').
func ServerCounts(s string, workers int) ([]int, error) {
	if s == "" {
		out := []int{1}
		for n := 4; n <= workers; n *= 4 {
			out = append(out, n)
		}
		if out[len(out)-1] < workers {
			out = append(out, workers)
		}
		return out, nil
	}
	return PositiveInts("--servers", s)
}

// ColocatedCounts parses --colocated-servers: the server counts of the
// colocated layout (the servers on the workers' hosts), each at most
// the workers; "" gives one a worker (BytePS's layout), "none" none.
func ColocatedCounts(s string, workers int) ([]int, error) {
	switch s {
	case "":
		return []int{workers}, nil
	case "none":
		return nil, nil
	}
	out, err := PositiveInts("--colocated-servers", s)
	if err != nil {
		return nil, err
	}
	for _, n := range out {
		if n > workers {
			return nil, fmt.Errorf("--colocated-servers %q: %d servers on %d workers' hosts, want at most one a worker", s, n, workers)
		}
	}
	return out, nil
}

// ReadLayers reads a model's tensor sizes in bytes from file (--layers:
// floats one a line), and names the model after the file.
func ReadLayers(file string) ([]int64, string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, "", fmt.Errorf("--layers: %w", err)
	}
	defer f.Close()
	layers, err := sim.ReadLayers(f)
	if err != nil {
		return nil, "", fmt.Errorf("--layers %s: %w", file, err)
	}
	return layers, strings.TrimSuffix(filepath.Base(file), ".txt"), nil
}

// ModelLayers is spec's model, its tensor sizes in bytes and their
// shares of backward (nn.TensorWork).
func ModelLayers(spec nn.Spec) (nn.Model, []int64, []float64, error) {
	model, err := nn.New(spec, nn.NewCPU())
	if err != nil {
		return nil, nil, nil, err
	}
	work, err := nn.TensorWork(spec)
	if err != nil {
		return nil, nil, nil, err
	}
	return model, model.Layout().Bytes(), work, nil
}
