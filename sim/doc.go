// Package sim simulates one training job, event by event, to predict how
// the modes compare past the processes one machine can run: N workers
// that compute for a given time per step, S parameter-server shards that
// apply updates at a given rate, and every process behind a NIC of B
// Gbit/s per direction with a one-way latency, the harness's NIC model.
//
// It follows Shoal's own mechanics: the shard plan's chunks dealt over
// the shards; async push-pull, each chunk sent back as soon as the shard
// applied it; sync's barrier (the mean applied once the workers, less
// the backup workers, pushed), then the weights to every waiting worker;
// SSP's bound on the slowest worker's progress; the ring's
// reduce-scatter and allgather, each of the 2(N−1) rounds passing 1/N of
// a bucket to the next rank, the buckets cut at FusionBytes as backward
// produces the gradients (last layers first, each layer after its share
// of backward: Config.LayerWork, else its size) and reduced one after the
// other while backward goes on.
//
// Messages travel in streams, as gRPC's do, in pieces of at most 256 KiB:
// a piece leaves its sender's egress at the line rate and enters its
// receiver's ingress at the line rate, each as soon as it is free (the
// switch buffers between them), and a stream sends its next piece once
// the receiver has begun taking the last. So the streams through one
// NIC share it piece by piece: many workers pushing to one shard share
// its ingress. A shard's chunks go in at most eight messages per push.
// With Config.NICBurst each direction is also a token bucket, as the
// harness's NIC model (internal/netshape) has it: after an idle spell
// that many bytes pass at once. That small gift decides how two workers
// that push together to one shard go on: the first to reach the idle line
// gets ahead, and within a few steps they take turns instead of sharing
// the line in lockstep. Without it (the default, a real line) every byte
// goes at the line rate.
// A parameter-server transfer can cost CPU per byte at each end
// (Config.CPUPerByte: gRPC's framing and copies, the kernel's): the
// sender prepares a message on one core, piece after piece, each piece
// leaving once prepared, and the receiver spends the same on each piece
// once it is in. With Config.HostCores every process shares one host's
// cores for it, as shoal bench train's processes do; else each has one of
// its own. Compute and the shards' optimizer run on cores of their own.
// A planner's what-if at a thousand workers may trade the piece-by-piece
// detail for speed (Config.Pieces, shoal bench plan's DefaultPieces):
// shards with the same chunks become one shard with their NICs and cores
// together, and a message goes in a few large pieces; a test holds that
// answer within 5% of the exact one. The ring needs no events per rank
// and bucket: a step's buckets are reduced in order, each once the last
// rank has it, which is worked out when the step starts.
// In the colocated layout (Config.Colocated, BytePS's) the shards run on
// the workers' hosts and their streams pass those workers' NICs, so a
// host's line carries its worker's push and pull and its shard's share
// of every other worker's; a worker's bytes for the shard of its own
// host cross no NIC. On the fast path the hosts of shards simulated as
// one share them as a pool, each of their workers' pieces also taking
// its time on the pool's lines.
// Per-host aggregation (RunHosts, shoal train --host-aggregate) is the
// job of one worker per host, whose step also pays the host's reduce
// and broadcast by their formula (Hosts.StepSeconds).
// docs/BENCHMARKS.md compares the predictions with measured runs.
package sim
