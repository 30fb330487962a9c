package flags

import (
	"flag"
	"fmt"
	"runtime"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
)

// Shard are the flags of a parameter-server shard that a launcher
// (shoal train) gives every one of its shards alike: declared once, here,
// registered by shoal ps (PS) and by shoal train, and turned back into
// the shard's argv by Args. The flags a shard takes that differ from shard to
// shard (--shard, --listen, --workers) or that train keeps for itself
// stay out.
type Shard struct {
	Servers    int
	ChunkBytes int
	Backup     int
	Staleness  int64
	// stalenessGiven: --staleness was given (not a launcher's "unset"),
	// which CheckMode refuses outside ssp.
	stalenessGiven bool
	CkptDir        string
	CkptEvery      int64
	CkptErrors     string
	Journal        bool
	ParallelStep   bool
	Update         Update
	Outer          Outer
}

// Register adds the flags to fs.
func (f *Shard) Register(fs *flag.FlagSet) {
	fs.IntVar(&f.Servers, "servers", 1, SectionJob.Usage("number of parameter-server shards"))
	fs.IntVar(&f.ChunkBytes, "chunk-bytes", shard.DefaultChunkBytes, SectionPS.Usage("bytes per chunk of the partition plan"))
	fs.IntVar(&f.Backup, "backup-workers", 0, SectionPS.Usage("sync: apply a step once workers minus this many pushed it; drop the later pushes"))
	optionalInt64(fs, &f.Staleness, &f.stalenessGiven, "staleness", 1, SectionPS.Usage("ssp: how many `steps` a worker may run ahead of the slowest (0 is sync; default 1; refused in the other modes, which ignore it)"))
	fs.StringVar(&f.CkptDir, "checkpoint-dir", "", SectionCheckpoints.Usage("the shards checkpoint here and resume from the newest checkpoint at start"))
	fs.Int64Var(&f.CkptEvery, "checkpoint-every", 500, SectionCheckpoints.Usage("with --checkpoint-dir: checkpoint every N updates (also at shutdown; 0: only at shutdown)"))
	fs.StringVar(&f.CkptErrors, "checkpoint-errors", "fail", SectionCheckpoints.Usage("a checkpoint that cannot be written during the run: fail (the shard stops, exit 1, and a shoal train run with it) or warn (log it and serve on)"))
	fs.BoolVar(&f.Journal, "journal", false, SectionCheckpoints.Usage("with --checkpoint-dir: append every update to a journal there before applying it, and replay it at start, so a killed shard loses no acknowledged update (costs a write of the shard's gradient per update)"))
	f.Update.Register(fs)
	f.Outer.Register(fs)
	fs.BoolVar(&f.ParallelStep, "parallel-step", ps.AutoParallelStep(runtime.NumCPU()), SectionPS.Usage("PS modes: update a shard's chunks in parallel, up to GOMAXPROCS at once, each going out in the replies of async push-pulls once updated (on by default where this machine has 8 or more CPUs; see docs/BENCHMARKS.md)"))
}

// CheckMode refuses what the shards of a job in mode would ignore or
// could not do, saying which flag and why: --staleness given outside ssp
// (the default is not refused, only a bound a person gave), backup
// workers outside sync, and in sync as many backup workers as there are
// workers (counted by the flag workersFlag, n of them).
func (f *Shard) CheckMode(mode consistency.Mode, workersFlag string, n int) error {
	if f.stalenessGiven && mode != consistency.SSP {
		return fmt.Errorf("--staleness %d: the bound of --mode ssp; --mode %s would ignore it: leave it out, or run --mode ssp", f.Staleness, mode)
	}
	if f.Staleness < 0 {
		return fmt.Errorf("--staleness %d: want >= 0 (0 is sync)", f.Staleness)
	}
	switch {
	case f.Backup < 0:
		return fmt.Errorf("--backup-workers %d: want >= 0", f.Backup)
	case f.Backup > 0 && mode != consistency.Sync:
		return fmt.Errorf("--backup-workers %d: for --mode sync, whose steps wait for the workers but this many; --mode %s would ignore it: leave it out, or run --mode sync", f.Backup, mode)
	case f.Backup > 0 && f.Backup >= n:
		return fmt.Errorf("--backup-workers %d: want fewer than %s %d (a step waits for all workers but this many, so for one at least)", f.Backup, workersFlag, n)
	}
	return nil
}

// UpdateConfig is the shards' update rule, checked.
func (f *Shard) UpdateConfig() (ps.UpdateConfig, error) { return f.Update.Config() }

// UpdateNote is how the shards of a job in mode, of workers workers and
// optimizer opt, apply each push, in words ("" where the mode has no
// rule: sync, ring), and why that is known to be unstable ("" where it is
// not, or the flags do not parse). With localSteps > 0 the shards'
// optimizer is the outer one (--outer-optimizer), not opt.
func (f *Shard) UpdateNote(mode consistency.Mode, workers int, opt optim.Config, localSteps int) (rule, warning string) {
	u, err := f.UpdateConfig()
	if err != nil || !mode.UsesServers() || mode.Synchronous(f.Staleness) {
		return "", ""
	}
	if localSteps > 0 {
		if opt, err = f.Outer.Config(); err != nil {
			return "", ""
		}
	}
	rule = "update rule " + u.ResolveFor(mode, opt.Algorithm).Rule.String()
	return rule, ps.Config{Mode: mode, Workers: workers, Staleness: f.Staleness, Optimizer: opt, Update: u, LocalSteps: localSteps}.UnstableWarning()
}

// OuterDelay is the delay of the shards' delayed-nesterov outer optimizer
// (--outer-delay) in a job in mode of workers workers, 0 resolved as the
// shards resolve it.
func (f *Shard) OuterDelay(mode consistency.Mode, workers int) int {
	c := optim.Config{Algorithm: f.Outer.Name, Delay: f.Outer.Delay}
	return ps.Config{Mode: mode, Workers: workers, Staleness: f.Staleness, Optimizer: c}.Delay()
}

// Args is the group as a shard's argv: every flag, with f's value.
func (f *Shard) Args() []string {
	var g Shard
	return render(func(fs *flag.FlagSet) { g.Register(fs); g = *f })
}

// Names are the group's flag names.
func (f *Shard) Names() []string {
	var g Shard
	var names []string
	visit(g.Register, func(fl *flag.Flag) { names = append(names, fl.Name) })
	return names
}
