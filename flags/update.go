package flags

import (
	"flag"
	"fmt"
	"math"

	"github.com/shoalml/shoal/ps"
)

// Update is how async and SSP shards apply each push (ps.UpdateConfig):
// --update-rule and the DC group. Shard embeds it; shoal bench plan
// registers it for --target's emulations.
type Update struct {
	Rule string
	DC   DC
}

// Register adds the flags to fs.
func (u *Update) Register(fs *flag.FlagSet) {
	fs.StringVar(&u.Rule, "update-rule", ps.UpdateAuto.String(), SectionPS.Usage("async, ssp: how a shard applies each push: full (Downpour: every push at the full learning rate; collapses at 8 workers of the default MLP), average (scaled by 1/N, N the workers), staleness (scaled by 1/τ, τ the shard's updates since it served the worker its weights), dcasgd (delay-compensated, g + λ·g⊙g⊙(w − w_bak), full rate; keeps a copy of the shard per worker), or auto: "+ps.DefaultAsyncUpdate.String()+" in async, average in ssp (docs/BENCHMARKS.md, \"Staleness emulation\")"))
	u.DC.Register(fs)
}

// Config is the flags, checked.
func (u *Update) Config() (ps.UpdateConfig, error) {
	rule, err := ps.ParseUpdate(u.Rule)
	if err != nil {
		return ps.UpdateConfig{}, fmt.Errorf("--update-rule: %w", err)
	}
	return u.DC.Config(rule)
}

// Args is the group as a child's argv (shoal bench train's runs of shoal
// train): every flag, with u's value.
func (u *Update) Args() []string {
	var g Update
	return render(func(fs *flag.FlagSet) { g.Register(fs); g = *u })
}

// DC are the flags of the DC-ASGD rule: --dc-lambda and --dc-max-mib.
// shoal bench emulate, which sweeps over rules, registers them alone.
type DC struct {
	Lambda float64
	MaxMiB int64
}

// Register adds the flags to fs.
func (d *DC) Register(fs *flag.FlagSet) {
	fs.Float64Var(&d.Lambda, "dc-lambda", ps.DefaultDCLambda, SectionPS.Usage("--update-rule dcasgd: the constant λ of the correction"))
	fs.Int64Var(&d.MaxMiB, "dc-max-mib", ps.DefaultDCMaxBytes>>20, SectionPS.Usage("--update-rule dcasgd: the most MiB a shard may keep for its copies of what it served each worker (workers × the shard's floats × 4 bytes); a shard that needs more does not start"))
}

// Config is rule with the flags, checked.
func (d *DC) Config(rule ps.Update) (ps.UpdateConfig, error) {
	if !(d.Lambda >= 0) || math.IsInf(d.Lambda, 0) {
		return ps.UpdateConfig{}, fmt.Errorf("--dc-lambda %g: want a finite value >= 0", d.Lambda)
	}
	if d.MaxMiB < 1 || d.MaxMiB > math.MaxInt64>>20 {
		return ps.UpdateConfig{}, fmt.Errorf("--dc-max-mib %d: want >= 1", d.MaxMiB)
	}
	return ps.UpdateConfig{Rule: rule, DCLambda: d.Lambda, DCMaxBytes: d.MaxMiB << 20}, nil
}
