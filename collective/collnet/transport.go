package collnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/secure"
)

// ErrClosed is returned by calls on a transport after its Close (and by
// calls that Close interrupted).
var ErrClosed = errors.New("collnet: transport closed")

// ErrInterrupted is returned by calls on a direction of a link (a Send to
// a peer, or a Recv from it) after an earlier call on it ended part-way
// through a message (its context ended): the byte stream is out of step
// and the pair cannot be used again.
var ErrInterrupted = errors.New("collnet: stream out of step after an interrupted transfer")

// transport is one rank's end of a group: a link per peer, each over TCP
// or over a pair of shared-memory rings.
type transport struct {
	rank, size int
	log        *slog.Logger
	links      []*link  // by rank; nil for this rank
	hosts      []string // by rank: the host ids the ranks joined with

	closed atomic.Bool
	// ops holds a read lock for each call in progress; Close takes the
	// write lock to wait for them before unmapping rings.
	ops     sync.RWMutex
	closeMu sync.Mutex // serializes Close
	wg      sync.WaitGroup

	// The job's record of failures (FirstFailure): served by rank 0 (rv,
	// stopped at Close), reached at master by the others.
	master         string
	jobID          string
	rv             *rendezvous
	stopRendezvous func()
	sec            *secure.Credentials
}

// link is the connection to one peer.
type link struct {
	peer int
	conn *net.TCPConn
	data net.Conn // conn, Config.WrapData's wrapper of it, or TLS over that: what Send and Recv use
	// ctl is what the handshake went over, and the shared-memory setup
	// after it: conn, or (with TLS) data.
	ctl net.Conn
	// setRead and setWrite are conn's deadline setters, made once.
	setRead, setWrite func(time.Time) error

	// In shared-memory mode send and recv are the rings; conn carries
	// nothing and only tells, by ending, that the peer is gone.
	send, recv *ring
	deadErr    atomic.Pointer[error] // why the peer is gone (shm mode)

	sendBroken, recvBroken atomic.Bool
}

var (
	_ collective.Transport   = (*transport)(nil)
	_ collective.HostLocator = (*transport)(nil)
)

func newLink(peer int, conn *net.TCPConn, ctl, data net.Conn) *link {
	return &link{peer: peer, conn: conn, data: data, ctl: ctl, setRead: data.SetReadDeadline, setWrite: data.SetWriteDeadline}
}

// Rank returns this process's rank.
func (t *transport) Rank() int { return t.rank }

// Size returns the number of ranks.
func (t *transport) Size() int { return t.size }

// HostOf returns the Config.HostID rank joined the rendezvous with.
func (t *transport) HostOf(rank int) string { return t.hosts[rank] }

// Send writes buf to peer. Over TCP it returns once the kernel has the
// bytes; over shared memory once they are in the ring.
func (t *transport) Send(ctx context.Context, peer int, buf []byte) error {
	l, err := t.link(peer, "send to")
	if err != nil || len(buf) == 0 {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("collnet: send to rank %d: %w", peer, err)
	}
	t.ops.RLock()
	defer t.ops.RUnlock()
	switch {
	case t.closed.Load():
		return fmt.Errorf("send to rank %d: %w", peer, ErrClosed)
	case l.sendBroken.Load():
		return fmt.Errorf("send to rank %d: %w", peer, ErrInterrupted)
	case l.send != nil:
		return t.shmSend(ctx, l, buf)
	}
	release := bindDeadline(ctx, l.setWrite)
	n, err := l.data.Write(buf)
	release()
	if err == nil {
		return nil
	}
	if n > 0 {
		l.sendBroken.Store(true)
	}
	return t.opError(ctx, l.peer, "send to", err)
}

// Recv reads len(buf) bytes from peer into buf.
func (t *transport) Recv(ctx context.Context, peer int, buf []byte) error {
	l, err := t.link(peer, "recv from")
	if err != nil || len(buf) == 0 {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("collnet: recv from rank %d: %w", peer, err)
	}
	t.ops.RLock()
	defer t.ops.RUnlock()
	switch {
	case t.closed.Load():
		return fmt.Errorf("recv from rank %d: %w", peer, ErrClosed)
	case l.recvBroken.Load():
		return fmt.Errorf("recv from rank %d: %w", peer, ErrInterrupted)
	case l.recv != nil:
		return t.shmRecv(ctx, l, buf)
	}
	release := bindDeadline(ctx, l.setRead)
	n, err := io.ReadFull(l.data, buf)
	release()
	if err == nil {
		return nil
	}
	if n > 0 {
		l.recvBroken.Store(true)
	}
	return t.opError(ctx, l.peer, "recv from", err)
}

// link returns the link to peer, or an error if peer is not one.
func (t *transport) link(peer int, op string) (*link, error) {
	if peer < 0 || peer >= t.size || peer == t.rank {
		return nil, fmt.Errorf("collnet: %s rank %d: not a peer of rank %d in a group of %d", op, peer, t.rank, t.size)
	}
	return t.links[peer], nil
}

