package harness

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/shoalml/shoal/nn"
)

// SweepModel is one model of a sweep and the batches it is timed at.
type SweepModel struct {
	Arch    string
	Batches []int
}

// ParseSweep reads shoal bench compute's --sweep: models, each with its
// batches, separated by spaces or semicolons, as in
// "mlp:64,256,1024,4096 cnn:64,256".
func ParseSweep(s string) ([]SweepModel, error) {
	var models []SweepModel
	for _, item := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ';' }) {
		arch, list, ok := strings.Cut(item, ":")
		if !ok || (arch != "mlp" && arch != "cnn") || list == "" {
			return nil, fmt.Errorf("--sweep %q: %q: want a model (mlp or cnn), a colon and batches, e.g. mlp:64,256 cnn:64", s, item)
		}
		m := SweepModel{Arch: arch}
		for _, f := range strings.Split(list, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("--sweep %q: batch %q of %s: want a positive integer", s, f, arch)
			}
			m.Batches = append(m.Batches, n)
		}
		models = append(models, m)
	}
	if len(models) == 0 {
		return nil, fmt.Errorf("--sweep %q: no model: want e.g. mlp:64,256 cnn:64", s)
	}
	return models, nil
}

// ParsePrecisions reads a comma-separated list of precisions, as in
// "fp32,bf16,fp16".
func ParsePrecisions(s string) ([]nn.Precision, error) {
	var ps []nn.Precision
	for _, f := range strings.Split(s, ",") {
		p, err := nn.ParsePrecision(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--precisions %q: %w", s, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// SweepConfig is a sweep of shoal bench compute: every model at each of
// its batches in each precision, Rounds times, with the rounds outermost
// so that a sweep cut short holds every point of its first rounds. Each
// point is a Compute of Warmup and Steps steps; the weights and the batch
// come from Seed; Hidden is the MLP's hidden widths.
type SweepConfig struct {
	Models        []SweepModel
	Hidden        []int
	Precisions    []nn.Precision
	Rounds        int
	Warmup, Steps int
	Seed          uint64
	BatchOnDevice bool // see ComputeConfig
}

// Validate says what is wrong with cfg, in the flags' words.
func (cfg SweepConfig) Validate() error {
	switch {
	case len(cfg.Models) == 0:
		return fmt.Errorf("--sweep: no model")
	case len(cfg.Precisions) == 0:
		return fmt.Errorf("--precisions: none")
	case cfg.Rounds < 1:
		return fmt.Errorf("--rounds %d: want at least 1", cfg.Rounds)
	}
	return ComputeConfig{Batch: 1, Warmup: cfg.Warmup, Steps: cfg.Steps}.Validate(1)
}

// Built is a model a sweep times, built by its caller: where it computes
// and why there, its GEMM threads, and how to free it.
type Built struct {
	Model   nn.Model
	Where   string
	Why     string
	Threads int
	Close   func()
}

// Sweep times every point of cfg. It builds each model once (build, given
// the model's spec) and sets each precision on it before its batches (a
// model on a device; one on the CPU computes in fp32 only, which is
// checked before anything is timed). Each record, complete and with its
// Round (from 1), goes to emit as soon as it is measured. Sweep stops at
// the first error, of a step or of emit, and frees the models.
func Sweep(ctx context.Context, cfg SweepConfig, build func(nn.Spec) (Built, error), emit func(ComputeRecord) error) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	specs := make([]nn.Spec, len(cfg.Models))
	models := make([]Built, 0, len(cfg.Models))
	defer func() {
		for _, m := range models {
			m.Close()
		}
	}()
	for i, sm := range cfg.Models {
		specs[i] = nn.Spec{Arch: sm.Arch}
		if sm.Arch == "mlp" {
			specs[i].Hidden = cfg.Hidden
		}
		b, err := build(specs[i])
		if err != nil {
			return err
		}
		models = append(models, b)
		if _, ok := b.Model.(*nn.DeviceModel); !ok {
			for _, p := range cfg.Precisions {
				if p != nn.FP32 {
					return fmt.Errorf("--precisions %s: mixed precision runs on a GPU, but %s computes on %s", p, sm.Arch, b.Where)
				}
			}
		}
	}
	for round := 1; round <= cfg.Rounds; round++ {
		for i, sm := range cfg.Models {
			for _, p := range cfg.Precisions {
				if err := sweepPoints(ctx, cfg, sm, specs[i], models[i], p, round, emit); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// sweepPoints times one model in one precision at each of its batches.
func sweepPoints(ctx context.Context, cfg SweepConfig, sm SweepModel, spec nn.Spec, b Built, p nn.Precision, round int, emit func(ComputeRecord) error) error {
	if dm, ok := b.Model.(*nn.DeviceModel); ok {
		if err := dm.SetPrecision(p); err != nil {
			return err
		}
	}
	for _, batch := range sm.Batches {
		rec, err := Compute(ctx, b.Model, ComputeConfig{Batch: batch, Warmup: cfg.Warmup, Steps: cfg.Steps, Seed: cfg.Seed, BatchOnDevice: cfg.BatchOnDevice})
		if err != nil {
			return fmt.Errorf("%s at batch %d in %s, round %d: %w", sm.Arch, batch, p, round, err)
		}
		rec.Complete(spec, b.Threads, b.Where, b.Why, b.Model, p)
		rec.Round = round
		if err := emit(rec); err != nil {
			return err
		}
	}
	return nil
}
