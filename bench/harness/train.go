package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/internal/netshape"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/record"
)

// TrainConfig is one shoal bench train: the plan's runs, each a shoal
// train of Exe (and the PyTorch peers'), measured.
type TrainConfig struct {
	Plan bench.Plan
	// Out is the folder for results.json, report.md and the plots.
	Out string
	// Target is the test accuracy whose time and steps to reach are
	// reported; with Until each run ends once worker 0 measures it.
	Target float64
	Until  bool
	// EvalEvery is the steps between worker 0's evaluations.
	EvalEvery int64
	// Peers is the folder of the peer scripts ("": no peers), Python the
	// Python with torch that runs them.
	Peers, Python string
	// RunTimeout is the longest one run may take.
	RunTimeout time.Duration
	// NIC is the NIC model the runs not on loopback go through, NICArgs
	// the shoal train flags that give it.
	NIC     netshape.Config
	NICArgs []string
	// UpdateArgs are the shoal train flags of the shards' update rule
	// (--update-rule and the DC flags), given to every PS run.
	UpdateArgs []string
	// Dataset and Data are the dataset and its folder, as shoal train
	// takes them.
	Dataset, Data string
	// Exe is this binary, which runs shoal train.
	Exe string
	// Command and Revision are the results' command line and revision.
	Command  []string
	Revision string
}

// Validate says what is wrong with cfg, in the flags' words.
func (cfg TrainConfig) Validate() error {
	if cfg.Target < 0 || cfg.Target > 1 {
		return fmt.Errorf("--target-accuracy %g: want 0 to 1", cfg.Target)
	}
	if cfg.EvalEvery < 1 {
		return fmt.Errorf("--eval-every %d: want >= 1", cfg.EvalEvery)
	}
	return nil
}

// shaped says whether the runs go through a NIC model.
func (cfg TrainConfig) shaped() bool { return cfg.NIC.Gbps > 0 || cfg.NIC.RTT > 0 }

