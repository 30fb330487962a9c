package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
)

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: shoal %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and refuses positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parseOnly(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "shoal %s: unexpected argument %q (flags start with --)\n", fs.Name(), fs.Arg(0))
		return errUsage
	}
	return nil
}

// parseArgs parses fs's flags and wants exactly n arguments after them,
// named by what ("one address HOST:PORT"); otherwise it says so on fs's
// output and returns errUsage.
func parseArgs(fs *flag.FlagSet, args []string, n int, what string) error {
	if err := parseOnly(fs, args); err != nil {
		return err
	}
	if fs.NArg() != n {
		fmt.Fprintf(fs.Output(), "shoal %s: want %s after the flags, got %d argument(s)\n", fs.Name(), what, fs.NArg())
		return errUsage
	}
	return nil
}

// parseOnly parses fs's flags: -h is flag.ErrHelp, a bad flag errUsage
// (the flag package has printed why).
func parseOnly(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

// modelFlags choose the model.
type modelFlags struct {
	arch   string
	hidden string
	seed   uint64
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.arch, "model", "mlp", "model: mlp or cnn")
	fs.StringVar(&m.hidden, "hidden", "256,128", "MLP hidden layer widths, comma-separated")
	fs.Uint64Var(&m.seed, "seed", 1, "seed of the initial weights and of the data order")
}

func (m *modelFlags) spec() (nn.Spec, error) {
	spec := nn.Spec{Arch: m.arch}
	if m.arch == "mlp" {
		for _, f := range strings.Split(m.hidden, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return nn.Spec{}, fmt.Errorf("--hidden %q: want positive integers separated by commas, e.g. 512,512", m.hidden)
			}
			spec.Hidden = append(spec.Hidden, n)
		}
	}
	return spec, nil
}

// build returns the model on the gonum CPU backend (servers and the
// launcher, which only initialise and evaluate).
func (m *modelFlags) build() (nn.Model, error) {
	spec, err := m.spec()
	if err != nil {
		return nil, err
	}
	return nn.New(spec, nn.NewCPU())
}

// buildFast returns the model on the fastest CPU backend here (OpenBLAS
// when it loads, else gonum) with threads GEMM threads, and says which.
func (m *modelFlags) buildFast(threads int) (nn.Model, string, error) {
	spec, err := m.spec()
	if err != nil {
		return nil, "", err
	}
	be, why := nn.NewBestCPU(threads)
	model, err := nn.New(spec, be)
	return model, why, err
}

// describe names the model for people, e.g. "mlp 784-256-128-10".
func describeModel(model nn.Model) string {
	if model.Name() != "mlp" {
		return fmt.Sprintf("%s (%d parameters)", model.Name(), model.Layout().Size())
	}
	dims := []string{strconv.Itoa(model.InputSize())}
	for _, t := range model.Layout().Tensors {
		if strings.HasSuffix(t.Name, ".bias") {
			dims = append(dims, strconv.Itoa(t.Shape[0]))
		}
	}
	return "mlp " + strings.Join(dims, "-")
}

// optFlags choose the optimizer.
type optFlags struct {
	name        string
	lr          float64
	momentum    float64
	weightDecay float64
	decay       string
	warmup      int64
	decaySteps  int64
	gamma       float64
	minLR       float64
}

// register adds the flags; decay is the default of --lr-decay.
func (o *optFlags) register(fs *flag.FlagSet, decay string) {
	fs.StringVar(&o.name, "optimizer", "momentum", "optimizer: "+strings.Join(optim.Algorithms(), ", "))
	fs.Float64Var(&o.lr, "lr", 0.01, "learning rate")
	fs.Float64Var(&o.momentum, "momentum", 0.9, "momentum (momentum and nesterov optimizers)")
	fs.Float64Var(&o.weightDecay, "weight-decay", 0, "L2 weight decay")
	fs.StringVar(&o.decay, "lr-decay", decay, "learning-rate decay after warm-up: none, step, cosine or linear")
	fs.Int64Var(&o.warmup, "warmup-steps", 0, "updates over which the learning rate ramps up linearly")
	fs.Int64Var(&o.decaySteps, "decay-steps", 0, "updates of the decay: its period (step) or length (cosine, linear; shoal train: the whole run when 0)")
	fs.Float64Var(&o.gamma, "lr-gamma", 0.1, "step decay: factor applied every --decay-steps")
	fs.Float64Var(&o.minLR, "min-lr", 0, "the learning rate that cosine and linear decay end at")
}

func (o *optFlags) config() (optim.Config, error) {
	c := optim.DefaultConfig()
	c.Algorithm, c.LR, c.Momentum, c.WeightDecay = o.name, o.lr, o.momentum, o.weightDecay
	c.Schedule = optim.Schedule{WarmupSteps: o.warmup, Decay: o.decay, DecaySteps: o.decaySteps, Gamma: o.gamma, MinLR: o.minLR}
	if err := c.Validate(); err != nil {
		return optim.Config{}, fmt.Errorf("optimizer flags: %w", err)
	}
	return c, nil
}

