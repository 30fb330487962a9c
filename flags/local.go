package flags

import (
	"flag"
	"fmt"
	"strings"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
)

// LocalSteps is --local-steps, low-communication training (DiLoCo):
// registered by the workers' Train group and by shoal ps, which both
// need it, declared here once.
type LocalSteps struct {
	H int
}

// Register adds the flag to fs.
func (l *LocalSteps) Register(fs *flag.FlagSet) {
	fs.IntVar(&l.H, "local-steps", 0, SectionPS.Usage("sync, async: low-communication training (DiLoCo): each worker takes this many steps with an optimizer of its own (--optimizer, --lr, …) on its own weights, then pushes the pseudo-gradient (the weights it pulled minus its own) and pulls the new weights in one round trip; the servers apply the pseudo-gradients with the outer optimizer (--outer-optimizer, --outer-lr, --outer-momentum). Each worker sends about 1/H of the bytes, H this count. 0: push every step's gradient"))
}

// RegisterProgram adds the flag to fs for shoal run, whose ranks'
// optimizer is the program's own (shoal.torch's DistributedOptimizer).
func (l *LocalSteps) RegisterProgram(fs *flag.FlagSet) {
	fs.IntVar(&l.H, "local-steps", 0, SectionPS.Usage("sync, async: low-communication training (DiLoCo): PROGRAM's optimizer (wrapped in shoal.torch's DistributedOptimizer) takes this many steps on the rank's own weights, then the rank pushes the pseudo-gradient (the weights it pulled minus its own) and pulls the new weights in one round trip; the servers apply the pseudo-gradients with the outer optimizer (--outer-optimizer, --outer-lr, --outer-momentum). The ranks get it as SHOAL_LOCAL_STEPS. 0: push every step's update"))
}

// Validate checks the flag for mode.
func (l *LocalSteps) Validate(mode consistency.Mode) error {
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