// shmSend puts buf into the ring to l.peer as room frees up.
func (t *transport) shmSend(ctx context.Context, l *link, buf []byte) error {
	r := l.send
	chunk := ringChunk(len(r.data))
	var w waiter
	sent := false
	for len(buf) > 0 {
		free := r.free()
		if free == 0 {
			if err := t.shmCheck(ctx, l, "send to"); err != nil {
				if sent {
					l.sendBroken.Store(true)
				}
				return err
			}
			if !w.poll() {
				r.sleepFree(sleepFor(ctx))
			}
			continue
		}
		n := min(free, len(buf), chunk)
		r.put(buf[:n])
		buf = buf[n:]
		sent = true
		w.reset()
	}
	return nil
}

// shmRecv takes len(buf) bytes from the ring from l.peer as they come.
// Bytes the peer queued before it died are still delivered.
func (t *transport) shmRecv(ctx context.Context, l *link, buf []byte) error {
	r := l.recv
	chunk := ringChunk(len(r.data))
	var w waiter
	got := false
	for len(buf) > 0 {
		queued := r.queued()
		if queued == 0 {
			if err := t.shmCheck(ctx, l, "recv from"); err != nil && r.queued() == 0 {
				if got {
					l.recvBroken.Store(true)
				}
				return err
			}
			if !w.poll() {
				r.sleepQueued(sleepFor(ctx))
			}
			continue
		}
		n := min(queued, len(buf), chunk)
		r.take(buf[:n])
		buf = buf[n:]
		got = true
		w.reset()
	}
	return nil
}

// shmCheck returns why a wait on a ring must end: Close, a dead peer, or
// ctx; or nil.
func (t *transport) shmCheck(ctx context.Context, l *link, op string) error {
	if t.closed.Load() {
		return fmt.Errorf("%s rank %d: %w", op, l.peer, ErrClosed)
	}
	if e := l.deadErr.Load(); e != nil {
		return &collective.PeerError{Rank: l.peer, Err: fmt.Errorf("%s: %w", op, *e)}
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("collnet: %s rank %d: %w", op, l.peer, ctx.Err())
	default:
		return nil
	}
}

// sleepFor is how long a wait on a ring may sleep before it checks ctx
// again: maxSleep, or less when ctx's deadline is nearer.
func sleepFor(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return min(maxSleep, time.Until(d))
	}
	return maxSleep
}

// watch waits for the TCP connection of a shared-memory link to end, and
// then marks the peer gone. It is the only reader of that connection.
func (t *transport) watch(l *link) {
	var b [1]byte
	_, err := l.ctl.Read(b[:]) // under TLS, the peer's close_notify is an EOF
	if t.closed.Load() {
		return
	}
	switch {
	case err == nil:
		err = fmt.Errorf("%w: data on the control connection of a shared-memory link", collective.ErrPeer)
	case errors.Is(err, io.EOF):
		err = errors.New("connection closed by peer")
	}
	l.deadErr.Store(&err)
	l.send.wakeAll()
	l.recv.wakeAll()
	t.log.Warn("peer gone", "peer", l.peer, "err", err)
}

// opError turns the error of a TCP read or write into the error of a
// call: ErrClosed after Close, ctx's error when ctx ended it, else a
// *collective.PeerError.
func (t *transport) opError(ctx context.Context, peer int, op string, err error) error {
	if t.closed.Load() {
		return fmt.Errorf("%s rank %d: %w", op, peer, ErrClosed)
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("collnet: %s rank %d: %w", op, peer, cerr)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The connection's deadline, which is ctx's, may pass a moment
		// before ctx's own timer fires.
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			return fmt.Errorf("collnet: %s rank %d: %w", op, peer, context.DeadlineExceeded)
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("connection closed by peer: %w", err)
	}
	return &collective.PeerError{Rank: peer, Err: fmt.Errorf("%s: %w", op, err)}
}

// Close closes every link; calls in progress fail with ErrClosed. It
// returns once they have, and the watchers have stopped.
func (t *transport) Close() error {
	t.closeMu.Lock()
	defer t.closeMu.Unlock()
	if t.closed.Swap(true) {
		return nil
	}
	var errs []error
	for _, l := range t.links {
		if l != nil {
			if l.send != nil {
				l.send.wakeAll()
				l.recv.wakeAll()
			}
			if err := l.data.Close(); err != nil {
				errs = append(errs, fmt.Errorf("closing link to rank %d: %w", l.peer, err))
			}
		}
	}
	t.wg.Wait()  // the watchers, which saw their connections end
	t.ops.Lock() // the calls in progress, which now see closed
	for _, l := range t.links {
		if l != nil {
			errs = append(errs, l.send.unmap(), l.recv.unmap())
		}
	}
	t.ops.Unlock()
	if t.stopRendezvous != nil {
		t.rv.awaitReports(reportTimeout)
		t.stopRendezvous()
	}
	return errors.Join(errs...)
}

// aLongTimeAgo is a deadline in the past, which interrupts blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)

// bindDeadline makes a connection's deadline, set through set, follow ctx
// for one call: ctx's deadline, or none, and a deadline in the past as soon
// as ctx ends early. The returned release must be called when the call is
// over; it waits for a cancellation in progress, so that it cannot
// interrupt the next call.
func bindDeadline(ctx context.Context, set func(time.Time) error) (release func()) {
	d, _ := ctx.Deadline()
	set(d)
	if ctx.Done() == nil {
		return func() {}
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		set(aLongTimeAgo)
		close(fired)
	})
	return func() {
		if !stop() {
			<-fired
		}
	}
}
