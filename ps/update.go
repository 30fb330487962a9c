package ps

import (
	"fmt"
	"math"
	"strings"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/optim"
)

// Update is the rule by which an async or SSP shard turns one worker's
// push into the gradient its optimizer steps with (Config.Update.Rule).
// Sync has its own: the barrier's one mean step per round.
//
// Staleness τ is the shard's own count: the updates it applied since it
// last served the pushing worker the whole of its share (a pull, or the
// read of a push-pull), or since the clock the worker says its gradient
// was computed at, whichever is more. A worker can claim an older clock
// than it read, never a newer one: a lying worker can only make itself
// staler. A worker the shard has not served since it started (or since
// the checkpoint it resumed from) is taken at its word. Partial reads
// (named ranges) are not serves.
type Update uint8

const (
	// UpdateAuto is the mode's default: DefaultAsyncUpdate in async,
	// UpdateAverage in SSP.
	UpdateAuto Update = iota
	// UpdateFull is Downpour's rule: every push at the full learning
	// rate. N workers move the weights about N times as far per round,
	// on gradients about N−1 updates old; it collapses at 8 workers of
	// the default MLP (docs/BENCHMARKS.md, "Staleness emulation").
	UpdateFull
	// UpdateAverage scales every push by 1/N, so that a round of N
	// pushes makes one mean step: N is Config.Workers in async, the live
	// workers in SSP (SSP's rule before there were rules).
	UpdateAverage
	// UpdateStaleness scales every push by 1/max(τ, 1) (Zhang et al.,
	// "Staleness-aware Async-SGD", IJCAI 2016).
	UpdateStaleness
	// UpdateDCASGD corrects every push for its delay (Zheng et al.,
	// "Asynchronous SGD with Delay Compensation", ICML 2017) and applies
	// it at the full rate: g + λ·g⊙g⊙(w − w_bak), with w the shard's
	// weights now, w_bak those it last served the worker, and λ constant
	// (UpdateConfig.DCLambda). The shard keeps w_bak per worker: Workers ×
	// its floats × 4 bytes, bounded by UpdateConfig.DCMaxBytes (a
	// checkpoint copies them, as it copies the weights, and holds them). A
	// push from a worker the shard holds no w_bak for is applied
	// uncorrected. With --overlap-push-pull a worker's pull may reach the
	// shard before its last push: w_bak is then newer than the gradient's
	// weights, and the correction covers less of the delay.
	UpdateDCASGD
)

// DefaultAsyncUpdate is async's rule where none is set, chosen from the
// measurements of the default MLP in docs/BENCHMARKS.md ("Staleness
// emulation"): emulated at 8 to 64 workers it ends within 0.6 points of
// sync or above it (−0.59 to +2.00), where full rate collapsed at 8 and
// diverged from 16 on and DC-ASGD did the same; 1/N (average) was within
// 1.1 points of it. In real runs on a 2-core machine, whose bursty
// schedule gives many pushes a small τ, it ended 1.5 and 2.1 points above
// sync at 4 and 8 workers, where average ended level with sync. It needs
// no N.
const DefaultAsyncUpdate = UpdateStaleness

// Defaults of UpdateConfig.
const (
	// DefaultDCLambda is MXNet's DCASGD default.
	DefaultDCLambda = 0.04
	// DefaultDCMaxBytes bounds DC-ASGD's per-worker copies on one shard.
	DefaultDCMaxBytes = 1 << 30
)

var updateNames = [...]string{UpdateAuto: "auto", UpdateFull: "full", UpdateAverage: "average", UpdateStaleness: "staleness", UpdateDCASGD: "dcasgd"}

func (u Update) String() string {
	if int(u) < len(updateNames) {
		return updateNames[u]
	}
	return fmt.Sprintf("Update(%d)", u)
}

// ParseUpdate reads an update rule by name.
func ParseUpdate(s string) (Update, error) {
	for u, name := range updateNames {
		if s == name {
			return Update(u), nil
		}
	}
	return 0, fmt.Errorf("update rule %q: unknown (want %s)", s, strings.Join(updateNames[:], ", "))
}

// UpdateConfig is how an async or SSP shard applies pushes.
type UpdateConfig struct {
	Rule Update
	// DCLambda is UpdateDCASGD's λ, >= 0 (0: DefaultDCLambda).
	DCLambda float64
	// DCMaxBytes bounds the copies UpdateDCASGD keeps (0:
	// DefaultDCMaxBytes): a shard whose Workers × floats × 4 bytes exceed
	// it does not start.
	DCMaxBytes int64
}

