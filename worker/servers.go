package worker

import (
	"context"
	"time"
)

// ParameterServers is what the parameter-server strategies (Async, Sync)
// need from the servers; package worker/psclient adapts Shoal's client to
// it. A strategy calls it from the worker's goroutine, except that with
// AsyncConfig.Overlap a Push runs on a goroutine of its own while Pull
// runs: an implementation must allow that. Every method may block on the
// network and returns ctx's error once ctx is done.
type ParameterServers interface {
	// Pull reads the weights args.WorkerID needs into dst (the whole
	// vector), waiting on each shard as args.Steps say, and returns each
	// shard's clock. It writes dst only until it returns.
	Pull(ctx context.Context, args PullArgs, dst []float32) (clocks []int64, err error)
	// Push sends each shard its part of args.Grads. It does not keep
	// args.Grads after it returns.
	Push(ctx context.Context, args PushArgs) (PushResult, error)
	// PushPull is a Push and then, in the same round trip, a Pull of the
	// weights after it into args.Dst.
	PushPull(ctx context.Context, args PushPullArgs) (PushPullResult, error)
}

// PullArgs say whose pull it is and what it waits for.
type PullArgs struct {
	WorkerID int64
	// Steps holds, per shard, the step the worker is about to compute:
	// sync shards answer once they applied every step before it, SSP
	// shards once it is within the staleness bound. nil waits for nothing.
	Steps []int64
	// Waited, when not nil, is set to how long the pull was held before
	// any value was read (the longest of any shard).
	Waited *time.Duration
}

// PushArgs is one gradient push.
type PushArgs struct {
	WorkerID int64
	// Step is the worker's step counter, increasing; servers apply each
	// (WorkerID, Step) at most once, which makes retries safe.
	Step int64
	// Clocks are the per-shard clocks of the pull the gradient was
	// computed from.
	Clocks []int64
	// Grads is the whole gradient vector.
	Grads []float32
	// Skip, when not nil, names the shards the push leaves out (and a
	// PushPull's pull: Dst keeps its values there): see client.PushArgs.
	Skip []bool
}

// PushResult is what the shards did with a push.
type PushResult struct {
	// Dropped counts sync shards that had applied the step without this
	// push (a backup worker's late gradient).
	Dropped int
	// Staleness per shard: its clock at arrival minus the pushed clock.
	Staleness []int64
}

// PushPullArgs is a push and the pull after it.
type PushPullArgs struct {
	PushArgs
	// Steps, Dst and Waited are the pull's: see PullArgs.
	Steps  []int64
	Dst    []float32
	Waited *time.Duration
}

// PushPullResult is what the shards did with the push, and the clocks of
// the values pulled into Dst.
type PushPullResult struct {
	PushResult
	PullClocks []int64
}
