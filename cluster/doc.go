// Package cluster finds a process's place in a job and tells it who else
// is alive.
//
// FromEnv reads a process's rank, the world size and its local rank from
// flags or from the environment variables of the launchers people already
// use (Shoal's own SHOAL_*, Open MPI's mpirun, Slurm's srun, torchrun). It
// is pure: it reads the environment through a function the caller passes
// (os.Getenv in main). ExampleFromEnv reads the identity srun gives a
// process.
//
// Membership is the gossip side (DESIGN.md, "Membership and faults"),
// built in three layers:
//
//   - Meta is what a node gossips about itself: role, rank or shard, gRPC
//     and data-plane addresses, model fingerprint, plan version. Its
//     encoding is versioned and at most 512 bytes, memberlist's cap.
//   - Tracker is a plain state machine (no goroutines, clocks or locks)
//     that turns join, update, leave and dead events into versioned Views:
//     the live members sorted by role then rank, and who joined, came back,
//     changed, left or died. Code that reacts to membership is tested by
//     driving a Tracker, without sockets.
//   - Membership runs hashicorp/memberlist and feeds its events to a
//     Tracker. Config.Detection sets the failure-detection timings:
//     LoopbackDetection (the default) declares a silent death in about
//     1.3 s among three nodes, LANDetection aims at 5 s. A process
//     restarted under its name at a new address is taken back once its old
//     self has been dead for DeadNodeReclaimTime. A node cut off from the
//     network for longer than GossipToTheDeadTime comes back when the
//     network does: every ReconnectInterval each node tries to join one
//     member it saw die (Serf's reconnect), so the two sides' views meet
//     again. Config.KeyFile turns on
//     AES-256 gossip encryption; a node with another key is not admitted.
//   - Changes lists a view's joins, rejoins, leaves and deaths for one role
//     of one job (by model Fingerprint), and FollowWorkers applies the
//     workers' deaths and leaves to a WorkerSet (a ps.Server) as views
//     arrive: pure code, tested with views from a channel. Done tells
//     from those reports when every worker is done; FollowShards moves
//     a client to a shard's newly gossiped address.
//   - Follow runs a consumer of a Membership's views on a goroutine it
//     owns and returns what leaves and waits for it; JoinRetrying joins
//     peers that may still be starting.
//
// Concurrency and ownership: a Membership's methods may be called from any
// goroutine. It owns memberlist's goroutines, the reconnect loop, and one
// that sends
// Views, in version order, on the channel Views returns; views queue while
// the reader is busy, so someone must keep reading. Close stops everything
// and closes the channel; call Leave first to be seen leaving rather than
// dying. A View received is the receiver's to keep or change.
//
// ExampleMembership (example_test.go) joins a worker to a server on
// loopback and prints the view they agree on.
package cluster