// Resolve is u with its defaults for mode filled in.
func (u UpdateConfig) Resolve(mode consistency.Mode) UpdateConfig { return u.ResolveFor(mode, "") }

// ResolveFor is u with its defaults for mode and the shard's optimizer
// algorithm filled in. Under optim.DelayedNesterov the rule's default is
// UpdateFull: that optimizer scales every push by 1/N itself (its
// delay), as Liu et al.'s algorithm does; another rule would scale it
// again.
func (u UpdateConfig) ResolveFor(mode consistency.Mode, algorithm string) UpdateConfig {
	if u.Rule == UpdateAuto && algorithm == optim.DelayedNesterov {
		u.Rule = UpdateFull
	}
	if u.Rule == UpdateAuto {
		u.Rule = UpdateAverage
		if mode == consistency.Async {
			u.Rule = DefaultAsyncUpdate
		}
	}
	if u.DCLambda == 0 {
		u.DCLambda = DefaultDCLambda
	}
	if u.DCMaxBytes == 0 {
		u.DCMaxBytes = DefaultDCMaxBytes
	}
	return u
}

func (u UpdateConfig) validate() error {
	if int(u.Rule) >= len(updateNames) {
		return fmt.Errorf("update rule %d: unknown", u.Rule)
	}
	if !(u.DCLambda >= 0) || math.IsInf(u.DCLambda, 0) {
		return fmt.Errorf("dcasgd lambda %g: want a finite value >= 0", u.DCLambda)
	}
	if u.DCMaxBytes < 0 {
		return fmt.Errorf("dcasgd bound %d bytes: want >= 0 (0: the default, %d MiB)", u.DCMaxBytes, DefaultDCMaxBytes>>20)
	}
	return nil
}

// DCBytes is what UpdateDCASGD keeps on a shard of floats floats for
// workers workers: one copy of the share per worker.
func DCBytes(workers, floats int) int64 { return int64(workers) * int64(floats) * 4 }

// UnstableWarning says why the rule, mode, workers and optimizer of c are
// known to be unstable, or "" when they are not: a full-rate rule (full,
// dcasgd) in async or SSP with an effective step lr·N/(1−momentum) of 0.5
// or more. In the emulation of the default MLP (docs/BENCHMARKS.md) full
// rate collapsed at 8 workers with lr 0.01 and momentum 0.9 (0.8),
// diverged at 64 with momentum 0.5 (1.28) and lost 2.3 points to sync at
// 32 (0.64), and trained above sync at 8 and 16 with momentum 0.5 (0.16,
// 0.32); DC-ASGD diverged where full rate did, sooner.
//
// With LocalSteps in async mode, an outer optimizer with momentum is
// known to be unstable: each worker's pseudo-gradient takes a momentum
// step of its own, so a round of N of them compounds N (Liu et al.,
// "Asynchronous Local-SGD Training for Language Modeling", 2024, found
// the same and delay the momentum). On the default MLP, 4 workers of 10
// local steps under outer Nesterov (lr 0.7, momentum 0.9) fell to 10%
// test accuracy with the default rule and to 22% with average, where
// outer SGD at lr 1 with average ended level with sync
// (docs/BENCHMARKS.md, "Low-communication training").
//
// Delayed Nesterov (optim.DelayedNesterov), their remedy, is not warned of:
// it scales every push by 1/N itself, so the full-rate rule is its own.
// On the default MLP it did not diverge, and at outer momentum 0.5 ended
// level with sync at 4 and 8 workers of 10 local steps; at 0.9 it
// oscillated below (docs/BENCHMARKS.md, "Asynchronous DiLoCo with delayed
// Nesterov").
// At a delay of 1 in async with more than one worker it is Nesterov, and
// warned of as Nesterov is.
func (c Config) UnstableWarning() string {
	c = c.withDefaults()
	o := c.Optimizer
	momentum := o.Algorithm == optim.Momentum || o.Algorithm == optim.Nesterov || o.Algorithm == optim.DelayedNesterov && o.Delay == 1 && c.Workers > 1
	if c.LocalSteps > 0 && c.Mode == consistency.Async && momentum && o.Momentum > 0 {
		return fmt.Sprintf("outer optimizer %s with momentum %g in async mode is known to be unstable: every pseudo-gradient takes a momentum step of its own as it arrives (the default MLP fell to chance at 4 workers of 10 local steps); use --outer-optimizer %s --outer-momentum 0.5 (its --outer-delay the number of workers, the default; at momentum 0.9 it oscillated below sync), or --outer-optimizer sgd --outer-lr 1 with --update-rule average, or --mode sync",
			o.Algorithm, o.Momentum, optim.DelayedNesterov)
	}
	if o.Algorithm == optim.DelayedNesterov {
		return ""
	}
	if !c.Mode.UsesServers() || c.synchronous() || c.Update.Rule != UpdateFull && c.Update.Rule != UpdateDCASGD || c.Workers >= MaxWorkers {
		return ""
	}
	mom := 0.0
	if c.Optimizer.Algorithm == "momentum" || c.Optimizer.Algorithm == "nesterov" {
		mom = c.Optimizer.Momentum
	}
	eff := c.Optimizer.LR * float64(c.Workers) / (1 - mom)
	if eff < 0.5 {
		return ""
	}
	return fmt.Sprintf("update rule %s in %s mode with %d workers at lr %g and momentum %g is known to be unstable: each push is applied at the full rate on a gradient about %d updates old, and lr·N/(1−momentum) = %.2g is past 0.5 (the default MLP collapsed at 0.8: docs/BENCHMARKS.md, \"Staleness emulation\"); the default rule, %s, scales each push down, or lower --lr or --momentum",
		c.Update.Rule, c.Mode, c.Workers, c.Optimizer.LR, mom, c.Workers-1, eff, DefaultAsyncUpdate)
}

