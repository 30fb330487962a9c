// Package netshape models a network interface card, so that benchmarks of
// parameter servers and workers running as processes on one machine over
// loopback see the bottlenecks of a real cluster.
//
// # Model
//
// Each process creates one NIC. A NIC has a line rate (Config.Gbps) for
// each direction separately: an egress token bucket that every Write of
// every conn it wraps draws from, and an ingress token bucket that every
// Read draws from. A parameter server receiving from N workers is therefore
// limited to Gbps in total, not per connection, as on a real cluster. A NIC
// also delays what it sends by RTT/2, so a request and its response
// between two NICs of the same Config take one RTT on top of their
// transfer time.
//
// A bucket is told when bytes reached the line, not only when the process
// got round to them, so that a process waiting for a core (several
// processes on few cores, as in a benchmark of a cluster on one machine)
// does not lose line time that a real NIC would have used: a NIC sends from
// the socket buffer the process filled and receives into the kernel's queue
// whether or not the process runs.
//
//   - Egress: a Write is split into pieces of at most 256 KiB (never more
//     than Config.Burst) and returns once they are in the conn's transmit
//     queue (Config.Queue, by default max(4 MiB, 2·rate·RTT/2 + Burst)
//     bytes), like a socket send buffer: a Write waits only while the queue
//     is full. The queue's goroutine takes each piece in turn and books it
//     on the egress bucket from when it was queued, or when the piece before
//     it left if that is later; it departs once the bucket has tokens for
//     it, and is written to the underlying conn RTT/2 after. Conns of one
//     NIC take turns a piece at a time. A piece whose departure passed while
//     the process had no core is written at once.
//   - Ingress: a Read reads at most one piece from the underlying conn and
//     returns it once the ingress bucket has tokens for it, booked from when
//     it arrived: bytes that were already waiting in the kernel's receive
//     queue (SIOCINQ, on Linux) count as having come in at line rate, ending
//     now, but not before the queue was last seen empty; bytes that wake a
//     Read waiting on an empty queue count from now. This assumes that
//     peers send no faster than this NIC's line, as in a modelled cluster
//     where every process has the same NIC; a faster peer's burst after a
//     quiet spell still gets only the bucket. Elsewhere, or on conns that
//     are not sockets, bytes count from when the Read took them. A receiver
//     that is held back stops draining the kernel's socket buffer, and TCP
//     flow control slows the senders, as a congested receiver NIC would.
//   - Counting: Sent counts bytes written to the underlying conns (bytes
//     still in a transmit queue are not counted yet), Received counts bytes
//     returned by Read. Both count when the NIC is unlimited too.
//   - Deadlines and Close: a Write waiting for queue space or a Read
//     waiting for tokens honours the conn's deadlines, including deadlines
//     changed while it waits, and returns an error satisfying
//     os.ErrDeadlineExceeded (a net.Error whose Timeout is true); a Write
//     cut short counts the bytes it queued, and they are sent. Bytes in a
//     transmit queue are like bytes in a kernel send buffer: write
//     deadlines no longer apply to them. A Read cut short this way keeps the
//     bytes it had taken from the underlying conn for the next Read, so no
//     data is lost or reordered. Close unblocks every waiter with
//     net.ErrClosed.
//
// Burst is the depth of each bucket: how much passes at once after the link
// was idle. The default, DefaultBurst, is 2 ms at the line rate and at least
// 64 KiB. Go's timers on Linux wake up to about 1 ms late when the process
// is otherwise idle (the netpoller sleeps in whole milliseconds); a busy
// link does not lose those tokens, since pieces are booked from when they
// were queued, but a Read that finds its queue empty does. The price is
// that a transfer starting after an idle period gets its first Burst bytes
// for free, about 2 ms early.
//
// # Limits
//
// This is a rate and latency model, not a network emulator:
//   - No packet loss, reordering, jitter, ECN or congestion control: the
//     only back-pressure is TCP flow control over loopback.
//   - No per-flow fairness beyond the bucket's first-come, first-served
//     order: conns sharing a NIC get tokens in the order they ask, one piece
//     at a time, which is roughly round robin between backlogged conns.
//   - RTT only delays data. Connection set-up is not delayed, and the
//     loopback TCP window does not grow with the RTT, so there is no
//     slow start and no window-limited throughput. The RTT is a path
//     property only if both ends use NICs of the same RTT; a peer without a
//     NIC sees RTT/2.
//   - Latencies are only as precise as Go's timers, which on Linux wake
//     up to about 1 ms late when the process is otherwise idle. Each
//     delayed hop can arrive that late, so a 1-byte ping-pong between two
//     NICs takes about RTT plus a timer's lateness or two (BenchmarkRTT;
//     its figures are in docs/BENCHMARKS.md). RTTs below a few milliseconds are
//     therefore not modelled faithfully; bulk rates are (SelfCheck).
//   - The machine must be able to move the bytes: SelfCheck measures what
//     one stream achieves. On a 2-core machine loopback tops out around
//     20-30 Gbit/s with shaping, so 25 Gbit/s is at the edge.
//   - Wrapped conns are plain net.Conns: *net.TCPConn methods (CloseWrite,
//     SetNoDelay, ...) are not reachable through them.
//
// # Concurrency and ownership
//
// A NIC and its conns are safe for concurrent use. Writes on one conn are
// serialized, so concurrent Writes do not interleave; so are Reads. Write
// does not retain its buffer after it returns. A wrapped conn owns the
// conn it wraps and closes it on Close; closing a conn first delivers what
// is in its transmit queue (giving a peer that does not read 5 s past the
// queue's last departure). NIC.Close unplugs the card: it closes every conn
// it wraps, dropping their queues, stops their goroutines, and makes later
// dials and Accepts fail with ErrNICClosed. A NIC with neither a rate nor
// an RTT starts no goroutines.
//
// # Use
//
// Example (example_test.go) puts a gRPC server and its client behind a NIC
// and runs SelfCheck, as a benchmark's process does.
package netshape
