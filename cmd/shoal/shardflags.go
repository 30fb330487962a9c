package main

import (
	"flag"
	"runtime"

	"github.com/shoalml/shoal/shard"
)

// shardFlags are the flags of a parameter-server shard that a launcher
// (shoal train) gives every one of its shards alike: declared once, here,
// registered by shoal ps and by shoal train, and turned back into the
// shard's argv by args. The flags a shard takes that differ from shard to
// shard (--shard, --listen, --workers) or that train keeps for itself
// stay out.
type shardFlags struct {
	servers    int
	chunkBytes int
	backup     int
	staleness  int64
	ckptDir    string
	ckptEvery  int64
	ckptErrors string
	journal    bool
	parStep    bool
}

func (f *shardFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.servers, "servers", 1, "number of parameter-server shards")
	fs.IntVar(&f.chunkBytes, "chunk-bytes", shard.DefaultChunkBytes, "bytes per chunk of the partition plan")
	fs.IntVar(&f.backup, "backup-workers", 0, "sync: apply a step once workers minus this many pushed it; drop the later pushes")
	fs.Int64Var(&f.staleness, "staleness", 1, "ssp: how many steps a worker may run ahead of the slowest (0 is sync)")
	fs.StringVar(&f.ckptDir, "checkpoint-dir", "", "the shards checkpoint here and resume from the newest checkpoint at start")
	fs.Int64Var(&f.ckptEvery, "checkpoint-every", 500, "with --checkpoint-dir: checkpoint every N updates (also at shutdown; 0: only at shutdown)")
	fs.StringVar(&f.ckptErrors, "checkpoint-errors", "fail", "a checkpoint that cannot be written during the run: fail (the shard stops, exit 1, and a shoal train run with it) or warn (log it and serve on)")
	fs.BoolVar(&f.journal, "journal", false, "with --checkpoint-dir: append every update to a journal there before applying it, and replay it at start, so a killed shard loses no acknowledged update (costs a write of the shard's gradient per update)")
	fs.BoolVar(&f.parStep, "parallel-step", autoParallelStep(runtime.NumCPU()), "PS modes: update a shard's chunks in parallel, up to GOMAXPROCS at once, each going out in the replies of async push-pulls once updated (on by default where this machine has 8 or more CPUs; see docs/BENCHMARKS.md)")
}

// visit calls fn for each flag of the group, in name order, the flag's
// value being f's.
func (f *shardFlags) visit(fn func(*flag.Flag)) {
	var g shardFlags
	fs := flag.NewFlagSet("shard", flag.ContinueOnError)
	g.register(fs) // sets g to the defaults,
	g = *f         // which f's values replace under the flags
	fs.VisitAll(fn)
}

// args is the group as a shard's argv: every flag, with f's value.
func (f *shardFlags) args() []string {
	var args []string
	f.visit(func(fl *flag.Flag) { args = append(args, "--"+fl.Name+"="+fl.Value.String()) })
	return args
}

// names are the group's flag names.
func (f *shardFlags) names() []string {
	var names []string
	f.visit(func(fl *flag.Flag) { names = append(names, fl.Name) })
	return names
}
