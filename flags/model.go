package flags

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/shoalml/shoal/bench"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
)

// Model chooses the model: --model, --hidden, --seed.
type Model struct {
	Arch   string
	Hidden string
	Seed   uint64
}

// Register adds the flags to fs.
func (m *Model) Register(fs *flag.FlagSet) {
	fs.StringVar(&m.Arch, "model", "mlp", SectionModel.Usage("model: mlp or cnn"))
	fs.StringVar(&m.Hidden, "hidden", "256,128", SectionModel.Usage("MLP hidden layer widths, comma-separated"))
	fs.Uint64Var(&m.Seed, "seed", 1, SectionModel.Usage("seed of the initial weights and of the data order"))
}

// Spec is the model the flags describe.
func (m *Model) Spec() (nn.Spec, error) {
	spec := nn.Spec{Arch: m.Arch}
	if m.Arch == "mlp" {
		for _, f := range strings.Split(m.Hidden, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return nn.Spec{}, fmt.Errorf("--hidden %q: want positive integers separated by commas, e.g. 512,512", m.Hidden)
			}
			spec.Hidden = append(spec.Hidden, n)
		}
	}
	return spec, nil
}

// Build returns the model on the gonum CPU backend (servers and the
// launcher, which only initialise and evaluate).
func (m *Model) Build() (nn.Model, error) {
	spec, err := m.Spec()
	if err != nil {
		return nil, err
	}
	return nn.New(spec, nn.NewCPU())
}

// BuildFast returns the model on the fastest CPU backend here (OpenBLAS
// when it loads, else gonum) with threads GEMM threads, and says which.
func (m *Model) BuildFast(threads int) (nn.Model, string, error) {
	spec, err := m.Spec()
	if err != nil {
		return nil, "", err
	}
	be, why := nn.NewBestCPU(threads)
	model, err := nn.New(spec, be)
	return model, why, err
}

// Opt chooses the optimizer and its learning-rate schedule.
type Opt struct {
	Name        string
	LR          float64
	Momentum    float64
	WeightDecay float64
	Decay       string
	Warmup      int64
	DecaySteps  int64
	Gamma       float64
	MinLR       float64
}

// Register adds the flags; decay is the default of --lr-decay.
func (o *Opt) Register(fs *flag.FlagSet, decay string) {
	fs.StringVar(&o.Name, "optimizer", "momentum", SectionOptimizer.Usage("optimizer: "+strings.Join(optim.Algorithms(), ", ")))
	fs.Float64Var(&o.LR, "lr", 0.01, SectionOptimizer.Usage("learning rate"))
	fs.Float64Var(&o.Momentum, "momentum", 0.9, SectionOptimizer.Usage("momentum (momentum and nesterov optimizers)"))
	fs.Float64Var(&o.WeightDecay, "weight-decay", 0, SectionOptimizer.Usage("L2 weight decay"))
	fs.StringVar(&o.Decay, "lr-decay", decay, SectionOptimizer.Usage("learning-rate decay after warm-up: none, step, cosine or linear"))
	fs.Int64Var(&o.Warmup, "warmup-steps", 0, SectionOptimizer.Usage("updates over which the learning rate ramps up linearly"))
	fs.Int64Var(&o.DecaySteps, "decay-steps", 0, SectionOptimizer.Usage("updates of the decay: its period (step) or length (cosine, linear; shoal train: the whole run when 0)"))
	fs.Float64Var(&o.Gamma, "lr-gamma", 0.1, SectionOptimizer.Usage("step decay: factor applied every --decay-steps"))
	fs.Float64Var(&o.MinLR, "min-lr", 0, SectionOptimizer.Usage("the learning rate that cosine and linear decay end at"))
}

// Config is the optimizer's config, checked.
func (o *Opt) Config() (optim.Config, error) {
	c := optim.DefaultConfig()
	c.Algorithm, c.LR, c.Momentum, c.WeightDecay = o.Name, o.LR, o.Momentum, o.WeightDecay
	c.Schedule = optim.Schedule{WarmupSteps: o.Warmup, Decay: o.Decay, DecaySteps: o.DecaySteps, Gamma: o.Gamma, MinLR: o.MinLR}
	if err := c.Validate(); err != nil {
		return optim.Config{}, fmt.Errorf("optimizer flags: %w", err)
	}
	return c, nil
}

// FormatFloat is f as a flag's value: the shortest text that parses back
// to f.
func FormatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Data chooses the dataset.
type Data struct {
	Dataset string
	Dir     string
}

// Register adds the flags to fs.
func (d *Data) Register(fs *flag.FlagSet) {
	fs.StringVar(&d.Dataset, "dataset", "fashion-mnist", SectionModel.Usage("dataset: fashion-mnist or synthetic"))
	fs.StringVar(&d.Dir, "data", "/usr/share/datasets/fashion-mnist", SectionModel.Usage("folder of the Fashion-MNIST idx files (plain or .gz)"))
}

// Load loads the training and test sets (the synthetic ones from seed).
func (d *Data) Load(seed uint64) (train, test data.Dataset, err error) {
	switch d.Dataset {
	case "fashion-mnist":
		return data.LoadFashionMNIST(d.Dir)
	case "synthetic":
		cfg := data.DefaultSyntheticConfig()
		cfg.Seed = seed
		return data.Synthetic(cfg)
	}
	return nil, nil, fmt.Errorf("--dataset %q: unknown (want fashion-mnist or synthetic)", d.Dataset)
}

// DescribeModel names the model for people, e.g. "mlp 784-256-128-10".
func DescribeModel(model nn.Model) string {
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

// ExpandHarnessModel lets --model name one of the harness's models (the
// names shoal bench train --models takes: big, big-6m, mlp-25m, mlp-6m,
// bench.Models): it sets the model flags that name stands for on fs,
// --model, --hidden and, where fs has it, --batch, each unless given on
// the command line. Call it after parsing fs; mlp and cnn are left as
// they are.
func ExpandHarnessModel(fs *flag.FlagSet) error {
	arch := fs.Lookup("model")
	if arch == nil {
		return nil
	}
	m, ok := bench.Models[arch.Value.String()]
	if !ok || arch.Value.String() == "mlp" || arch.Value.String() == "cnn" {
		return nil
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for i := 0; i+1 < len(m.Args); i += 2 {
		name := strings.TrimPrefix(m.Args[i], "--")
		if fs.Lookup(name) == nil || (given[name] && name != "model") {
			continue
		}
		if err := fs.Set(name, m.Args[i+1]); err != nil {
			return fmt.Errorf("--model %s: %w", arch.Value.String(), err)
		}
	}
	return nil
}
