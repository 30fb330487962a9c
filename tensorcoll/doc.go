// Package tensorcoll runs package collective's collectives on typed
// tensor memory handed over by another runtime (PyTorch through the C ABI
// of cmd/libshoal): a Session is one process's place in a ring, formed
// through collnet's rendezvous, that reduces, broadcasts and gathers raw
// byte buffers of a stated dtype, in the order they were submitted, on one
// goroutine of its own.
//
// Forming the group: Open connects through collnet (Config.Master is
// rank 0's rendezvous) and sets LocalRank and LocalSize from the ranks'
// host ids, as Horovod does; ConfigFromEnv reads rank, size and master
// from the launcher's environment as Shoal's workers do (package cluster).
//
// Data types: float32 is reduced in place over the ring; float16 and
// bfloat16 are widened to float32, reduced over the ring (accumulated in
// float32) and narrowed back; float64 and the integer types are gathered
// from every rank and reduced locally in their own type, in rank order,
// so the result is exact and the same on every rank (each rank receives
// N times the data: meant for the small tensors, such as counters, that
// these types usually hold). Broadcast and Allgather move bytes as they
// are, whatever the dtype.
//
// Checking: before each collective the ranks exchange a descriptor (kind,
// name, dtype, element count, op, compression, root), unless
// Config.SkipCheck; a collective that differs between ranks fails on
// every rank with an *MismatchError listing what each rank submitted,
// instead of hanging or mixing unrelated tensors. The exchange also gives
// Allgather every rank's size.
//
// Failures: a collective that fails part-way (a dead or silent peer, the
// call deadline Config.CallTimeout) breaks the Session: it reports the
// failure to rank 0's record (collnet.FirstFailure), closes its transport
// so that ranks further along the ring fail promptly too, and answers
// every later request with ErrBroken wrapping the first failure.
//
// Concurrency and ownership: Submit may be called from any goroutine; the
// requests run one at a time in submission order, and every rank must
// submit the same sequence. A request's Data is read and written by the
// Session until its Op is done; the caller must keep it alive and not
// touch it until then. Close stops the goroutine and waits for it.
//
// Example (example_test.go) averages a float32 vector over two ranks.
package tensorcoll