// Train runs cfg's plan, one run at a time, prints a line per run, and
// writes results.json, report.md and the plots into cfg.Out. Through a
// NIC model, it first checks the model delivers its rate.
func Train(ctx context.Context, cfg TrainConfig, stdout, stderr io.Writer) error {
	res := newResults(cfg.Command, cfg.Revision, false)
	if cfg.shaped() {
		// The NIC model must deliver its rate before anything is measured
		// through it.
		chk, err := checkShaper(ctx, cfg.NIC, stdout)
		if err != nil {
			return err
		}
		res.Shaper = &bench.ShaperCheck{ConfiguredGbps: chk.ConfiguredGbps, MeasuredGbps: chk.MeasuredGbps, Bytes: chk.Bytes, Ratio: chk.Ratio}
	}
	runs := cfg.runs(ctx, stdout, stderr)
	for i, run := range runs {
		rec := run()
		res.Runs = append(res.Runs, rec)
		fmt.Fprintf(stdout, "[%d/%d] %s\n", i+1, len(runs), describeRecord(&rec))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	bench.ScalingEfficiency(res.Runs)
	return WriteOutputs(cfg.Out, res, stdout)
}

// runs is the plan's runs, then the peers' when they can run.
func (cfg TrainConfig) runs(ctx context.Context, stdout, stderr io.Writer) []func() bench.Record {
	peerScript := ""
	if cfg.Peers != "" && len(cfg.Plan.Peers) > 0 {
		peerScript = filepath.Join(cfg.Peers, "torch_ddp.py")
		if why := peerUnavailable(ctx, cfg.Python, peerScript); why != "" {
			fmt.Fprintf(stdout, "peers skipped: %s\n", why)
			peerScript = ""
		}
	}
	var runs []func() bench.Record
	for _, r := range cfg.Plan.Runs {
		runs = append(runs, func() bench.Record { return cfg.runShoal(ctx, r, stderr) })
	}
	if peerScript != "" {
		for _, r := range cfg.Plan.Peers {
			runs = append(runs, func() bench.Record { return cfg.runPeer(ctx, peerScript, r, stderr) })
		}
	}
	return runs
}

// checkShaper measures one stream through the NIC model, up to three
// times (a moment's load on a shared machine can starve one try), and
// returns the first measurement within 10% of the configured rate, or an
// error with every try.
func checkShaper(ctx context.Context, nic netshape.Config, stdout io.Writer) (netshape.Check, error) {
	n := int64(min(max(nic.Gbps*1e9/8, 32<<20), 256<<20)) // about a second's worth
	var tries []string
	for range 3 {
		chk, err := netshape.SelfCheck(ctx, nic, n)
		if err != nil {
			return chk, fmt.Errorf("checking the NIC model: %w", err)
		}
		fmt.Fprintf(stdout, "NIC model: %g Gbit/s configured, one stream measured %.3f Gbit/s (%.3f×)\n", nic.Gbps, chk.MeasuredGbps, chk.Ratio)
		if chk.Ratio >= 0.9 && chk.Ratio <= 1.1 {
			return chk, nil
		}
		tries = append(tries, fmt.Sprintf("%.3f Gbit/s (%.2f×)", chk.MeasuredGbps, chk.Ratio))
	}
	return netshape.Check{}, fmt.Errorf("the NIC model is off: one stream through a %g Gbit/s NIC measured %s, want 0.9 to 1.1×; the machine may be too loaded to shape at that rate",
		nic.Gbps, strings.Join(tries, ", "))
}

// trainArgs is the shoal train command line of r, through the NIC model
// of nicArgs (none: loopback).
func (cfg TrainConfig) trainArgs(r bench.Run, nicArgs []string) []string {
	args := []string{"train", "--mode", r.Mode, "--workers", strconv.Itoa(r.Workers)}
	if r.Mode == "async-overlap" {
		args = []string{"train", "--mode", consistency.Async.String(), "--overlap-push-pull", "--workers", strconv.Itoa(r.Workers)}
	}
	if r.Mode != consistency.Ring.String() {
		args = append(args, "--servers", strconv.Itoa(r.Servers))
		args = append(args, cfg.UpdateArgs...)
	}
	args = append(args, bench.Models[r.Model].Args...)
	if r.LocalSteps > 0 {
		args = append(args, "--local-steps", strconv.Itoa(r.LocalSteps))
	}
	if r.Epochs > 0 {
		args = append(args, "--epochs", strconv.Itoa(r.Epochs))
	} else {
		args = append(args, "--steps", strconv.FormatInt(r.Steps, 10))
	}
	evalEvery := cfg.EvalEvery
	if bench.Models[r.Model].Big {
		evalEvery = 0
		args = append(args, "--test=false")
	}
	// A constant learning rate (shoal train decays it by default), as the
	// peer uses: the same optimizer for every system.
	args = append(args, "--lr-decay", "none", "--seed", "1", "--data", cfg.Data, "--dataset", cfg.Dataset, "--stats",
		"--eval-every", strconv.FormatInt(evalEvery, 10), "--json")
	return append(args, nicArgs...)
}

// runShoal runs one shoal train and turns its summary into a record.
func (cfg TrainConfig) runShoal(ctx context.Context, r bench.Run, stderr io.Writer) bench.Record {
	nic, nicArgs, target := cfg.NIC, cfg.NICArgs, cfg.Target
	if r.Loopback || !cfg.shaped() {
		nic, nicArgs = netshape.Config{}, nil
	}
	args := cfg.trainArgs(r, nicArgs)
	if cfg.Until && target > 0 && !bench.Models[r.Model].Big {
		args = append(args, "--stop-at-accuracy", strconv.FormatFloat(target, 'g', -1, 64))
	}
	rec := bench.Record{ID: r.ID("", nic.Gbps), Command: append([]string{"shoal"}, args...), Mode: r.Mode, Model: bench.Models[r.Model].Label, LocalSteps: r.LocalSteps,
		Workers: r.Workers, Servers: r.Servers, Seed: 1, NICGbps: nic.Gbps, RTTMillis: float64(nic.RTT) / float64(time.Millisecond), Run: record.Run{TestAccuracy: -1}}
	if target > 0 {
		rec.TargetAccuracy = target
	}
	var sum launch.Result
	if !cfg.runInto(ctx, &rec, "shoal train's summary", cfg.Exe, args, &sum, stderr) {
		return rec
	}
	rec.Fill(&sum)
	if rec.Batch > 0 {
		rec.BytesSentPerSample = rec.BytesSentPerStep / float64(rec.Batch)
	}
	if bench.Models[r.Model].Big {
		rec.TargetAccuracy = 0
	}
	bench.ToTarget(&rec)
	if nic.Gbps > 0 {
		rec.Comm = bench.CommModel(&rec, nic.Gbps)
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
func (cfg TrainConfig) runPeer(ctx context.Context, script string, r bench.Run, stderr io.Writer) bench.Record {
	target := strconv.FormatFloat(cfg.Target, 'g', -1, 64)
	args := []string{script, "--workers", strconv.Itoa(r.Workers), "--model", "mlp", "--hidden", "256,128", "--batch", "64",
		"--lr", "0.01", "--momentum", "0.9", "--seed", "1", "--data", cfg.Data, "--eval-every", strconv.FormatInt(cfg.EvalEvery, 10),
		"--target-accuracy", target, "--json"}
	if r.Epochs > 0 {
		args = append(args, "--epochs", strconv.Itoa(r.Epochs))
	} else {
		args = append(args, "--steps", strconv.FormatInt(r.Steps, 10))
	}
	if cfg.Until && cfg.Target > 0 {
		args = append(args, "--stop-at-accuracy", target)
	}
	rec := bench.Record{ID: r.ID("pytorch-ddp-gloo", 0), Peer: "pytorch-ddp-gloo", Command: append([]string{cfg.Python}, args...),
		Mode: "ddp", Model: bench.Models[r.Model].Label, Workers: r.Workers, Seed: 1, Run: record.Run{TestAccuracy: -1}}
	var got bench.Record
	if !cfg.runInto(ctx, &rec, "the peer's record", cfg.Python, args, &got, stderr) {
		return rec
	}
	got.ID, got.Command = rec.ID, rec.Command
	return got
}

// runInto runs exe with args to its end (within RunTimeout) and decodes
// the last JSON line it printed, what, into v. A failure becomes rec's
// Error, and runInto returns false.
func (cfg TrainConfig) runInto(ctx context.Context, rec *bench.Record, what, exe string, args []string, v any, stderr io.Writer) bool {
	line, err := launch.RunJSON(ctx, cfg.RunTimeout, exe, args, nil, stderr)
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
