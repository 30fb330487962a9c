package flags

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/ps"
)

// Train are the training-loop flags shared by worker and train.
type Train struct {
	ModeName string           // --mode, which Validate parses into Mode
	Mode     consistency.Mode // set by Validate
	// ModeGiven: --mode was given. A worker not given it takes the
	// servers' mode (node.Loop.TakeServersMode); a launcher that knows
	// the mode sets it for its workers.
	ModeGiven      bool
	BackwardPasses int
	Batch          int
	Epochs         int
	Steps          int64
	PushEvery      int
	FetchEvery     int
	Overlap        bool
	ProgressEvery  time.Duration
	LocalSteps     LocalSteps
	// HostAggregate and WorkersPerHost: per-host aggregation
	// (node.HostConfig).
	HostAggregate  bool
	WorkersPerHost int
}

// Register adds the flags to fs.
func (t *Train) Register(fs *flag.FlagSet) {
	optionalString(fs, &t.ModeName, &t.ModeGiven, "mode", consistency.Async.String(),
		SectionJob.Usage("how workers agree, the `mode`: async (Downpour SGD; the default), sync, ssp (bounded staleness) through parameter servers, or ring (allreduce, no server); a shoal worker not given it takes its servers' mode"))
	fs.IntVar(&t.BackwardPasses, "backward-passes-per-step", 1, SectionJob.Usage("average the gradients of N batches into each step"))
	fs.IntVar(&t.Batch, "batch", 64, SectionJob.Usage("batch size per worker"))
	fs.IntVar(&t.Epochs, "epochs", 3, SectionJob.Usage("epochs to train"))
	fs.Int64Var(&t.Steps, "steps", 0, SectionJob.Usage("training steps per worker (overrides --epochs when > 0)"))
	fs.IntVar(&t.PushEvery, "push-every", 1, SectionPS.Usage("async: push gradients every N steps (Downpour's n_push)"))
	fs.IntVar(&t.FetchEvery, "fetch-every", 1, SectionPS.Usage("async: pull weights every N steps (Downpour's n_fetch)"))
	fs.DurationVar(&t.ProgressEvery, "progress-every", 250*time.Millisecond, SectionOutput.Usage("how often a worker reports its progress (0: after every step)"))
	t.LocalSteps.Register(fs)
	fs.BoolVar(&t.HostAggregate, "host-aggregate", false, SectionPS.Usage("the workers of a host average their gradients over shared memory and the host's first rank alone pushes the mean and pulls the weights for them (BytePS's per-host aggregation): the servers count hosts, not workers (their --workers, sync's barrier, SSP's bound); async, sync, ssp"))
	fs.IntVar(&t.WorkersPerHost, "workers-per-host", 0, SectionPS.Usage("with --host-aggregate: the workers of a host, ranks in a row (host = rank / N); shoal train: 0 makes all its --workers one host, and N > 0 splits them into fake hosts of N"))
	fs.BoolVar(&t.Overlap, "overlap-push-pull", false, SectionPS.Usage("async: push each gradient in the background while pulling the next step's weights (both link directions busy at once; up to one more update of staleness)"))
}

