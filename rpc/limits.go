package rpc

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Limits bound what clients can hold of a server.
type Limits struct {
	// StreamsPerConn caps the streams open at once on one connection;
	// a client's further streams wait on its side.
	StreamsPerConn uint32
	// Conns caps the connections open at once; one past it is closed as
	// soon as it is accepted.
	Conns int
	// ConnIdle closes a connection that has had no stream open for this
	// long (a GOAWAY: a gRPC client reconnects when it next calls), so
	// that connections held open and unused do not fill Conns; 0 leaves
	// them open.
	ConnIdle time.Duration
	// Handshake bounds how long a new connection may take to finish its
	// handshake (TLS, where on, and HTTP/2's preface and settings):
	// one that has not by then is closed and gives its place under Conns
	// back, so connections opened and left silent cannot lock the clients
	// out. 0 is DefaultHandshake.
	Handshake time.Duration
}

// DefaultHandshake is Limits.Handshake's default: a client on a loaded
// machine finishes its handshake in well under a second; gRPC's own
// default, 120 s, let 1,024 silent connections hold a shard for two
// minutes.
const DefaultHandshake = 5 * time.Second

// DefaultLimits are shoal ps's: a worker holds a few streams on each of
// its two connections to a shard, and one more connection for each lane
// of a push-pull past the first (up to 4 lanes by default on a machine of
// 8 or more CPUs, one per chunk of the shard's share at most), so 1024
// connections take 204 such workers and 512 of one lane.
var DefaultLimits = Limits{StreamsPerConn: 64, Conns: 1024, ConnIdle: 5 * time.Minute, Handshake: DefaultHandshake}

// ServerOptions are l's gRPC server options, with keepalive enforced: a
// client may ping at most every 5 s (more often gets the connection
// closed with "too many pings"), and the server pings a connection
// quiet for a minute and closes it when the ping is not answered within
// 20 s, so a peer that died does not hold it; l.ConnIdle; and
// l.Handshake.
func (l Limits) ServerOptions() []grpc.ServerOption {
	handshake := l.Handshake
	if handshake <= 0 {
		handshake = DefaultHandshake
	}
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(handshake),
		grpc.MaxConcurrentStreams(l.StreamsPerConn),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second, MaxConnectionIdle: l.ConnIdle}),
	}
}

// Listener caps lis at l.Conns connections open at once: one past the cap
// is closed at once, and logged (at most a line a second) with the
// peer's address and the cap.
func (l Limits) Listener(lis net.Listener, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &capListener{Listener: lis, max: int64(l.Conns), log: log, every: rate.Sometimes{Interval: time.Second}}
}

type capListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused atomic.Int64
	log     *slog.Logger
	every   rate.Sometimes
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); n > l.max {
			l.open.Add(-1)
			refused := l.refused.Add(1)
			l.every.Do(func() {
				l.log.Warn("refused a connection: the server holds as many as its cap", "component", "rpc", "peer", c.RemoteAddr().String(), "cap", l.max, "refused", refused)
			})
			c.Close()
			continue
		}
		return &capConn{Conn: c, l: l}, nil
	}
}

// capConn gives its place back once closed.
type capConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *capConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}
