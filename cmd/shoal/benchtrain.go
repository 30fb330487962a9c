package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/internal/netshape"
	"github.com/shoalml/shoal/nn"
)

// benchModel is a model of the harness: its label in records and the
// shoal train flags that build it.
type benchModel struct {
	label string
	args  []string
	// big: no test-set evaluations (10,000 samples through 25M
	// parameters take longer than the run); the model is there for its
	// traffic.
	big bool
}

// The harness's models: the two of Fashion-MNIST, and an MLP of 25.4M
// parameters (784-16384-768-10, a 101.8 MB vector) where communication
// dominates; --quick uses one of 6.4M (784-4096-768-10).
var benchModels = map[string]benchModel{
	"mlp":     {"mlp", []string{"--model", "mlp", "--hidden", "256,128"}, false},
	"cnn":     {"cnn", []string{"--model", "cnn"}, false},
	"big":     {"mlp-25m", []string{"--model", "mlp", "--hidden", "16384,768", "--batch", "16"}, true},
	"big-6m":  {"mlp-6m", []string{"--model", "mlp", "--hidden", "4096,768", "--batch", "16"}, true},
	"mlp-25m": {"mlp-25m", []string{"--model", "mlp", "--hidden", "16384,768", "--batch", "16"}, true},
	"mlp-6m":  {"mlp-6m", []string{"--model", "mlp", "--hidden", "4096,768", "--batch", "16"}, true},
}

// benchRun is one run of the matrix.
type benchRun struct {
	model   string // key of benchModels
	mode    string
	workers int
	servers int // 0 for ring
	steps   int64
	epochs  int
	// loopback runs without the NIC model, as the peers do (gloo's
	// connections are not shaped).
	loopback bool
}

// benchPlan is the matrix a harness run goes through.
type benchPlan struct {
	runs  []benchRun
	peers []benchRun // PyTorch DDP runs (mode "ddp")
}

// defaultPlan is what `make bench` runs (about ten minutes on 2 cores at
// 1 Gbit/s): convergence of the four modes on the MLP, throughput against
// workers for the MLP and the CNN, and the communication-bound 25M model
// at N = 2 and 4 with S = 1, 2, 4 servers, also with async's push and
// pull overlapped. quick is a smaller one, under a minute.
// dropLoopbackTwins drops the loopback runs that repeat a run of the
// plan: without a NIC model (--nic-gbps 0) every run is on loopback, and a
// loopback twin would be the same run under the same id.
func dropLoopbackTwins(runs []benchRun) []benchRun {
	var out []benchRun
	for _, r := range runs {
		twin := false
		for _, o := range runs {
			if r.loopback && !o.loopback {
				o.loopback = true
				twin = twin || o == r
			}
		}
		if !twin {
			out = append(out, r)
		}
	}
	return out
}

func defaultPlan(quick bool) benchPlan {
	var p benchPlan
	modes := []string{"async", "sync", "ssp", "ring"}
	add := func(r benchRun) {
		if r.mode == "ring" {
			r.servers = 0
		}
		p.runs = append(p.runs, r)
	}
	if quick {
		for _, mode := range modes {
			for _, w := range []int{1, 2} {
				add(benchRun{model: "mlp", mode: mode, workers: w, servers: 1, steps: 100})
			}
		}
		add(benchRun{model: "mlp", mode: "ring", workers: 2, steps: 100, loopback: true})
		for _, mode := range modes {
			add(benchRun{model: "big-6m", mode: mode, workers: 2, servers: 1, steps: 3})
		}
		add(benchRun{model: "big-6m", mode: "sync", workers: 2, servers: 2, steps: 3})
		add(benchRun{model: "big-6m", mode: "async-overlap", workers: 2, servers: 2, steps: 3})
		p.peers = []benchRun{{model: "mlp", mode: "ddp", workers: 2, steps: 100}}
		return p
	}
	for _, mode := range modes {
		add(benchRun{model: "mlp", mode: mode, workers: 2, servers: 1, epochs: 2})
		for _, w := range []int{1, 4} {
			add(benchRun{model: "mlp", mode: mode, workers: w, servers: 1, steps: 300})
		}
	}
	// The peer's conditions: loopback, no NIC model.
	add(benchRun{model: "mlp", mode: "ring", workers: 2, epochs: 2, loopback: true})
	add(benchRun{model: "mlp", mode: "async", workers: 2, servers: 1, epochs: 2, loopback: true})
	for _, mode := range modes {
		for _, w := range []int{1, 2} {
			add(benchRun{model: "cnn", mode: mode, workers: w, servers: 1, steps: 100})
		}
	}
	for _, w := range []int{2, 4} {
		add(benchRun{model: "big", mode: "ring", workers: w, steps: 4})
		for _, mode := range []string{"sync", "async", "ssp", "async-overlap"} {
			for _, s := range []int{1, 2, 4} {
				if s <= w {
					add(benchRun{model: "big", mode: mode, workers: w, servers: s, steps: 4})
				}
			}
		}
	}
	p.peers = []benchRun{
		{model: "mlp", mode: "ddp", workers: 2, epochs: 2},
		{model: "mlp", mode: "ddp", workers: 1, steps: 300},
		{model: "mlp", mode: "ddp", workers: 4, steps: 300},
	}
	return p
}