// args renders the flags for a child process.
func (o *optFlags) args() []string {
	return []string{"--optimizer", o.name, "--lr", fmtFloat(o.lr), "--momentum", fmtFloat(o.momentum), "--weight-decay", fmtFloat(o.weightDecay),
		"--lr-decay", o.decay, "--warmup-steps", strconv.FormatInt(o.warmup, 10), "--decay-steps", strconv.FormatInt(o.decaySteps, 10),
		"--lr-gamma", fmtFloat(o.gamma), "--min-lr", fmtFloat(o.minLR)}
}

func (m *modelFlags) args() []string {
	return []string{"--model", m.arch, "--hidden", m.hidden, "--seed", strconv.FormatUint(m.seed, 10)}
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// dataFlags choose the dataset.
type dataFlags struct {
	dataset string
	dir     string
}

func (d *dataFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.dataset, "dataset", "fashion-mnist", "dataset: fashion-mnist or synthetic")
	fs.StringVar(&d.dir, "data", "/usr/share/datasets/fashion-mnist", "folder of the Fashion-MNIST idx files (plain or .gz)")
}

func (d *dataFlags) args() []string { return []string{"--dataset", d.dataset, "--data", d.dir} }

func (d *dataFlags) load(seed uint64) (train, test data.Dataset, err error) {
	switch d.dataset {
	case "fashion-mnist":
		return data.LoadFashionMNIST(d.dir)
	case "synthetic":
		cfg := data.DefaultSyntheticConfig()
		cfg.Seed = seed
		return data.Synthetic(cfg)
	}
	return nil, nil, fmt.Errorf("--dataset %q: unknown (want fashion-mnist or synthetic)", d.dataset)
}

// logFlags configure the logger on stderr.
type logFlags struct {
	level  string
	format string
	// stall: how long a wait for other workers or ranks may last before
	// the waiting process logs what it waits for (0: never).
	stall time.Duration
}

func (l *logFlags) register(fs *flag.FlagSet, level string) {
	fs.StringVar(&l.level, "log-level", level, "log level: debug, info, warn or error")
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
	fs.DurationVar(&l.stall, "stall-warning", 30*time.Second, "when a sync barrier, the SSP bound or an allreduce has waited this long, log (once per this interval) which workers or ranks it waits for, for which step, since when; 0: never")
}

func (l *logFlags) args() []string {
	return []string{"--log-level", l.level, "--log-format", l.format, "--stall-warning", l.stall.String()}
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	if l.stall < 0 {
		return nil, fmt.Errorf("--stall-warning %v: want >= 0 (0: never)", l.stall)
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", l.format)
}

// writableFile checks, before any work, that flag's file path can be
// written when the run ends: its folder exists and takes a new file, and
// the path is not a folder. Finding out after hours of training loses the
// weights.
func writableFile(flag, path string) error {
	if path == "" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s %s: is a directory, want a file path", flag, path)
	}
	if err := writeProbe(filepath.Dir(path)); err != nil {
		return fmt.Errorf("%s %s: cannot write there: %w", flag, path, err)
	}
	return nil
}

// writableDir checks that flag's folder exists, or can be made, and takes
// new files.
func writableDir(flag, dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%s %s: %w", flag, dir, err)
	}
	if err := writeProbe(dir); err != nil {
		return fmt.Errorf("%s %s: cannot write there: %w", flag, dir, err)
	}
	return nil
}

// writeProbe creates a file in dir and removes it.
func writeProbe(dir string) error {
	f, err := os.CreateTemp(dir, ".shoal-write-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	return errors.Join(f.Close(), os.Remove(name))
}

// manyCores is where the parameter-server path's parallel defaults turn
// on (--lanes 0, --parallel-step): on 16 cores (the device machine,
// 2026-11-27, docs/BENCHMARKS.md) four lanes over 256 KiB chunks and the
// parallel step took the 2-worker async run of make bench-ps from 29,441
// to 40,703 samples/s and a lone push-pull of the 670k vector from 2.0× to
// 1.0× a raw TCP round trip, and these defaults (3 lanes, one per 1 MiB
// chunk) ran it at 2.27× the PyTorch peer; on 2 cores neither gained
// beyond the noise. Between 2 and 16 nothing was measured: 8 is the middle.
const manyCores = 8

// autoLanes is --lanes 0's choice on a machine of cpus CPUs: 4 lanes
// where it has manyCores or more, else 1 (a worker never opens more
// lanes to a server than the server's share has chunks).
func autoLanes(cpus int) int {
	if cpus >= manyCores {
		return 4
	}
	return 1
}

// autoParallelStep is --parallel-step's default on a machine of cpus CPUs.
func autoParallelStep(cpus int) bool { return cpus >= manyCores }

// checkLanes checks --lanes: 1..client.MaxLanes, or 0 for autoLanes.
func checkLanes(n int) error {
	if n < 0 || n > client.MaxLanes {
		return fmt.Errorf("--lanes %d: want 1..%d connections per server, or 0 for %d where this machine has %d or more CPUs, else 1",
			n, client.MaxLanes, autoLanes(manyCores), manyCores)
	}
	return nil
}
