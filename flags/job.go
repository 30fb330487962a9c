package flags

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/launch"
	"github.com/shoalml/shoal/optim"
	pb "github.com/shoalml/shoal/proto/shoalpb"
)

// Job is the contract of `shoal run`, Shoal's horovodrun: how many ranks
// of the program after the flags, their mode, and in the parameter-server
// modes the shards' flags (Shard, the group shoal train gives its shards)
// and credentials (Sec), which go to the shards and, named in the
// environment, to the ranks. Config builds launch.RunProgram's config;
// ServerArgs is a shard's argv, built from the shard contract (PS).
//
// The shards' optimizer is not the user's: each rank steps its own and
// pushes the update, which a shard adds as it is (SGD, lr 1, momentum 0).
// The optimizer's flags are declared only to refuse them, saying so.
// With --local-steps H (DiLoCo) the ranks push every H steps the
// pseudo-gradient of their own H steps, and the shards apply it with the
// outer optimizer (--outer-optimizer, --outer-lr, --outer-momentum).
type Job struct {
	NP       int
	ModeName string
	Shard    Shard // --servers, and what every shard takes alike
	Local    LocalSteps
	Sec      Sec
	Startup  time.Duration
	// Compression is how the ranks' pushes travel in the PS modes.
	Compression string

	mode consistency.Mode // ModeName, parsed by Config
}

// Register adds the flags to fs.
func (j *Job) Register(fs *flag.FlagSet) {
	fs.IntVar(&j.NP, "np", 0, SectionJob.Usage("number of ranks: copies of PROGRAM started on this host as ranks 0..N-1 (required)"))
	fs.StringVar(&j.ModeName, "mode", consistency.Ring.String(), SectionJob.Usage("how the ranks train: ring (they allreduce among themselves, e.g. through shoal.torch, Horovod's API), or async, sync or ssp through --servers parameter-server shards that start first"))
	fs.DurationVar(&j.Startup, "startup-timeout", time.Minute, SectionCommunication.Usage("async, sync, ssp: how long a shard may take to start"))
	fs.StringVar(&j.Compression, "compression", "none", SectionCommunication.Usage("async, sync, ssp: the ranks' pushes on the wire as none (float32), fp16 or bf16, or int8 (a scale per 2048 values) for the pseudo-gradients of --local-steps only; the ranks get it as SHOAL_COMPRESSION, and a DistributedOptimizer's own compression= must then be none or the same. In a ring the program's DistributedOptimizer says it"))
	j.Shard.Register(fs)
	j.Local.RegisterProgram(fs)
	j.Sec.Register(fs)
	var o Opt
	visit(func(fs *flag.FlagSet) { o.Register(fs, "none") }, func(fl *flag.Flag) {
		fs.Var(refused{"--" + fl.Name}, fl.Name, SectionOptimizer.Usage("refused: the optimizer is PROGRAM's (the shards add each rank's update as it is)"))
	})
}

// serversOptimizer says why shoal run takes no optimizer flag.
const serversOptimizer = "the shards add the update each rank's own optimizer computed (sgd, lr 1, momentum 0): set the optimizer in PROGRAM"

// refused is a flag declared to be refused with a reason.
type refused struct{ name string }

func (r refused) String() string { return "" }

func (r refused) Set(string) error { return fmt.Errorf("%s: %s", r.name, serversOptimizer) }