// updater is the state of an async or SSP shard's update rule, a plain
// value the shard drives under its lock: when it served each worker, and
// for DC-ASGD what.
type updater struct {
	cfg    UpdateConfig
	lambda float32
	// served holds, per worker, the clock of the last whole share the
	// shard served it.
	served map[int64]int64
	// backup holds, per worker, the share it was last served (DC-ASGD
	// only), chunk after chunk.
	backup  map[int64][]float32
	scratch []float32 // the gradient the optimizer steps with, when not the push's
}

func newUpdater(cfg UpdateConfig, floats int) *updater {
	return &updater{cfg: cfg, lambda: float32(cfg.DCLambda), served: map[int64]int64{}, backup: map[int64][]float32{}, scratch: make([]float32, floats)}
}

// staleness is τ of in at the shard's clock.
func (u *updater) staleness(clock int64, in Push) int64 {
	tau := clock - in.Clock
	if c, ok := u.served[in.WorkerID]; ok {
		tau = max(tau, clock-c)
	}
	return max(tau, 0)
}

// grads returns the gradient the optimizer steps with for in, pushed at
// staleness tau by one of n workers, and a bound of its magnitudes; gmax
// bounds in's. weights are the shard's values now, chunk after chunk.
// The result is in.Grads or u.scratch.
func (u *updater) grads(in Push, gmax float64, tau int64, n int, weights func(yield func(w []float32) bool)) ([]float32, float64) {
	switch u.cfg.Rule {
	case UpdateAverage:
		return u.scale(in.Grads, gmax, 1/float32(max(n, 1)))
	case UpdateStaleness:
		return u.scale(in.Grads, gmax, 1/float32(max(tau, 1)))
	case UpdateDCASGD:
		bak, ok := u.backup[in.WorkerID]
		if !ok {
			return in.Grads, gmax
		}
		var m float32
		at := 0
		for w := range weights {
			for i, v := range w {
				g := in.Grads[at+i]
				c := g + u.lambda*g*g*(v-bak[at+i])
				u.scratch[at+i] = c
				m = max(m, float32(math.Abs(float64(c))))
			}
			at += len(w)
		}
		return u.scratch, float64(m)
	}
	return in.Grads, gmax
}

// scale is g scaled by f into u.scratch (g itself when f is 1).
func (u *updater) scale(g []float32, gmax float64, f float32) ([]float32, float64) {
	if f == 1 {
		return g, gmax
	}
	for i, v := range g {
		u.scratch[i] = v * f
	}
	return u.scratch, gmax * float64(f)
}

// serve notes that worker w was served the weights of clock, the shard's
// values chunk after chunk.
func (u *updater) serve(w, clock int64, weights func(yield func(w []float32) bool)) {
	u.served[w] = clock
	if u.cfg.Rule != UpdateDCASGD {
		return
	}
	bak := u.backup[w]
	if bak == nil {
		bak = make([]float32, len(u.scratch))
		u.backup[w] = bak
	}
	at := 0
	for v := range weights {
		at += copy(bak[at:], v)
	}
}
