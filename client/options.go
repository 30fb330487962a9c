package client

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	pb "github.com/shoalml/shoal/proto/shoalpb"
)

type options struct {
	transport   pb.Transport
	encoding    pb.Encoding
	callTimeout time.Duration
	maxAttempts int // 0: no cap, retryFor alone bounds the retries
	retryFor    time.Duration
	backoff     time.Duration
	maxBackoff  time.Duration
	keepalive   keepalive.ClientParameters
	dialOpts    []grpc.DialOption
	lanes       int
	notice      func(addr string, err error)
	noticeAfter time.Duration
}

// Option configures a Client.
type Option func(*options)

// WithCallTimeout bounds each call (default 60s) unless the context's own
// deadline is earlier.
func WithCallTimeout(d time.Duration) Option { return func(o *options) { o.callTimeout = d } }

// WithPushEncoding sends pushed gradients as float16 or bfloat16 (half
// the bytes); servers add them in float32. Float16 turns values beyond
// 65504 into Inf, which servers refuse; bfloat16 keeps float32's range.
// INT8 (a quarter of the bytes, a scale per wire.Int8Block values) is
// for pseudo-gradients: servers without local steps refuse it.
func WithPushEncoding(e pb.Encoding) Option { return func(o *options) { o.encoding = e } }

// WithRetryFor sets how long a call failing with Unavailable is tried
// again, with backoff, counted from its first try (default 60s: long
// enough for a server to restart from its checkpoint, or a network cut of
// under a minute to heal, for the call to go on where it was). A call
// still failing then returns its last error.
func WithRetryFor(d time.Duration) Option { return func(o *options) { o.retryFor = d } }

// WithKeepalive sets how long a connection may go without reading a byte
// before the client pings the server (gRPC allows no less than 10s), and
// how long it then waits for the answer before it closes the connection
// (defaults 10s and 10s). A network cut or a server host that vanished
// resets nothing: without the ping a call on such a connection waits for
// its whole timeout and fails with DeadlineExceeded, which is not tried
// again. With it the call fails with Unavailable after about time+timeout
// and is tried again on a new connection (WithRetryFor); shards recognise
// a retried push and apply it once. shoal ps accepts pings every 5s.
func WithKeepalive(time, timeout time.Duration) Option {
	return func(o *options) { o.keepalive = keepalive.ClientParameters{Time: time, Timeout: timeout} }
}

// WithRetry caps how many times a call failing with Unavailable is tried
// within WithRetryFor's time (default: no cap), and sets the first backoff
// (default 50ms, doubling to 2s, with jitter).
func WithRetry(attempts int, backoff time.Duration) Option {
	return func(o *options) { o.maxAttempts, o.backoff = attempts, backoff }
}

// MaxLanes bounds WithLanes (the servers refuse more: rpc.MaxLanes).
const MaxLanes = 16

// ManyCores is where the parameter-server path's parallel defaults turn
// on: AutoLanes here and ps.AutoParallelStep. On many cores, lanes over a
// server's chunks and its parallel step speed up a push-pull; on two
// cores neither gained beyond the noise (docs/BENCHMARKS.md). Between 2
// and 16 CPUs nothing was measured: 8 is the middle.
const ManyCores = 8

// AutoLanes is how many lanes a worker opens to each server when it is
// not told (shoal worker --lanes 0), on a machine of cpus CPUs: 4 where
// it has ManyCores or more, else 1. A worker never opens more lanes to a
// server than the server's share has chunks.
func AutoLanes(cpus int) int {
	if cpus >= ManyCores {
		return 4
	}
	return 1
}

// WithLanes splits each PushPull to a shard over up to k streams, each on
// a connection of its own, every stream carrying a consecutive run of the
// shard's chunks (at most one lane per chunk): several connections'
// readers and writers, and the server's handlers, then share the step's
// bytes. k 1 (the default) is one stream per shard. Push and Pull always
// use one stream.
func WithLanes(k int) Option { return func(o *options) { o.lanes = k } }

// WithTransport sizes the connections' flow-control windows and buffers
// (default shoalpb.DefaultTransport; the zero Transport is gRPC's own
// defaults).
func WithTransport(t pb.Transport) Option { return func(o *options) { o.transport = t } }

// WithDialOptions adds gRPC dial options (credentials, a custom dialer…).
// Without credentials the connection is plaintext. Push reuses one buffer
// for the pieces it sends (gRPC encodes each message before Send returns),
// so a stats handler that reads messages after Send returns would see the
// buffer overwritten.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// WithConnectNotice has Dial call f, while it keeps trying, with why a
// server cannot be reached (connection refused, no such host, a TLS
// mismatch), once it has tried for after and then whenever the reason
// changes or 15 s have passed: a worker can say at once what a connect
// timeout of minutes would otherwise say only at its end.
func WithConnectNotice(after time.Duration, f func(addr string, err error)) Option {
	return func(o *options) { o.notice, o.noticeAfter = f, after }
}