// Validate checks the flags and parses --mode into Mode.
func (t *Train) Validate() error {
	m, err := consistency.Parse(t.ModeName)
	if err != nil {
		return fmt.Errorf("--%w", err) // --mode "x": unknown (want ...)
	}
	t.Mode = m
	if t.Mode != consistency.Async && (t.PushEvery != 1 || t.FetchEvery != 1) {
		return fmt.Errorf("--push-every %d, --fetch-every %d: %s mode pulls and pushes every step (want 1)", t.PushEvery, t.FetchEvery, t.Mode)
	}
	if t.PushEvery < 1 || t.PushEvery > ps.MaxStepGap || t.FetchEvery < 1 {
		return fmt.Errorf("--push-every %d, --fetch-every %d: want --push-every 1..%d (a shard refuses a push further past the last) and --fetch-every >= 1",
			t.PushEvery, t.FetchEvery, ps.MaxStepGap)
	}
	if t.Overlap && (t.Mode != consistency.Async || t.PushEvery != 1 || t.FetchEvery != 1) {
		return fmt.Errorf("--overlap-push-pull: only for --mode async with --push-every 1 and --fetch-every 1 (have --mode %s, %d, %d)", t.Mode, t.PushEvery, t.FetchEvery)
	}
	if err := t.validateHosts(); err != nil {
		return err
	}
	if err := t.LocalSteps.Validate(t.Mode); err != nil {
		return err
	}
	if t.LocalSteps.F > 0 && t.HostAggregate {
		return fmt.Errorf("--fragments %d with --host-aggregate: a host's push-pull carries the whole vector; leave out one of them", t.LocalSteps.F)
	}
	if t.LocalSteps.H > 0 && (t.PushEvery != 1 || t.FetchEvery != 1 || t.Overlap) {
		return fmt.Errorf("--local-steps %d: the worker pushes and pulls once a round; leave out --push-every, --fetch-every and --overlap-push-pull", t.LocalSteps.H)
	}
	if t.ProgressEvery < 0 {
		return fmt.Errorf("--progress-every %v: want >= 0", t.ProgressEvery)
	}
	if t.BackwardPasses < 1 {
		return fmt.Errorf("--backward-passes-per-step %d: want >= 1", t.BackwardPasses)
	}
	if t.Batch < 1 {
		return fmt.Errorf("--batch %d: want >= 1", t.Batch)
	}
	if t.Steps < 0 {
		return fmt.Errorf("--steps %d: want >= 0", t.Steps)
	}
	if t.Steps == 0 && t.Epochs < 1 {
		return fmt.Errorf("--epochs %d: want >= 1 (or --steps > 0)", t.Epochs)
	}
	if t.PushEvery < 1 || t.FetchEvery < 1 {
		return fmt.Errorf("--push-every %d, --fetch-every %d: want >= 1", t.PushEvery, t.FetchEvery)
	}
	return nil
}

// Rank are --rank, --world-size and --local-rank: a worker's place in
// the job where the launcher's environment does not say it, or says
// otherwise. -1 is unset.
type Rank struct {
	Rank, World, LocalRank int
}

// Register adds the flags to fs.
func (f *Rank) Register(fs *flag.FlagSet) {
	fs.IntVar(&f.Rank, "rank", -1, SectionJob.Usage("this worker's rank (default: from the launcher's environment, else 0)"))
	fs.IntVar(&f.World, "world-size", -1, SectionJob.Usage("number of workers (default: from the launcher's environment, else 1)"))
	fs.IntVar(&f.LocalRank, "local-rank", -1, SectionJob.Usage("this worker's rank among those on its machine, which picks its GPU (default: from the launcher's environment, else 0)"))
}

// Identity is the worker's place in the job: from the launcher's
// environment, with the flags that are set over it.
func (f *Rank) Identity() (cluster.Identity, error) {
	// -1 is unset; anything below is a mistake, not "unset" (--rank -5
	// ran as rank 0).
	for _, v := range []struct {
		name string
		n    int
	}{{"--rank", f.Rank}, {"--world-size", f.World}, {"--local-rank", f.LocalRank}} {
		if v.n < -1 {
			return cluster.Identity{}, fmt.Errorf("%s %d: want >= 0", v.name, v.n)
		}
	}
	id, err := cluster.FromEnv(os.Getenv)
	if err != nil {
		return cluster.Identity{}, err
	}
	if f.Rank >= 0 {
		id.Rank, id.Source = f.Rank, "flags"
	}
	if f.World >= 0 {
		id.WorldSize, id.Source = f.World, "flags"
	}
	if f.LocalRank >= 0 {
		id.LocalRank = f.LocalRank
	}
	if err := id.Validate(); err != nil {
		return cluster.Identity{}, fmt.Errorf("--rank/--world-size: %w", err)
	}
	return id, nil
}

// validateHosts checks --host-aggregate and --workers-per-host.
func (t *Train) validateHosts() error {
	switch {
	case t.WorkersPerHost < 0:
		return fmt.Errorf("--workers-per-host %d: want >= 1 (or 0 in shoal train: all its workers one host)", t.WorkersPerHost)
	case t.WorkersPerHost > 0 && !t.HostAggregate:
		return fmt.Errorf("--workers-per-host %d: groups the workers for --host-aggregate; give that too, or leave it out", t.WorkersPerHost)
	case !t.HostAggregate:
		return nil
	case t.Mode == consistency.Ring:
		return errors.New("--host-aggregate: for the parameter-server modes (async, sync, ssp); --mode ring allreduces every rank's gradients itself, over shared memory between the ranks of a host (--shared-memory)")
	case t.Overlap:
		return errors.New("--host-aggregate with --overlap-push-pull: a host's workers reduce and push one call at a time, and an overlapped push runs beside the next pull; leave one out")
	}
	return nil
}
