package ps

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/timeline"
)

// Config configures one shard.
type Config struct {
	// Mode is one that goes through parameter servers: consistency.Async,
	// Sync or SSP.
	Mode consistency.Mode
	// Shard is this server's index in Plan.
	Shard int
	// Plan partitions the vector over the shards.
	Plan shard.Plan
	// Layout names the tensors of the vector (served to workers by Info).
	Layout nn.Layout
	// Optimizer is applied to each owned chunk with its own state.
	Optimizer optim.Config
	// Workers is the number of workers, ids 0..Workers-1: sync and ssp
	// wait for them (until membership arrives it comes from the
	// launcher), and every mode refuses pushes from other ids. Zero is 1
	// in sync and ssp and MaxWorkers in async, whose workers may come and
	// go unannounced; at most MaxWorkers.
	Workers int
	// BackupWorkers: sync applies a step once Workers−BackupWorkers pushed
	// it; later pushes for it are dropped and counted.
	BackupWorkers int
	// Staleness is SSP's bound s.
	Staleness int64
	// LocalSteps, when > 0, makes the run low-communication (DiLoCo,
	// Douillard et al. 2023): each worker takes LocalSteps steps with an
	// optimizer of its own and then pushes the pseudo-gradient θ_pulled −
	// θ_local, and Optimizer is the outer optimizer that applies it
	// (Nesterov, lr 0.7, momentum 0.9 in the paper; SGD at lr 1 without
	// momentum makes the weights the mean of the workers'). The mode
	// applies a pseudo-gradient as it applies a gradient: sync collects
	// one from every live worker per outer step (the barrier, backup
	// workers, membership) and applies their mean; async applies each as
	// it arrives, as the update rule says. Async then also refuses a push
	// computed from weights of a clock the shard has not reached. Sync and
	// async only; not with ScaleLR. 0: the workers push gradients.
	LocalSteps int
	// Fragments, when > 1 with LocalSteps, is Streaming DiLoCo (Douillard
	// et al. 2025): the workers synchronise the vector in Fragments
	// fragments (shard.Plan.Fragment) on a staggered schedule, one
	// fragment every LocalSteps/Fragments steps, and each push carries
	// one fragment's pseudo-gradient (fragment.go). It divides
	// LocalSteps, and the plan has at least Fragments chunks per shard.
	// Not with Journal, nor with the dcasgd update rule. 0 or 1: one
	// fragment, the whole share.
	Fragments int
	// Update is how async and SSP apply each push (update.go); its zero
	// value is each mode's default. Sync ignores it.
	Update UpdateConfig
	// ScaleLR multiplies the optimizer's learning rate by the live world
	// size (Goyal et al.'s linear scaling rule; its warm-up is the
	// optimizer's schedule): in sync and SSP the live workers, in async
	// Workers less those membership took out (WorkerGone) and that have
	// not joined again. Each update takes the size at the time it is
	// applied, and the journal keeps it.
	ScaleLR bool
	// MaxWait bounds every wait for other workers, also for callers that
	// set no deadline (default 10 minutes).
	MaxWait time.Duration
	// ParallelStep updates the shard's chunks in parallel, up to
	// GOMAXPROCS at once, while the pull of a push-pull reads the ones
	// done (stepLocked). Off by default: on 2 cores it measured within the
	// noise of the serial update; it is there to be measured where the
	// cores are (docs/BENCHMARKS.md).
	ParallelStep bool
	// CheckpointDir, when set, is where the shard checkpoints every
	// CheckpointEvery updates and resumes from at start.
	CheckpointDir   string
	CheckpointEvery int64
	// CheckpointErrorsWarn: a checkpoint that cannot be written during
	// the run is logged and the shard serves on. Otherwise (the default)
	// it is also sent on Failed, and the shard's owner stops it: a run
	// that believes it is checkpointed must not go on without checkpoints.
	CheckpointErrorsWarn bool
	// Journal, with a CheckpointDir, appends every update to a journal
	// there before applying it, and a starting shard replays what the
	// journal holds past its newest checkpoint: a shard killed and
	// restarted loses no acknowledged update (journal.go).
	Journal bool
	// Logger receives events; nil discards them.
	Logger *slog.Logger
	// StallWarning, when > 0, is how long pulls may wait for other
	// workers before the shard logs, once per StallWarning while they
	// wait, which workers it waits for, for which step, and since when
	// (Stall reports the same).
	StallWarning time.Duration
	// Timeline, when set, records the shard's spans: each pull, push and
	// push-pull (row worker+1), the waits for other workers, and the
	// optimizer steps (row 0).
	Timeline *timeline.Writer
	// OnWait, when set, is called with the length of every wait a pull
	// made for other workers (a sync barrier, the SSP bound), under the
	// shard's lock: it must be quick and must not call the shard.
	OnWait func(time.Duration)
}

// DefaultConfig is an async single shard with the default optimizer; Plan
// and Layout must still be set.
func DefaultConfig() Config {
	return Config{Mode: consistency.Async, Optimizer: optim.DefaultConfig(), MaxWait: 10 * time.Minute}
}

