package rpc

import (
	"container/list"
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/stats"

	"github.com/shoalml/shoal/secure"
)

// Limits bound what clients can hold of a server.
type Limits struct {
	// StreamsPerConn caps the streams open at once on one connection;
	// a client's further streams wait on its side.
	StreamsPerConn uint32
	// Conns caps the connections open at once; one past it takes the
	// place of the oldest still in its handshake, else of the quietest
	// that never carried a call that succeeded and has none in flight, or
	// is closed as soon as it is accepted when there is neither
	// (Listener).
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
// l.Handshake; and the stats handler that tells Listener which
// connections carry calls.
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
		grpc.StatsHandler(connCalls{}),
	}
}

// Listener caps lis at l.Conns connections open at once. A connection
// that comes when the cap is reached takes the place of one still in its
// handshake, which is closed: the oldest that has sent nothing (no byte
// read, none waiting in its socket's receive queue), else the oldest.
// Connections opened and left silent, even reopened as fast as the server
// closes them, then cannot keep a client out: a real client sends its
// first bytes as soon as it connects, so its connection is never taken
// while a silent one is held, and its handshake is done soon after. Only
// when every connection held is past its handshake does the one past the
// cap take the place of one past it: of a connection with no call in
// flight that has never carried a call that succeeded, the one quiet
// longest (since its handshake or its last call's end). A connection
// that completed its HTTP/2 handshake and never calls (possible without
// a credential where the token is checked per call, not per connection)
// therefore cannot hold its place against a new one until ConnIdle,
// while a worker's connection is never taken: its first call goes out
// with its handshake, and once a call succeeded on it (or while one is
// in flight, a push-pull waiting at a barrier included) it is never
// replaced. Only calls that needed the token count (connCalls.TagRPC):
// the health service is served without one, so a connection whose only
// calls were health Checks, or that holds a health Watch open, counts as
// one that never carried a call. Only when no connection can give its
// place is the one past the cap closed at once. Each is logged (at most a line a second each)
// with the peer's address, the cap and the count so far. The calls are
// counted by ServerOptions' stats handler: a server without it never
// replaces a connection past its handshake.
//
// A connection is past its handshake once the server clears its deadline:
// gRPC's server sets one for the handshake (Limits.Handshake) and clears
// it once the handshake is done; a connection whose deadline is never
// cleared (no gRPC server, or a silent peer) stays in its handshake.
func (l Limits) Listener(lis net.Listener, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &capListener{Listener: lis, max: l.Conns, log: log, pending: list.New(), done: list.New(),
		everyRefused: rate.Sometimes{Interval: time.Second}, everyReplaced: rate.Sometimes{Interval: time.Second}}
}

type capListener struct {
	net.Listener
	max int
	log *slog.Logger

	mu                sync.Mutex
	open              int        // connections held
	pending           *list.List // of *capConn: those in their handshake, oldest first
	done              *list.List // of *capConn: those past it, in the order they got there
	refused, replaced int64

	everyRefused, everyReplaced rate.Sometimes
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		cc := &capConn{Conn: c, l: l}
		var old *capConn
		l.mu.Lock()
		if l.open >= l.max {
			e := l.victimLocked()
			if e == nil {
				l.refused++
				refused := l.refused
				l.mu.Unlock()
				l.everyRefused.Do(func() {
					l.log.Warn("refused a connection: the server holds as many as its cap, each past its handshake", "component", "rpc", "peer", c.RemoteAddr().String(), "cap", l.max, "refused", refused)
				})
				c.Close()
				continue
			}
			// The new connection takes old's place: old no longer counts.
			old = e.Value.(*capConn)
			old.list.Remove(e)
			old.elem, old.list, old.released = nil, nil, true
			l.forgetLocked(old)
			l.replaced++
		} else {
			l.open++
		}
		cc.elem, cc.list = l.pending.PushBack(cc), l.pending
		cc.key = connKey(c.LocalAddr(), c.RemoteAddr())
		conns.Store(cc.key, cc)
		replaced := l.replaced
		l.mu.Unlock()
		if old != nil {
			old.Conn.Close()
			l.everyReplaced.Do(func() {
				l.log.Warn("closed a connection still in its handshake, or past it and never carrying a call, to take a new one: the server holds as many as its cap", "component", "rpc",
					"peer", old.RemoteAddr().String(), "new", c.RemoteAddr().String(), "cap", l.max, "closed", replaced)
			})
		}
		return cc, nil
	}
}

// maxScan bounds how many connections in their handshake an accept looks
// at for a silent one (a system call each).
const maxScan = 64

// victimLocked is the connection whose place a new one takes: the oldest
// silent one in its handshake among the first maxScan, else the quietest
// past its handshake that never carried a call (quietLocked), else the
// oldest in its handshake; nil when there is none. One past its handshake
// comes before one in its handshake that has spoken, which may be a real
// client's: a flood of connections that finish their handshake then does
// not take a real client's still in its own.
func (l *capListener) victimLocked() *list.Element {
	i := 0
	for e := l.pending.Front(); e != nil && i < maxScan; e, i = e.Next(), i+1 {
		c := e.Value.(*capConn)
		if c.spoke.Load() {
			continue
		}
		if n, ok := queued(c.Conn); ok && n > 0 {
			continue
		}
		return e
	}
	if e := l.quietLocked(); e != nil {
		return e
	}
	return l.pending.Front()
}

