package netshape

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// deadline is a net.Conn deadline that waiters can watch for changes.
type deadline struct {
	mu      sync.Mutex
	t       time.Time
	changed chan struct{} // closed and replaced whenever t is set
}

func newDeadline() *deadline { return &deadline{changed: make(chan struct{})} }

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	d.t = t
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
}

func (d *deadline) get() (time.Time, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.t, d.changed
}

// conn is a net.Conn shaped by a NIC: Write goes through the transmit
// queue (the delay line) when the NIC has a rate or an RTT, Read takes
// ingress tokens for what it returns.
type conn struct {
	nc  net.Conn
	nic *NIC
	dl  *delayLine // nil when RTT is 0

	rdl, wdl *deadline

	closed    chan struct{} // closed at the start of Close
	closeOnce sync.Once
	closeErr  error

	// wmu serializes Writes so that their pieces do not interleave; wtimer
	// is only used under wmu.
	wmu    sync.Mutex
	wtimer *time.Timer

	// rmu serializes Reads; the fields below are only used under it.
	rmu    sync.Mutex
	rtimer *time.Timer
	// pending holds bytes read from nc whose ingress wait was cut short by
	// a deadline: they are returned, in order, by the next Reads once
	// pendingDue has passed, followed by pendingErr.
	pending    []byte
	pendingDue time.Time
	pendingErr error
	// inq says how much waits in the receive queue; drained is when a Read
	// last left nothing there: what is there now arrived after it.
	inq     *queueProbe
	drained time.Time
}

var _ net.Conn = (*conn)(nil)

