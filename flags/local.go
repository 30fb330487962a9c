package flags

import (
	"flag"
	"fmt"
	"strings"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
)

// LocalSteps is --local-steps, low-communication training (DiLoCo), and
// --fragments, its streaming fragments (Streaming DiLoCo): registered by
// the workers' Train group and by shoal ps, which both need them,
// declared here once.
type LocalSteps struct {
	H int
	// F is --fragments (0: none), Overlap --fragment-overlap (-1: auto)
	// and Mix --fragment-mix; the shards take F alone.
	F       int
	Overlap int
	Mix     float64
}

// Register adds the workers' flags to fs.
func (l *LocalSteps) Register(fs *flag.FlagSet) {
	l.register(fs)
	l.registerFragments(fs)
	fs.IntVar(&l.Overlap, "fragment-overlap", -1, SectionPS.Usage("with --fragments: the steps a worker takes while a fragment's push-pull is in flight before it merges the pulled fragment, 0..H/F-1 (0: wait for each exchange); -1: 1 where H/F > 1, else 0"))
	fs.Float64Var(&l.Mix, "fragment-mix", 0.5, SectionPS.Usage("with --fragments: what the merge keeps of the worker's own fragment, 0..1: its weights become mix × its own + (1 − mix) × the pulled ones (0: take the pulled fragment, dropping the overlapped steps' change to it)"))
}

// RegisterShard adds shoal ps's flags to fs: --local-steps and
// --fragments.
func (l *LocalSteps) RegisterShard(fs *flag.FlagSet) {
	l.register(fs)
	l.registerFragments(fs)
}

func (l *LocalSteps) registerFragments(fs *flag.FlagSet) {
	fs.IntVar(&l.F, "fragments", 0, SectionPS.Usage("with --local-steps H: streaming fragments (Streaming DiLoCo): the weights are synchronised in this many fragments (contiguous ranges, whole rows of the servers' chunks), one every H/F steps in turn, so each push-pull carries 1/F of the vector and overlaps the next local steps (--fragment-overlap); a divisor of H; servers and workers take the same. The servers' chunks are made small enough (--chunk-bytes) that each server owns F. 0: the whole vector every H steps"))
}

func (l *LocalSteps) register(fs *flag.FlagSet) {
	fs.IntVar(&l.H, "local-steps", 0, SectionPS.Usage("sync, async: low-communication training (DiLoCo): each worker takes this many steps with an optimizer of its own (--optimizer, --lr, …) on its own weights, then pushes the pseudo-gradient (the weights it pulled minus its own) and pulls the new weights in one round trip; the servers apply the pseudo-gradients with the outer optimizer (--outer-optimizer, --outer-lr, --outer-momentum). Each worker sends about 1/H of the bytes, H this count. 0: push every step's gradient"))
}

// RegisterProgram adds the flag to fs for shoal run, whose ranks'
// optimizer is the program's own (shoal.torch's DistributedOptimizer).
func (l *LocalSteps) RegisterProgram(fs *flag.FlagSet) {
	fs.IntVar(&l.H, "local-steps", 0, SectionPS.Usage("sync, async: low-communication training (DiLoCo): PROGRAM's optimizer (wrapped in shoal.torch's DistributedOptimizer) takes this many steps on the rank's own weights, then the rank pushes the pseudo-gradient (the weights it pulled minus its own) and pulls the new weights in one round trip; the servers apply the pseudo-gradients with the outer optimizer (--outer-optimizer, --outer-lr, --outer-momentum). The ranks get it as SHOAL_LOCAL_STEPS. 0: push every step's update"))
}

// Validate checks the flags for mode.
func (l *LocalSteps) Validate(mode consistency.Mode) error {
	if err := l.validateFragments(mode); err != nil {
		return err
	}
	switch {
	case l.H == 0:
		return nil
	case l.H < 0 || l.H > ps.MaxLocalSteps:
		return fmt.Errorf("--local-steps %d: want 1..%d, or 0 to push every step's gradient", l.H, ps.MaxLocalSteps)
	case mode != consistency.Sync && mode != consistency.Async:
		return fmt.Errorf("--local-steps %d: for --mode sync or async (the shards apply the pseudo-gradients), have --mode %s", l.H, mode)
	}
	return nil
}