// gridPlan is every combination of the flags' lists; ring ignores the
// server counts.
func gridPlan(models, modes []string, workers, servers []int, steps int64, epochs int) benchPlan {
	var p benchPlan
	for _, m := range models {
		for _, mode := range modes {
			for _, w := range workers {
				if mode == "ring" {
					p.runs = append(p.runs, benchRun{model: m, mode: mode, workers: w, steps: steps, epochs: epochs})
					continue
				}
				for _, s := range servers {
					p.runs = append(p.runs, benchRun{model: m, mode: mode, workers: w, servers: s, steps: steps, epochs: epochs})
				}
			}
		}
	}
	return p
}

func runBenchTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench train", "Runs shoal train over a matrix of modes × workers × servers × models with the same\ndata order, seed and optimizer, measures throughput, the step-time breakdown,\ntraffic, staleness and test accuracy over time, compares communication with the\nanalytic model, and writes results.json, report.md and PNG plots to --out.\nWithout --models/--modes/--workers/--servers it runs the built-in plan (make bench).", stderr)
	var (
		out      = fs.String("out", "bench-out", "folder for results.json, report.md and the plots")
		quick    = fs.Bool("quick", false, "a small plan that finishes in under a minute")
		models   = fs.String("models", "", "grid: models, comma-separated: mlp, cnn, big (25M parameters)")
		modes    = fs.String("modes", "", "grid: modes, comma-separated: async, async-overlap (async with --overlap-push-pull), sync, ssp, ring")
		workers  = fs.String("workers", "", "grid: worker counts, comma-separated")
		servers  = fs.String("servers", "", "grid: server counts for the PS modes, comma-separated")
		steps    = fs.Int64("steps", 200, "grid: steps per run (per worker)")
		epochs   = fs.Int("epochs", 0, "grid: epochs per run instead of --steps")
		target   = fs.Float64("target-accuracy", 0.85, "test accuracy whose time and steps to reach are reported")
		until    = fs.Bool("until-target", false, "end each run once worker 0 measures --target-accuracy (its steps or epochs become a cap)")
		evalStep = fs.Int64("eval-every", 100, "worker 0 evaluates on the test set every N steps")
		peers    = fs.String("peers", "bench/peers", "folder of the peer scripts (torch_ddp.py); empty: no peers")
		python   = fs.String("python", "/usr/bin/python3", "the Python with torch, for the peers")
		runLimit = fs.Duration("run-timeout", 10*time.Minute, "the longest one run may take")
		nf       nicFlags
		df       dataFlags
	)
	nf.register(fs)
	df.register(fs)
	fs.Lookup("nic-gbps").DefValue, nf.gbps = "1", 1
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := nf.validate(); err != nil {
		return err
	}
	if *target < 0 || *target > 1 {
		return fmt.Errorf("--target-accuracy %g: want 0 to 1", *target)
	}
	if *evalStep < 1 {
		return fmt.Errorf("--eval-every %d: want >= 1", *evalStep)
	}
	plan := defaultPlan(*quick)
	if *models != "" || *modes != "" || *workers != "" || *servers != "" {
		var err error
		if plan, err = parseGrid(*models, *modes, *workers, *servers, *steps, *epochs); err != nil {
			return err
		}
	}
	if !nf.shaped() {
		plan.runs = dropLoopbackTwins(plan.runs)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary to run shoal train: %w", err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("--out %s: %w", *out, err)
	}
	if _, _, err := df.load(1); err != nil {
		return err
	}

	res := &bench.Results{Schema: bench.SchemaVersion, Started: time.Now().UTC().Truncate(time.Second),
		Command: append([]string{"shoal", "bench", "train"}, args...), Revision: revision(), Machine: describeMachine()}
	if nf.shaped() {
		// The NIC model must deliver its rate before anything is measured
		// through it.
		chk, err := checkShaper(ctx, nf, stdout)
		if err != nil {
			return err
		}
		res.Shaper = &bench.ShaperCheck{ConfiguredGbps: chk.ConfiguredGbps, MeasuredGbps: chk.MeasuredGbps, Bytes: chk.Bytes, Ratio: chk.Ratio}
	}
	peerScript := ""
	if *peers != "" && len(plan.peers) > 0 {
		peerScript = filepath.Join(*peers, "torch_ddp.py")
		if why := peerUnavailable(ctx, *python, peerScript); why != "" {
			fmt.Fprintf(stdout, "peers skipped: %s\n", why)
			peerScript = ""
		}
	}
	total := len(plan.runs)
	if peerScript != "" {
		total += len(plan.peers)
	}
	i := 0
	for _, r := range plan.runs {
		i++
		nic := nf
		if r.loopback {
			nic = nicFlags{}
		}
		rec := runShoal(ctx, exe, r, nic, df, *target, *until, *evalStep, *runLimit, stderr)
		res.Runs = append(res.Runs, rec)
		fmt.Fprintf(stdout, "[%d/%d] %s\n", i, total, describeRecord(&rec))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if peerScript != "" {
		for _, r := range plan.peers {
			i++
			rec := runPeer(ctx, *python, peerScript, r, df, *target, *until, *evalStep, *runLimit, stderr)
			res.Runs = append(res.Runs, rec)
			fmt.Fprintf(stdout, "[%d/%d] %s\n", i, total, describeRecord(&rec))
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	scalingEfficiency(res.Runs)
	return writeBenchOutputs(*out, res, stdout)
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

// parseGrid reads the grid flags; empty lists take the defaults.
func parseGrid(models, modes, workers, servers string, steps int64, epochs int) (benchPlan, error) {
	list := func(s, def string) []string {
		if s == "" {
			s = def
		}
		return strings.Split(s, ",")
	}
	ints := func(flag, s, def string) ([]int, error) {
		var out []int
		for _, f := range list(s, def) {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("--%s %q: want positive integers separated by commas", flag, s)
			}
			out = append(out, n)
		}
		return out, nil
	}
	ms := list(models, "mlp")
	for _, m := range ms {
		if _, ok := benchModels[m]; !ok {
			return benchPlan{}, fmt.Errorf("--models: unknown model %q (want mlp, cnn or big)", m)
		}
	}
	mo := list(modes, "async,sync,ssp,ring")
	for _, m := range mo {
		if !slices.Contains([]string{"async", "async-overlap", "sync", "ssp", "ring"}, m) {
			return benchPlan{}, fmt.Errorf("--modes: unknown mode %q (want async, async-overlap, sync, ssp or ring)", m)
		}
	}
	ws, err := ints("workers", workers, "1,2,4")
	if err != nil {
		return benchPlan{}, err
	}
	ss, err := ints("servers", servers, "1")
	if err != nil {
		return benchPlan{}, err
	}
	if steps < 1 && epochs < 1 {
		return benchPlan{}, fmt.Errorf("--steps %d, --epochs %d: want one of them >= 1", steps, epochs)
	}
	if epochs > 0 {
		steps = 0
	}
	return gridPlan(ms, mo, ws, ss, steps, epochs), nil
}

// trainArgs is the shoal train command line of r.
func trainArgs(r benchRun, nf nicFlags, df dataFlags, evalEvery int64) []string {
	args := []string{"train", "--mode", r.mode, "--workers", strconv.Itoa(r.workers)}
	if r.mode == "async-overlap" {
		args = []string{"train", "--mode", "async", "--overlap-push-pull", "--workers", strconv.Itoa(r.workers)}
	}
	if r.mode != "ring" {
		args = append(args, "--servers", strconv.Itoa(r.servers))
	}
	args = append(args, benchModels[r.model].args...)
	if r.epochs > 0 {
		args = append(args, "--epochs", strconv.Itoa(r.epochs))
	} else {
		args = append(args, "--steps", strconv.FormatInt(r.steps, 10))
	}
	if benchModels[r.model].big {
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
func runShoal(ctx context.Context, exe string, r benchRun, nf nicFlags, df dataFlags, target float64, until bool, evalEvery int64, limit time.Duration, stderr io.Writer) bench.Record {
	args := trainArgs(r, nf, df, evalEvery)
	if until && target > 0 && !benchModels[r.model].big {
		args = append(args, "--stop-at-accuracy", fmtFloat(target))
	}
	rec := bench.Record{ID: recordID("", r, nf), Command: append([]string{"shoal"}, args...), Mode: r.mode, Model: benchModels[r.model].label,
		Workers: r.workers, Servers: r.servers, Seed: 1, NICGbps: nf.gbps, RTTMillis: float64(nf.rtt) / float64(time.Millisecond), TestAccuracy: -1}
	if target > 0 {
		rec.TargetAccuracy = target
	}
	line, err := runJSON(ctx, limit, exe, args, nil, stderr)
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	var sum trainSummary
	if err := json.Unmarshal(line, &sum); err != nil {
		rec.Error = fmt.Sprintf("reading shoal train's summary: %v", err)
		return rec
	}
	rec.Parameters, rec.VectorBytes = sum.Parameters, 4*int64(sum.Parameters)
	rec.Batch, rec.Optimizer, rec.LR = sum.Batch, sum.Optimizer, sum.LR
	rec.Steps, rec.Samples = sum.Steps, sum.Samples
	rec.TrainSeconds = sum.WorkerSeconds
	if rec.TrainSeconds > 0 {
		rec.SamplesPerSec = float64(sum.Samples) / rec.TrainSeconds
	}
	if sum.StepTime != nil {
		rec.StepTime = *sum.StepTime
	}
	rec.IdleFraction = sum.IdleFraction
	rec.BytesSentPerStep, rec.BytesReceivedPerStep = sum.BytesSentPerStep, sum.BytesReceivedPerStep
	if len(sum.Staleness) > 0 {
		rec.Staleness = map[string]int64{}
		for k, v := range sum.Staleness {
			rec.Staleness[strconv.FormatInt(k, 10)] = v
		}
	}
	rec.Curve = sum.Curve
	rec.TestAccuracy = sum.TestAccuracy
	if benchModels[r.model].big {
		rec.TargetAccuracy = 0
	}
	toTarget(&rec)
	if nf.gbps > 0 {
		rec.Comm = commModel(&rec, nf.gbps)
	}
	return rec
}

// commModel compares the measured communication time per step with the
// analytic one for a NIC of gbps: ring 2(N−1)/N·M/B; PS with S servers
// max(M/B, N·M/(S·B)) per direction, a pull and a push one after the
// other, or both at once with async-overlap. It returns nil when the
// model has no communication (one ring rank).
func commModel(rec *bench.Record, gbps float64) *bench.Comm {
	b := gbps * 1e9 / 8
	m := float64(rec.VectorBytes)
	n, s := float64(rec.Workers), float64(rec.Servers)
	var analytic, measured float64
	if rec.Mode == "ring" {
		analytic = 2 * (n - 1) / n * m / b
		measured = rec.StepTime.Reduce.Mean
	} else {
		analytic = 2 * max(m/b, n*m/(s*b))
		if rec.Mode == "async-overlap" {
			analytic /= 2 // the two directions at once
		}
		measured = rec.StepTime.Pull.Mean + rec.StepTime.Push.Mean
	}
	if analytic == 0 {
		return nil // one ring rank: nothing to send
	}
	return &bench.Comm{MeasuredSeconds: measured, AnalyticSeconds: analytic, Ratio: measured / analytic}
}

// toTarget fills the time and steps to the target accuracy from the
// curve.
func toTarget(rec *bench.Record) {
	if rec.TargetAccuracy <= 0 {
		return
	}
	for _, p := range rec.Curve {
		if p.Accuracy >= rec.TargetAccuracy {
			sec, step := p.Seconds, p.Step
			rec.SecondsToTarget, rec.StepsToTarget = &sec, &step
			return
		}
	}
}

// scalingEfficiency sets each record's samples/s against N times the
// 1-worker run of the same system, model, servers and network.
func scalingEfficiency(runs []bench.Record) {
	for i := range runs {
		r := &runs[i]
		if r.Error != "" || r.SamplesPerSec == 0 {
			continue
		}
		for _, base := range runs {
			if base.Workers == 1 && base.Error == "" && base.SamplesPerSec > 0 && base.Peer == r.Peer && base.Mode == r.Mode &&
				base.Model == r.Model && base.Servers == r.Servers && base.NICGbps == r.NICGbps {
				e := r.SamplesPerSec / (float64(r.Workers) * base.SamplesPerSec)
				r.ScalingEfficiency = &e
				break
			}
		}
	}
}

// recordID names a run across results files.
func recordID(peer string, r benchRun, nf nicFlags) string {
	id := fmt.Sprintf("%s/%s/w%d/s%d", benchModels[r.model].label, r.mode, r.workers, r.servers)
	if peer != "" {
		id = peer + "/" + id
	}
	if nf.gbps > 0 {
		id += "/nic" + fmtFloat(nf.gbps)
	}
	return id
}

// runJSON runs a command and returns the last line of its stdout that is
// a JSON object; on failure, the error carries the end of its stderr.
func runJSON(ctx context.Context, limit time.Duration, exe string, args, env []string, stderr io.Writer) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	tail := &tailBuffer{max: 2048}
	cmd.Stdout = &out
	cmd.Stderr = tail
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return nil, fmt.Errorf("%s did not finish within --run-timeout %v", filepath.Base(exe), limit)
	}
	if err != nil {
		msg := string(bytes.TrimSpace(tail.Bytes()))
		return nil, fmt.Errorf("%s %s: %v: %s", filepath.Base(exe), strings.Join(args[:min(len(args), 1)], " "), err, msg)
	}
	var last []byte
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		if l := bytes.TrimSpace(sc.Bytes()); len(l) > 0 && l[0] == '{' {
			last = slices.Clone(l)
		}
	}
	if last == nil {
		return nil, fmt.Errorf("%s printed no JSON summary", filepath.Base(exe))
	}
	return last, nil
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
func runPeer(ctx context.Context, python, script string, r benchRun, df dataFlags, target float64, until bool, evalEvery int64, limit time.Duration, stderr io.Writer) bench.Record {
	args := []string{script, "--workers", strconv.Itoa(r.workers), "--model", "mlp", "--hidden", "256,128", "--batch", "64",
		"--lr", "0.01", "--momentum", "0.9", "--seed", "1", "--data", df.dir, "--eval-every", strconv.FormatInt(evalEvery, 10),
		"--target-accuracy", fmtFloat(target), "--json"}
	if r.epochs > 0 {
		args = append(args, "--epochs", strconv.Itoa(r.epochs))
	} else {
		args = append(args, "--steps", strconv.FormatInt(r.steps, 10))
	}
	if until && target > 0 {
		args = append(args, "--stop-at-accuracy", fmtFloat(target))
	}
	rec := bench.Record{ID: recordID("pytorch-ddp-gloo", r, nicFlags{}), Peer: "pytorch-ddp-gloo", Command: append([]string{python}, args...),
		Mode: "ddp", Model: benchModels[r.model].label, Workers: r.workers, Seed: 1, TestAccuracy: -1}
	line, err := runJSON(ctx, limit, python, args, nil, stderr)
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	var got bench.Record
	if err := json.Unmarshal(line, &got); err != nil {
		rec.Error = fmt.Sprintf("reading the peer's record: %v", err)
		return rec
	}
	got.ID, got.Command = rec.ID, rec.Command
	return got
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

var errNoDiff = errors.New("shoal bench diff: want two results.json files")

func runBenchDiff(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench diff", "Compares two results.json files of shoal bench train run by run (matched by id):\nshoal bench diff BEFORE/results.json AFTER/results.json", stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() != 2 {
		fmt.Fprintln(stderr, errNoDiff)
		return errUsage
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
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "shoal bench report: want one results.json file")
		return errUsage
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
