package flags

import (
	"flag"
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
	Servers      int
	ChunkBytes   int
	Backup       int
	Staleness    int64
	CkptDir      string
	CkptEvery    int64
	CkptErrors   string
	Journal      bool
	ParallelStep bool
	Update       Update
	Outer        Outer
}

// Register adds the flags to fs.
func (f *Shard) Register(fs *flag.FlagSet) {
	fs.IntVar(&f.Servers, "servers", 1, "number of parameter-server shards")
	fs.IntVar(&f.ChunkBytes, "chunk-bytes", shard.DefaultChunkBytes, "bytes per chunk of the partition plan")
	fs.IntVar(&f.Backup, "backup-workers", 0, "sync: apply a step once workers minus this many pushed it; drop the later pushes")
	fs.Int64Var(&f.Staleness, "staleness", 1, "ssp: how many steps a worker may run ahead of the slowest (0 is sync)")
	fs.StringVar(&f.CkptDir, "checkpoint-dir", "", "the shards checkpoint here and resume from the newest checkpoint at start")
	fs.Int64Var(&f.CkptEvery, "checkpoint-every", 500, "with --checkpoint-dir: checkpoint every N updates (also at shutdown; 0: only at shutdown)")
	fs.StringVar(&f.CkptErrors, "checkpoint-errors", "fail", "a checkpoint that cannot be written during the run: fail (the shard stops, exit 1, and a shoal train run with it) or warn (log it and serve on)")
	fs.BoolVar(&f.Journal, "journal", false, "with --checkpoint-dir: append every update to a journal there before applying it, and replay it at start, so a killed shard loses no acknowledged update (costs a write of the shard's gradient per update)")
	f.Update.Register(fs)
	f.Outer.Register(fs)
	fs.BoolVar(&f.ParallelStep, "parallel-step", ps.AutoParallelStep(runtime.NumCPU()), "PS modes: update a shard's chunks in parallel, up to GOMAXPROCS at once, each going out in the replies of async push-pulls once updated (on by default where this machine has 8 or more CPUs; see docs/BENCHMARKS.md)")
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
	rule = "update rule " + u.Resolve(mode).Rule.String()
	return rule, ps.Config{Mode: mode, Workers: workers, Staleness: f.Staleness, Optimizer: opt, Update: u, LocalSteps: localSteps}.UnstableWarning()
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
