// Package ps is the core of a parameter-server shard: the values of the
// ranges of the flat parameter vector it owns, their optimizer state, the
// consistency mode, deduplication of pushes and the shard's clock. It does no
// network I/O; the gRPC adapter in package rpc drives it.
//
// Concurrency: a Server is safe for concurrent use. One mutex guards its
// state: pushes are applied one at a time under it (each a short optimizer
// step over the shard's floats), and reads and snapshots copy under it, so
// each sees whole updates and none runs alongside a push or another read.
// Calls that wait for other workers (WaitToRead, a sync push for the next
// step) let go of it while they wait; they end with an ErrWaitTimeout that
// also wraps the context's error when the context ends or MaxWait passes
// first. The sync barrier (barrier.go) is a plain state machine that the
// Server drives under its mutex.
//
// Modes (applier.go): New picks one applier for Config.Mode, and it
// alone says what a push, a pull and a change of membership mean there:
// async.go (Downpour: apply at once; a push-pull reads each chunk right
// after its update), sync.go (the barrier: one mean step per round),
// ssp.go (apply at once, scaled by 1/N; pulls wait within the bound).
// How async and SSP apply a push is the update rule (update.go,
// Config.Update): full rate, 1/N, 1/staleness or delay-compensated, with
// staleness counted from the shard's own clock of the last whole read it
// served the worker (ViewFor, SnapshotFor, a push-pull's read), never
// from the worker's word alone. Config.ScaleLR multiplies the learning
// rate by the live world size at each update (the linear scaling rule).
// Config.LocalSteps (DiLoCo) makes the pushes pseudo-gradients of H local
// steps and the optimizer the outer one; sync and async apply them with
// their own applier unchanged, and async refuses one from an outer step
// the shard has not reached. Config.Fragments (Streaming DiLoCo) cuts
// the vector into fragments of whole rows of the plan: a push carries one
// fragment's chunks, the sync barrier is per exchange (exchange e is
// fragment e mod F), and the outer optimizer's state is per chunk, so
// per fragment (fragment.go). In async, outer momentum on every arriving
// pseudo-gradient diverges; optim.DelayedNesterov (Liu et al.) is the
// outer optimizer for it, its delay defaulting to Workers (Config.Delay)
// and its update rule to full (UpdateConfig.ResolveFor).
// PushPull is the one entry point of a push-pull in every mode; the
// gradient's finiteness and magnitude scan is Scan, which a decoder runs
// piece by piece as the pieces arrive (Push.Scan) and the shard otherwise
// runs itself, never both.
//
// Membership (members.go): sync and SSP wait only for the live workers.
// WorkerGone takes out a worker that died or left (cluster.FollowWorkers
// calls it from gossip views): a sync step held up only by it completes
// with the pushes that arrived. Join admits a worker that starts or comes
// back and names the step it begins at; the barrier keeps, per worker, the
// first step it takes part in.
//
// Sessions (session.go): Join binds the worker id to its caller with a
// session, which every later push (Push.Session) and worker pull
// (CheckPull) must carry; a new join replaces it, and a call without the
// current one is refused (ErrNoSession, ErrWrongSession) and counted. A
// join names no step past what the id's earlier sessions' pushes could
// have reached, so another client's pushes cannot make a worker skip its
// own steps.
//
// Durability (checkpoint.go, journal.go): with a CheckpointDir a shard
// checkpoints every CheckpointEvery updates and resumes from the newest
// usable checkpoint; with Journal it also appends every update to a
// journal before applying it and replays it at start, so a killed shard
// loses no acknowledged update. Both hold the update rule's state (when
// each worker was served and, for DC-ASGD, what), so that a restarted
// shard goes on with the same computation.
//
// Ownership: Push does not retain the caller's slices; Read and Snapshot
// copy values into the caller's buffer; a ChunkReader gets the shard's own
// values, under its lock, and either copies what it keeps or holds them
// (ChunkRead.Hold) until it is done: the shard then writes the next
// update of the chunk into another buffer (copy-on-write).
//
// Example (example_test.go) serves reads of a shard, joins a worker and
// applies its push.
package ps
