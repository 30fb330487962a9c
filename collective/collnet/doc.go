// Package collnet provides the network transports of package collective:
// TCP between any two ranks, and shared-memory rings between ranks on one
// machine, found through a torchrun-style rendezvous at rank 0.
//
// # Starting a group
//
// Every rank calls Connect with the same Size, Master and JobID and its
// own Rank (from flags, SHOAL_RANK, Open MPI, Slurm or torchrun: see
// package cluster). Rank 0 serves the rendezvous (gRPC service
// shoal.v1.Rendezvous, proto/shoalpb/collective.proto) on Master, or on a
// listener it was given (ListenMaster, Config.MasterListener: listen on
// port 0 and hand the address to the others). The other ranks dial
// Master, retrying until their context ends, so they may start first.
// Each rank joins with its data-plane address and host id; once all have
// joined, every rank has every address, the lower rank of each pair dials
// the higher one (a handshake carries job id and ranks, checked on
// arrival), and pairs on one host with SharedMemory set up rings. Connect
// returns when all links are up; rank 0 stops serving the rendezvous then.
// Example (example_test.go) forms a group of two ranks on loopback and sums
// a vector over it.
//
// Rendezvous errors are gRPC status errors: InvalidArgument for a world
// size or job id that differs from rank 0's, a rank out of range, or a
// rank claimed by two processes; DeadlineExceeded, shortly before the
// context's deadline, naming the ranks that never joined.
//
// # Data plane
//
// Messages are unframed byte streams, one per direction per pair; a
// receiver knows how many bytes to expect. Over TCP (one connection per
// pair, TCP_NODELAY, socket buffers of Config.SocketBufferBytes) a Send
// writes all of buf and a Recv reads exactly len(buf); no per-byte work is
// done in Go. Over shared memory each ordered pair has a single-producer
// single-consumer ring (Config.RingBytes, 4 MiB by default) in a file
// under /dev/shm, mapped by both processes and unlinked as soon as both
// have mapped it, so nothing is left behind even by a killed process.
// Send copies into the ring as room frees up, Recv copies out, in chunks
// of 64 KiB so that the two copies overlap. A side that must wait spins,
// then yields, then sleeps on a futex in the ring that the other side
// wakes (a few tens of microseconds; Go's time.Sleep oversleeps
// sub-millisecond sleeps many times over: docs/BENCHMARKS.md, "Figures that lived in code comments"). Each rank maps two rings
// per peer on its host: with 8 ranks on a host and 4 MiB rings that is
// 56 rings, 224 MiB of /dev/shm (docker's default /dev/shm is 64 MiB;
// space is reserved at setup, and a pair that cannot have it, or whose
// rings would leave less than a quarter of the machine's memory
// available, falls back to TCP). Shared memory is Linux only; elsewhere every pair uses TCP.
//
// # Failures
//
// A call fails with a *collective.PeerError naming the peer when the peer
// is gone (its connection ended, by Close, a crash or a kill); bytes it
// sent before are still delivered. In shared-memory mode the pair's TCP
// connection stays open, carrying nothing, only to tell that the peer is
// gone. A call returns its context's error when the context ends first
// (the deadline is set on the connection, and a cancellation interrupts
// blocked I/O). A call cut short in the middle of a message leaves that
// direction of the pair out of step: later calls on it fail with
// ErrInterrupted. After Close, calls fail with ErrClosed.
//
// # Concurrency and ownership
//
// As collective.Transport requires: Sends to different peers, Recvs from
// different peers, and a Send and a Recv with one peer may run
// concurrently; two Sends to one peer (or two Recvs from one) may not.
// Buffers are the caller's; a Send reads buf and a Recv writes it only
// until the call returns. The transport's goroutines (one watcher per
// shared-memory peer) are stopped and waited for by Close, which also
// waits for calls in progress to return.
package collnet
