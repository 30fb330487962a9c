// Package collective is Shoal's collective-communication library, in the
// shape of Horovod's and MPI's: a Communicator offers Allreduce (sum,
// average, min, max, AdaSum), Broadcast, Allgather, ReduceScatter,
// Alltoall and Barrier over a small Transport that moves bytes between
// ranks. Allreduce is a ring: reduce-scatter then allgather, each rank
// sending 2(N−1)/N of the data, with the buffer cut into segments
// (Config.SegmentBytes) that are pipelined so sending, receiving and
// summing overlap: a sender goroutine forwards segment j as soon as the
// caller's goroutine has received and reduced it. Config.Algorithm Tree
// makes it recursive doubling instead (log2 N rounds of the whole buffer,
// each a swap with one peer: the latency-logarithmic choice for short
// buffers on many ranks); Hierarchical groups the ranks by host (the
// Transport's HostLocator: collnet's host ids) and runs Horovod's
// hierarchical allreduce, a reduce-scatter within each host, an allreduce
// of each block across the hosts by the ranks that hold it (all of a
// host's ranks at once, each on its own cross-host ring), an allgather
// within each host (the flat ring where hosts differ in size); Auto picks
// by ChooseAlgorithmOnHosts's α-β model.
//
// Transports: an in-memory one for tests (NewMemGroup), and network ones
// in package collective/... (TCP and shared memory), all passing the one
// conformance suite in collective/collectivetest.
//
// Wire: float32 travels as little-endian bytes (on little-endian hosts the
// caller's slice itself, without copying), or as float16 or bfloat16 when
// Config.Compression asks, always accumulated in float32; the encodings
// are package wire's, the same as a parameter server's. No Send carries
// more than SegmentBytes bytes.
//
// Concurrency: a Communicator runs one collective at a time (a concurrent
// call fails); calls must be made in the same order, with matching sizes,
// on every rank (as in MPI). Every call takes a context: a dead or silent
// peer ends the call with a *PeerError naming it, or with ctx's error at
// the deadline, never a hang. Ranks that exchange data with the dead peer
// see it directly (in Barrier and Alltoall, every rank); in the ring
// collectives the others see the failure when the ranks that saw it close
// their transports, as a worker does on any collective error. A
// collective that fails part-way leaves the byte streams out of step: the
// Communicator then answers ErrBroken, and the group must be formed again.
//
// Ownership: buffers are the caller's; a collective reads and writes them
// only until it returns. A Communicator keeps grow-only scratch buffers
// (about one segment, plus one vector for ReduceScatter and
// AllreduceAdasum), so a warm Allreduce allocates a few small objects per
// call and nothing per segment.
//
// Example (example_test.go) averages gradients over four ranks, one
// goroutine each.
package collective
