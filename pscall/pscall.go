package pscall

import "time"

// Clocks holds one clock per shard, in shard order: the version of the
// values a pull returned, passed back with the push computed from them
// (PullArgs.Steps: one step per shard).
type Clocks []int64

// PullArgs say whose pull it is and what it waits for.
type PullArgs struct {
	WorkerID int64
	// Steps holds, per shard, the step the worker is about to compute:
	// sync shards answer once they applied every step before it, SSP
	// shards once it is within the staleness bound. nil waits for nothing.
	Steps Clocks
	// Waited, when not nil, is set to how long the pull was held before
	// any value was read: the longest any shard says it held it (a sync
	// barrier, the SSP bound).
	Waited *time.Duration
}

// PushArgs is one gradient push.
type PushArgs struct {
	WorkerID int64
	// Step is the worker's step counter, increasing; servers apply each
	// (WorkerID, Step) at most once, which makes retries safe.
	Step int64
	// Clocks are those returned by the pull the gradient was computed
	// from, one per shard.
	Clocks Clocks
	// Grads is the whole gradient vector (len Plan.VectorLen).
	Grads []float32
	// Skip, when not nil (one per shard), names the shards the call
	// leaves out: none of Grads goes to them, a PushPull reads nothing
	// from them (Dst keeps its values in their shares), and their entries
	// in the result are zero. A sync worker skips the shards that already
	// applied every step of its run.
	Skip []bool
	// Span, when not empty, is the part of the vector the call covers (a
	// fragment of Streaming DiLoCo): only Grads' values in it go out,
	// each shard getting its chunks inside it, and a PushPull reads back
	// only those into Dst (which keeps its other values). Its ends lie on
	// chunk boundaries. A shard with no chunk inside it is left out, as
	// by Skip.
	Span Span
}

// Span is the part [Off, End) of the vector, in floats; the zero Span is
// the whole vector.
type Span struct {
	Off, End int
}

// Skips says whether a leaves shard s out.
func (a PushArgs) Skips(s int) bool { return a.Skip != nil && a.Skip[s] }

// PushResult says what the shards did with a push.
type PushResult struct {
	// Clocks after the push, per shard.
	Clocks Clocks
	// Duplicates counts shards that had already applied this step.
	Duplicates int
	// Dropped counts sync shards that had applied the step without this
	// push (a backup worker's late gradient).
	Dropped int
	// Staleness per shard: its clock at arrival minus the pushed clock.
	Staleness []int64
}

// PushPullArgs is one step of a worker in one round trip per shard: a push
// and, when Pull is set, the weights after it.
type PushPullArgs struct {
	PushArgs
	// Pull reads the whole vector into Dst (len Plan.VectorLen) after the
	// push, waiting on each shard as Steps say (see PullArgs).
	Pull  bool
	Steps Clocks
	Dst   []float32
	// Waited, when not nil, is set to the longest any shard held the pull.
	Waited *time.Duration
}

// PushPullResult says what the shards did with the push, and the clocks
// of the values pulled.
type PushPullResult struct {
	PushResult
	// PullClocks holds, per shard, the clock of the values written into
	// Dst (when Pull).
	PullClocks Clocks
}