func newConn(n *NIC, nc net.Conn) *conn {
	c := &conn{
		nc:      nc,
		nic:     n,
		rdl:     newDeadline(),
		wdl:     newDeadline(),
		closed:  make(chan struct{}),
		wtimer:  stoppedTimer(),
		rtimer:  stoppedTimer(),
		drained: time.Now(),
	}
	if n.cfg.RTT > 0 || n.out != nil {
		c.dl = newDelayLine(c, n.cfg.RTT/2, n.cfg.queueLimit())
	}
	if n.in != nil {
		c.inq = newQueueProbe(nc)
	}
	return c
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// Read reads at most one pacing chunk from the underlying conn and returns
// it once the NIC's ingress bucket has tokens for it. It honours the read
// deadline while waiting; bytes already taken from the underlying conn when
// the deadline passes are kept for the next Read, so nothing is lost or
// reordered.
func (c *conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.pending != nil {
		return c.readPending(p)
	}
	if err := c.check("read", c.rdl); err != nil {
		return 0, err
	}
	if len(p) > c.nic.chunk {
		p = p[:c.nic.chunk]
	}
	if c.nic.in == nil {
		n, err := c.nc.Read(p)
		c.nic.received.Add(int64(n))
		return n, err
	}
	waiting, known := c.inq.waiting()
	n, err := c.nc.Read(p)
	if n == 0 {
		return n, err
	}
	due := c.nic.in.reserve(c.arrived(n, waiting, known), n)
	if werr := c.wait("read", c.rdl, c.rtimer, due, nil); werr != nil {
		if !errors.Is(werr, net.ErrClosed) {
			// The bytes arrived and their tokens are spent: keep both.
			c.pending = append([]byte(nil), p[:n]...)
			c.pendingDue, c.pendingErr = due, err
		}
		return 0, werr
	}
	c.nic.received.Add(int64(n))
	return n, err
}

// readPending returns bytes kept by a Read whose wait was cut short.
func (c *conn) readPending(p []byte) (int, error) {
	if err := c.wait("read", c.rdl, c.rtimer, c.pendingDue, nil); err != nil {
		return 0, err
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	c.nic.received.Add(int64(n))
	if len(c.pending) > 0 {
		return n, nil
	}
	err := c.pendingErr
	c.pending, c.pendingErr = nil, nil
	return n, err
}

// Write queues p in pieces of at most one pacing chunk on the conn's
// transmit queue, which sends each once the NIC's egress bucket has tokens
// for it; Write returns when the last piece is queued, and the caller may
// reuse p at once. On a NIC with neither a rate nor an RTT it writes to the
// underlying conn. It honours the write deadline while waiting for queue
// space and then returns the bytes queued so far with a timeout error.
func (c *conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var n int
	for {
		if err := c.check("write", c.wdl); err != nil {
			return n, err
		}
		if c.dl != nil {
			if err := c.dl.failure(); err != nil {
				return n, err
			}
		}
		if len(p) == 0 {
			if n == 0 && c.dl == nil {
				return c.nc.Write(p)
			}
			return n, nil
		}
		k := min(len(p), c.nic.chunk)
		if c.dl != nil {
			if err := c.dl.waitSpace(k); err != nil {
				return n, err
			}
		}
		if c.dl != nil {
			if err := c.dl.push(p[:k], time.Now()); err != nil {
				return n, err
			}
			n += k
		} else {
			m, err := c.nc.Write(p[:k])
			n += m
			c.nic.sent.Add(int64(m))
			if err != nil {
				return n, err
			}
		}
		p = p[k:]
	}
}

// arrived returns when the n bytes a Read just took from the underlying
// conn reached this NIC, given that waiting bytes were in the kernel's
// receive queue when the Read began (known is false where the queue cannot
// be read: then it is now).
//
// A real NIC receives while its process waits for a core. So bytes that
// were already waiting are counted from when the line would have brought
// them in: as if all that was waiting came at line rate, ending now. That
// holds for peers that send no faster than this line, as every process of
// a modelled cluster does. The credit never reaches back past the moment
// the queue was last seen empty, and bytes that woke a Read waiting on an
// empty queue count from now: a burst after a quiet spell gets no more than
// the bucket, however fast its sender.
func (c *conn) arrived(n, waiting int, known bool) time.Time {
	now := time.Now()
	if !known {
		return now
	}
	if waiting == 0 {
		c.drained = now
		return now
	}
	at := now.Add(-c.nic.in.took(waiting))
	if at.Before(c.drained) {
		at = c.drained
	}
	if waiting <= n {
		c.drained = now // this Read emptied the queue
	}
	return at
}

// check returns the error for a conn that is closed or whose deadline d
// has passed.
func (c *conn) check(op string, d *deadline) error {
	select {
	case <-c.closed:
		return c.opError(op, net.ErrClosed)
	default:
	}
	if t, _ := d.get(); !t.IsZero() && !time.Now().Before(t) {
		return c.opError(op, os.ErrDeadlineExceeded)
	}
	return nil
}

// wait blocks until due has passed or ev is ready (a nil ev never is). It
// returns a timeout error when the deadline d passes first, following
// changes to d made while it waits, and net.ErrClosed when the conn is
// closed. timer is the caller's, reused across waits.
func (c *conn) wait(op string, d *deadline, timer *time.Timer, due time.Time, ev <-chan struct{}) error {
	for {
		if err := c.check(op, d); err != nil {
			return err
		}
		now := time.Now()
		if !due.IsZero() && !now.Before(due) {
			return nil
		}
		dl, changed := d.get()
		var sleep time.Duration = -1
		if !due.IsZero() {
			sleep = due.Sub(now)
		}
		if !dl.IsZero() && (sleep < 0 || dl.Before(now.Add(sleep))) {
			sleep = dl.Sub(now)
		}
		var tc <-chan time.Time
		if sleep >= 0 {
			timer.Reset(sleep)
			tc = timer.C
		}
		select {
		case <-tc:
			// Loop: either due or the deadline has passed now.
		case <-ev:
			timer.Stop()
			return nil
		case <-changed:
			timer.Stop()
		case <-c.closed:
			timer.Stop()
			return c.opError(op, net.ErrClosed)
		}
	}
}

func (c *conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.nc.LocalAddr().Network(), Source: c.nc.LocalAddr(), Addr: c.nc.RemoteAddr(), Err: err}
}

// Close unblocks waiting Reads and Writes, flushes the delay line (each
// queued piece still arrives at its due time; a peer that does not read
// gets closeLinger more), closes the underlying conn and stops the delay
// line's goroutine. It returns an error the delay line met writing to the
// underlying conn that no Write returned yet, or else the underlying
// conn's Close error.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		var flushErr error
		if c.dl != nil {
			flushErr = c.dl.flush()
		}
		err := c.nc.Close()
		if c.dl != nil {
			c.dl.wait()
		}
		c.nic.forget(c)
		c.closeErr = err
		if flushErr != nil {
			c.closeErr = flushErr
		}
	})
	return c.closeErr
}

// abort closes c, dropping what is queued on its delay line.
func (c *conn) abort() {
	if c.dl != nil {
		c.dl.stop()
	}
	_ = c.Close()
}

func (c *conn) LocalAddr() net.Addr  { return c.nc.LocalAddr() }
func (c *conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// SetDeadline sets both deadlines; see SetReadDeadline and SetWriteDeadline.
func (c *conn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	c.wdl.set(t)
	if c.dl != nil {
		return c.nc.SetReadDeadline(t)
	}
	return c.nc.SetDeadline(t)
}

// SetReadDeadline applies to Reads waiting for data and for ingress tokens,
// including Reads already waiting.
func (c *conn) SetReadDeadline(t time.Time) error {
	c.rdl.set(t)
	return c.nc.SetReadDeadline(t)
}

// SetWriteDeadline applies to Writes waiting for transmit-queue space or,
// on a NIC with neither a rate nor an RTT, the underlying conn, including
// Writes already waiting. Pieces already in the queue are like bytes in a
// kernel send buffer: the deadline no longer applies to them.
func (c *conn) SetWriteDeadline(t time.Time) error {
	c.wdl.set(t)
	if c.dl != nil {
		return nil
	}
	return c.nc.SetWriteDeadline(t)
}