// quietLocked is the connection past its handshake whose place a new
// one takes: of those with no call in flight that never carried one that
// succeeded, the one quiet longest; nil when there is none. Only
// connections whose calls connCalls counts are candidates.
func (l *capListener) quietLocked() *list.Element {
	var best *list.Element
	var bestQuiet int64
	for e := l.done.Front(); e != nil; e = e.Next() {
		c := e.Value.(*capConn)
		if !c.counted.Load() || c.inFlight.Load() > 0 || c.served.Load() {
			continue
		}
		if q := c.quiet.Load(); best == nil || q < bestQuiet {
			best, bestQuiet = e, q
		}
	}
	return best
}

// forgetLocked drops c from the connections the stats handler finds.
func (l *capListener) forgetLocked(c *capConn) {
	conns.CompareAndDelete(c.key, c)
}

// conns maps a connection's local and remote addresses to its *capConn,
// for connCalls: grpc's stats handler is given a connection's addresses,
// not the net.Conn, and the handler (ServerOptions) is built apart from
// the listener. Two connections open at once never share both addresses.
var conns sync.Map

func connKey(local, remote net.Addr) string {
	return local.String() + " " + remote.String()
}

// connCalls is the stats handler that counts, per connection a capListener
// accepted, the calls in flight, whether one ever succeeded, and when the
// last ended: only calls that needed the token (TagRPC).
type connCalls struct{}

type connCallsKey struct{}

func (connCalls) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	if info.LocalAddr == nil || info.RemoteAddr == nil {
		return ctx
	}
	if v, ok := conns.Load(connKey(info.LocalAddr, info.RemoteAddr)); ok {
		c := v.(*capConn)
		c.counted.Store(true)
		return context.WithValue(ctx, connCallsKey{}, c)
	}
	return ctx
}

func (connCalls) HandleConn(context.Context, stats.ConnStats) {}

// TagRPC hides the connection from HandleRPC for a call to a method
// served without the token (secure.Open: the health service): such a call
// proves nothing of its caller, so it neither marks its connection as one
// that carried a call that succeeded nor keeps it while in flight (a
// health Watch stays open as long as its caller likes). Every other call
// that reaches a stats handler has passed the token check where the
// server has one (the check is a tap, run before the call is handed to
// the server), so a connection counts as carrying a real call only once
// one of those succeeded, or while one is in flight.
func (connCalls) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if secure.Open(info.FullMethodName) {
		if _, ok := ctx.Value(connCallsKey{}).(*capConn); ok {
			return context.WithValue(ctx, connCallsKey{}, (*capConn)(nil))
		}
	}
	return ctx
}

func (connCalls) HandleRPC(ctx context.Context, s stats.RPCStats) {
	c, _ := ctx.Value(connCallsKey{}).(*capConn)
	if c == nil {
		return
	}
	switch s := s.(type) {
	case *stats.Begin:
		c.inFlight.Add(1)
	case *stats.End:
		if s.Error == nil {
			c.served.Store(true)
		}
		c.quiet.Store(time.Now().UnixNano())
		c.inFlight.Add(-1)
	}
}

// capConn gives its place back once closed, and moves from the list of
// those in their handshake to that of those past it once its deadline is
// cleared.
type capConn struct {
	net.Conn
	l        *capListener
	key      string        // connKey, in conns while open
	elem     *list.Element // in list; under l.mu
	list     *list.List    // l.pending, l.done, or nil once its place is given back; under l.mu
	released bool          // its place is given back (closed, or taken); under l.mu
	spoke    atomic.Bool   // a read returned bytes

	counted  atomic.Bool  // connCalls counts its calls: without, it is never taken past its handshake
	inFlight atomic.Int32 // calls begun and not ended
	served   atomic.Bool  // a call ended without error
	quiet    atomic.Int64 // when it last went quiet (handshake done, or a call ended), in Unix ns
}

func (c *capConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.spoke.Load() {
		c.spoke.Store(true)
	}
	return n, err
}

func (c *capConn) SetDeadline(t time.Time) error {
	if t.IsZero() {
		c.l.mu.Lock()
		if c.list == c.l.pending {
			c.l.pending.Remove(c.elem)
			c.quiet.Store(time.Now().UnixNano())
			c.elem, c.list = c.l.done.PushBack(c), c.l.done
		}
		c.l.mu.Unlock()
	}
	return c.Conn.SetDeadline(t)
}

func (c *capConn) Close() error {
	c.l.mu.Lock()
	if !c.released {
		c.released = true
		c.l.open--
		if c.list != nil {
			c.list.Remove(c.elem)
			c.elem, c.list = nil, nil
		}
		c.l.forgetLocked(c)
	}
	c.l.mu.Unlock()
	return c.Conn.Close()
}