// Config checks the flags that fs parsed and the program after them, and
// builds the run: the ranks' output on stdout and stderr, prefixed.
func (j *Job) Config(fs *flag.FlagSet, stdout, stderr io.Writer) (launch.ProgramConfig, error) {
	var err error
	if j.mode, err = consistency.Parse(j.ModeName); err != nil {
		return launch.ProgramConfig{}, fmt.Errorf("--%w", err) // --mode "x": unknown (want ...)
	}
	switch {
	case j.NP < 1:
		return launch.ProgramConfig{}, fmt.Errorf("-np %d: want the number of ranks to start, >= 1", j.NP)
	case fs.NArg() == 0:
		return launch.ProgramConfig{}, errors.New("no program to run: give it after the flags, e.g. shoal run -np 2 python3 train.py")
	case j.Startup <= 0:
		return launch.ProgramConfig{}, fmt.Errorf("--startup-timeout %v: want > 0", j.Startup)
	}
	if err := j.Sec.Load(); err != nil {
		return launch.ProgramConfig{}, err
	}
	cfg := launch.DefaultProgramConfig(fs.Args(), j.NP, stdout, stderr)
	cfg.Mode, cfg.Sec, cfg.StartupTimeout, cfg.LocalSteps = j.mode, j.Sec.Files, j.Startup, j.Local.H
	if err := j.Local.Validate(j.mode); err != nil {
		return launch.ProgramConfig{}, err
	}
	if j.mode == consistency.Ring {
		if c, err := collective.ParseCompression(j.Compression); err != nil || c != collective.None {
			return launch.ProgramConfig{}, fmt.Errorf("--compression %s: for the pushes of the parameter-server modes; in a ring the program's DistributedOptimizer says it (compression=hvd.Compression.fp16): leave it out", j.Compression)
		}
		return cfg, j.noShardFlags(fs)
	}
	if cfg.Compression, err = j.compression(); err != nil {
		return launch.ProgramConfig{}, err
	}
	if j.Shard.Servers < 1 {
		return launch.ProgramConfig{}, fmt.Errorf("--servers %d: want >= 1", j.Shard.Servers)
	}
	if err := j.Shard.CheckMode(j.mode, "-np", j.NP); err != nil {
		return launch.ProgramConfig{}, err
	}
	if err := j.ps(0, "").checkCheckpoints(); err != nil {
		return launch.ProgramConfig{}, err
	}
	if cfg.Exe, err = os.Executable(); err != nil {
		return launch.ProgramConfig{}, fmt.Errorf("finding this binary to start the shards: %w", err)
	}
	cfg.Servers, cfg.ServerArgs = j.Shard.Servers, j.ServerArgs
	return cfg, nil
}

// compression is --compression checked for the mode and --local-steps,
// by the rule of shoal train's (Ring.PushEncoding), as the ranks' SHOAL_COMPRESSION.
func (j *Job) compression() (string, error) {
	e, err := (&Ring{Compression: j.Compression}).PushEncoding(j.Local.H)
	switch e {
	case pb.Encoding_FLOAT16:
		return "fp16", err
	case pb.Encoding_BFLOAT16:
		return "bf16", err
	case pb.Encoding_INT8:
		return "int8", err
	}
	return "none", err
}

// noShardFlags refuses, in a ring, the shards' flags that were given: it
// has no shard, and a --servers 2 there says the command is not what its
// author thinks.
func (j *Job) noShardFlags(fs *flag.FlagSet) error {
	var given []string
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(j.Shard.Names(), f.Name) {
			given = append(given, "--"+f.Name)
		}
	})
	if len(given) == 0 {
		return nil
	}
	return fmt.Errorf("%s: for the parameter-server modes (async, sync, ssp); --mode ring has no servers and would ignore it: leave it out",
		strings.Join(given, ", "))
}

// ServerArgs is shard's argv, after the binary, once Config has checked
// the flags: shoal ps with the shard contract (PS) filled from them, for -np workers in the run's
// mode, listening on listen, reporting events to the launcher, with the
// optimizer that adds each rank's update as it is, and taking the model's
// layout and initial weights from initFrom, the file rank 0 writes.
func (j *Job) ServerArgs(shard int, listen, initFrom string) []string {
	p := j.ps(shard, listen)
	p.InitFrom = initFrom
	return append([]string{"ps"}, p.Args()...)
}

// ps is shard's contract under shoal run.
func (j *Job) ps(shard int, listen string) *PS {
	p := DefaultPS()
	p.Shard, p.Sec.Files = j.Shard, j.Sec.Files
	p.Listen, p.Index, p.Mode, p.Workers, p.Events = listen, shard, j.mode.String(), j.NP, true
	p.Opt.Name, p.Opt.LR, p.Opt.Momentum = optim.SGD, 1, 0 // with --local-steps, Shard.Outer's instead
	p.LocalSteps = j.Local
	p.Log.Level = "warn" // its lines go among the ranks'
	return p
}