// validateFragments checks --fragments, --fragment-overlap and
// --fragment-mix against --local-steps and mode.
func (l *LocalSteps) validateFragments(mode consistency.Mode) error {
	switch {
	case l.F == 0:
		return nil
	case l.F < 0 || l.F > shard.MaxFragments:
		return fmt.Errorf("--fragments %d: want 1..%d, or 0 for none", l.F, shard.MaxFragments)
	case mode == consistency.Ring:
		return fmt.Errorf("--fragments %d: for --mode sync or async with --local-steps (the servers apply each fragment's pseudo-gradient), have --mode ring", l.F)
	case l.H == 0:
		return fmt.Errorf("--fragments %d: fragments are synchronised every --local-steps H steps, and there are no local steps: give --local-steps", l.F)
	case l.F > l.H || l.H%l.F != 0:
		return fmt.Errorf("--fragments %d with --local-steps %d: want a divisor of %d (one fragment every H/F steps, at most one a step)", l.F, l.H, l.H)
	case l.Overlap < -1 || l.Overlap >= l.H/l.F:
		return fmt.Errorf("--fragment-overlap %d: want 0..%d (fewer than the H/F = %d steps between two exchanges), or -1 for the default", l.Overlap, l.H/l.F-1, l.H/l.F)
	case !(l.Mix >= 0 && l.Mix <= 1):
		return fmt.Errorf("--fragment-mix %v: want 0..1", l.Mix)
	}
	return nil
}

// OverlapSteps is --fragment-overlap with -1 resolved: 1 where there are
// two or more steps between exchanges, else 0.
func (l *LocalSteps) OverlapSteps() int {
	if l.Overlap >= 0 || l.F == 0 {
		return max(l.Overlap, 0)
	}
	if l.H/l.F > 1 {
		return 1
	}
	return 0
}

// Outer is the outer optimizer of low-communication training: what the
// shards apply the pseudo-gradients with (--local-steps). Part of the
// Shard group; the DiLoCo paper's defaults.
type Outer struct {
	Name     string
	LR       float64
	Momentum float64
	Delay    int
}

// Register adds the flags to fs.
func (o *Outer) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.Name, "outer-optimizer", optim.Nesterov, SectionOptimizer.Usage("with --local-steps: the servers' optimizer of the pseudo-gradients, in place of --optimizer: "+strings.Join(optim.Algorithms(), ", ")+" (sgd at --outer-lr 1 without momentum makes the weights the mean of the workers')"))
	fs.Float64Var(&o.LR, "outer-lr", 0.7, SectionOptimizer.Usage("with --local-steps: the outer optimizer's learning rate (constant)"))
	fs.Float64Var(&o.Momentum, "outer-momentum", 0.9, SectionOptimizer.Usage("with --local-steps: the outer optimizer's momentum (momentum, nesterov, delayed-nesterov)"))
	fs.IntVar(&o.Delay, "outer-delay", 0, SectionOptimizer.Usage("with --outer-optimizer delayed-nesterov (for async: Liu et al.'s delayed Nesterov, which applies each pseudo-gradient at --outer-lr/N without momentum and updates the momentum with the mean of the last N every N-th): N, the pushes between momentum updates. 0: the pushes of a round, --workers in async, 1 in sync (where it is nesterov)"))
}

// Config is the outer optimizer's config, checked.
func (o *Outer) Config() (optim.Config, error) {
	c := optim.DefaultConfig()
	c.Algorithm, c.LR, c.Momentum = o.Name, o.LR, o.Momentum
	if err := c.Validate(); err != nil {
		return optim.Config{}, fmt.Errorf("--outer-optimizer, --outer-lr, --outer-momentum: %w", err)
	}
	switch {
	case o.Delay < 0 || o.Delay > optim.MaxDelay:
		return optim.Config{}, fmt.Errorf("--outer-delay %d: want 1..%d, or 0 for the pushes of a round", o.Delay, optim.MaxDelay)
	case o.Delay != 0 && o.Name != optim.DelayedNesterov:
		return optim.Config{}, fmt.Errorf("--outer-delay %d: the delay of --outer-optimizer %s; --outer-optimizer %s would ignore it: leave it out", o.Delay, optim.DelayedNesterov, o.Name)
	}
	c.Delay = o.Delay
	return c, nil
}
