package netshape

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// ErrNICClosed is returned by a closed NIC's Listener and dialers. It
// wraps net.ErrClosed.
var ErrNICClosed = fmt.Errorf("netshape: NIC is closed: %w", net.ErrClosed)

// NIC is one process's network card: an egress and an ingress token bucket
// shared by every conn it wraps, an optional one-way delay on what it
// sends, and byte counters. Its methods are safe for concurrent use.
type NIC struct {
	cfg   Config
	chunk int
	out   *line     // egress; nil when unlimited
	in    *line     // ingress; nil when unlimited
	pool  sync.Pool // *[]byte of cap chunk, for delay-line pieces

	sent, received atomic.Int64

	mu     sync.Mutex
	conns  map[*conn]struct{}
	closed bool
}

// New returns a NIC for cfg, or an error wrapping ErrInvalidConfig that
// says which field is wrong.
func New(cfg Config) (*NIC, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &NIC{cfg: cfg, chunk: cfg.chunk(), conns: make(map[*conn]struct{})}
	if cfg.Gbps > 0 {
		r := bytesPerSecond(cfg.Gbps)
		n.out = newLine(r, cfg.burst())
		n.in = newLine(r, cfg.burst())
		if cfg.HostFile != "" {
			clocks, err := mapHostFile(cfg.HostFile)
			if err != nil {
				return nil, fmt.Errorf("netshape: the host's NIC in %s: %w", cfg.HostFile, err)
			}
			n.out.shared, n.in.shared = &clocks[0], &clocks[1]
		}
	}
	n.pool.New = func() any {
		b := make([]byte, 0, n.chunk)
		return &b
	}
	return n, nil
}

// Config returns the NIC's configuration.
func (n *NIC) Config() Config { return n.cfg }

// Conn wraps c: its Writes go through a transmit queue paced by the NIC's
// egress bucket (and are delayed RTT/2), its Reads take ingress tokens. The returned conn owns c and closes
// it on Close. On a closed NIC the returned conn is already closed.
func (n *NIC) Conn(c net.Conn) net.Conn {
	sc := newConn(n, c)
	n.mu.Lock()
	closed := n.closed
	if !closed {
		n.conns[sc] = struct{}{}
	}
	n.mu.Unlock()
	if closed {
		sc.abort()
	}
	return sc
}

// forget drops c from the NIC's set of open conns.
func (n *NIC) forget(c *conn) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
}

func (n *NIC) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// Listener wraps l so that the conns it accepts are shaped by n. Closing
// the returned listener closes l; closing n does not.
func (n *NIC) Listener(l net.Listener) net.Listener { return &listener{Listener: l, nic: n} }

type listener struct {
	net.Listener
	nic *NIC
}

// Accept waits for the next conn of the underlying listener and wraps it.
// On a closed NIC it closes that conn and returns ErrNICClosed.
func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.nic.isClosed() {
		c.Close()
		return nil, ErrNICClosed
	}
	return l.nic.Conn(c), nil
}

// DialContext returns a dial function (the shape of net.Dialer.DialContext
// and http.Transport.DialContext) whose conns are shaped by n. A nil d
// means a zero net.Dialer. Connection set-up is not delayed by the RTT.
func (n *NIC) DialContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if d == nil {
		d = &net.Dialer{}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if n.isClosed() {
			return nil, ErrNICClosed
		}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return n.Conn(c), nil
	}
}

// ContextDialer is DialContext for "tcp", in the shape
// grpc.WithContextDialer takes.
func (n *NIC) ContextDialer(d *net.Dialer) func(ctx context.Context, addr string) (net.Conn, error) {
	dial := n.DialContext(d)
	return func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, "tcp", addr) }
}

// Sent returns the bytes the NIC's conns have written to their underlying
// conns so far. Bytes still in a transmit queue are not counted yet.
func (n *NIC) Sent() int64 { return n.sent.Load() }

// Received returns the bytes the NIC's conns have returned from Read so far.
func (n *NIC) Received() int64 { return n.received.Load() }

// Close unplugs the NIC: it closes every conn it wraps that is still open,
// dropping what is on their delay lines, and waits for their goroutines to
// stop. Later Accepts and dials fail with ErrNICClosed and later Conn
// calls return closed conns. Close is idempotent and returns nil.
func (n *NIC) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	conns := make([]*conn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	for _, c := range conns {
		c.abort()
	}
	return nil
}