// withDefaults is c with its zero MaxWait and Workers, its update
// rule's defaults and a delayed-nesterov optimizer's zero delay set.
func (c Config) withDefaults() Config {
	c.Optimizer.Delay = c.Delay()
	c.Update = c.Update.ResolveFor(c.Mode, c.Optimizer.Algorithm)
	if c.MaxWait == 0 {
		c.MaxWait = 10 * time.Minute
	}
	if c.Workers == 0 {
		c.Workers = 1
		if c.Mode == consistency.Async {
			c.Workers = MaxWorkers
		}
	}
	return c
}

func (c Config) validate() error {
	if c.MaxWait < 0 {
		return fmt.Errorf("max wait %v: want > 0 (0: the default, 10 minutes)", c.MaxWait)
	}
	if !c.Mode.UsesServers() {
		return fmt.Errorf("mode %s: not a parameter-server mode (want %s, %s or %s)", c.Mode, consistency.Async, consistency.Sync, consistency.SSP)
	}
	if err := c.Plan.Validate(); err != nil {
		return err
	}
	if c.Shard < 0 || c.Shard >= c.Plan.Servers {
		return fmt.Errorf("shard %d: want 0..%d for a plan of %d servers", c.Shard, c.Plan.Servers-1, c.Plan.Servers)
	}
	if err := c.Layout.Validate(); err != nil {
		return err
	}
	if c.Layout.Size() != c.Plan.VectorLen {
		return fmt.Errorf("layout holds %d floats, plan %d", c.Layout.Size(), c.Plan.VectorLen)
	}
	if c.Workers < 1 || c.Workers > MaxWorkers {
		return fmt.Errorf("workers %d: want 1..%d", c.Workers, MaxWorkers)
	}
	if c.BackupWorkers < 0 || c.BackupWorkers >= c.Workers {
		return fmt.Errorf("backup workers %d: want 0..%d for %d workers", c.BackupWorkers, c.Workers-1, c.Workers)
	}
	if c.Journal && c.CheckpointDir == "" {
		return errors.New("journal: needs a checkpoint directory to write it in")
	}
	if c.BackupWorkers > 0 && c.Mode != consistency.Sync {
		return fmt.Errorf("backup workers %d: only sync mode has backup workers, this is %s", c.BackupWorkers, c.Mode)
	}
	if c.Staleness < 0 {
		return fmt.Errorf("staleness %d: want >= 0", c.Staleness)
	}
	if err := c.validateLocalSteps(); err != nil {
		return err
	}
	if err := c.withDefaults().validateFragments(); err != nil {
		return err
	}
	if err := c.Update.validate(); err != nil {
		return err
	}
	if c.Optimizer.Algorithm == optim.DelayedNesterov && c.Optimizer.Delay == 0 {
		return fmt.Errorf("optimizer %s in %s mode: delay 0 and no workers: the delay (the pushes between momentum updates) is by default the number of workers, which %s mode without Workers does not know; set the delay or the workers", optim.DelayedNesterov, c.Mode, c.Mode)
	}
	if c.CheckpointEvery < 0 {
		return fmt.Errorf("checkpoint every %d: want >= 0", c.CheckpointEvery)
	}
	return c.Optimizer.Validate()
}

// Delay is the delay of a delayed-nesterov optimizer (optim.Config.Delay)
// with 0 resolved to the pushes in one round, which each momentum update
// then takes the mean of: one in sync (the barrier's mean), Workers in
// async and SSP (each worker's once). In async without Workers it stays 0,
// which validate refuses: the workers may come and go unannounced, and no
// round can be told.
func (c Config) Delay() int {
	d := c.Optimizer.Delay
	if c.Optimizer.Algorithm != optim.DelayedNesterov || d != 0 {
		return d
	}
	switch {
	case c.synchronous():
		return 1
	case c.Workers == 0 && c.Mode != consistency.Async:
		return 1 // ps.Config's default in ssp
	}
	return c.Workers
}

// MaxLocalSteps bounds Config.LocalSteps.
const MaxLocalSteps = 1 << 20

// validateLocalSteps checks LocalSteps against the mode and ScaleLR.
func (c Config) validateLocalSteps() error {
	switch {
	case c.LocalSteps == 0:
		return nil
	case c.LocalSteps < 0 || c.LocalSteps > MaxLocalSteps:
		return fmt.Errorf("local steps %d: want 1..%d (0: workers push gradients)", c.LocalSteps, MaxLocalSteps)
	case c.Mode != consistency.Sync && c.Mode != consistency.Async:
		return fmt.Errorf("local steps %d: only %s and %s mode apply pseudo-gradients, this is %s", c.LocalSteps, consistency.Sync, consistency.Async, c.Mode)
	case c.ScaleLR:
		return fmt.Errorf("local steps %d: the outer optimizer's learning rate is not scaled by the world size (the pseudo-gradients are averaged, or scaled by the update rule); leave out scale-lr", c.LocalSteps)
	}
	return nil
}

// synchronous reports whether pushes go through the barrier: sync, and
// ssp with staleness 0.
func (c Config) synchronous() bool { return c.Mode.Synchronous(c.Staleness) }

// manyCores is where ParallelStep's default turns on (the same as
// client.ManyCores, where the workers' lanes do).
const manyCores = 8

// AutoParallelStep is ParallelStep's default on a machine of cpus CPUs
// (shoal ps --parallel-step): on where it has 8 or more, where updating
// chunks in parallel outweighs handing them between cores; on a couple of
// cores it gains nothing beyond the noise (docs/BENCHMARKS.md).
func AutoParallelStep(cpus int) bool { return cpus >= manyCores }
