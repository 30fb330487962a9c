package netshape

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// frame is one piece of a Write waiting on a delay line.
type frame struct {
	buf *[]byte   // from the NIC's pool; owned by the delay line
	at  time.Time // when the Write queued it
}

// delayLine is a conn's transmit queue. Its goroutine takes the pieces in
// order, books each on the NIC's egress line when it reaches the head of the
// queue (from when it was queued, or when the piece before it left, so time
// the process spent without a core is not lost to the line), and writes it
// to the underlying conn at its departure + RTT/2. It holds at most limit
// bytes (a piece is counted until it is written), so a Write blocks when
// the line or the peer does not keep up, as it would on a full send buffer.
type delayLine struct {
	c     *conn
	delay time.Duration
	limit int

	mu      sync.Mutex
	frames  []frame // FIFO from head
	head    int
	bytes   int       // queued or being written
	lastDue time.Time // when run last wrote, or will write, a piece
	closing bool      // no more pushes; run exits once the queue is empty
	err     error     // first error writing to the underlying conn

	ready    chan struct{} // cap 1: a piece was pushed, or closing was set
	space    chan struct{} // cap 1: bytes were freed, or err was set
	stopCh   chan struct{} // closed to drop the queue and exit
	stopOnce sync.Once
	done     chan struct{} // closed when run returns
}

func newDelayLine(c *conn, delay time.Duration, limit int) *delayLine {
	d := &delayLine{
		c:      c,
		delay:  delay,
		limit:  limit,
		ready:  make(chan struct{}, 1),
		space:  make(chan struct{}, 1),
		stopCh: make(chan struct{}),
		done:   make(chan struct{}),
	}
	go d.run()
	return d
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// failure returns the error the delay line met writing, if any.
func (d *delayLine) failure() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// waitSpace blocks until k more bytes fit (or the queue is empty), honouring
// the conn's write deadline and Close. Called under the conn's wmu, so
// there is one waiter at most.
func (d *delayLine) waitSpace(k int) error {
	for {
		d.mu.Lock()
		err, fits := d.err, d.bytes == 0 || d.bytes+k <= d.limit
		d.mu.Unlock()
		if err != nil {
			return err
		}
		if fits {
			return nil
		}
		if err := d.c.wait("write", d.c.wdl, d.c.wtimer, time.Time{}, d.space); err != nil {
			return err
		}
	}
}

// push queues a copy of b, which the Write handed over at time at.
func (d *delayLine) push(b []byte, at time.Time) error {
	bp := d.c.nic.pool.Get().(*[]byte)
	*bp = append((*bp)[:0], b...)
	d.mu.Lock()
	var err error
	switch {
	case d.err != nil:
		err = d.err
	case d.closing:
		err = d.c.opError("write", net.ErrClosed)
	}
	if err != nil {
		d.mu.Unlock()
		d.c.nic.pool.Put(bp)
		return err
	}
	if d.head > 0 && len(d.frames) == cap(d.frames) {
		n := copy(d.frames, d.frames[d.head:])
		clear(d.frames[n:])
		d.frames, d.head = d.frames[:n], 0
	}
	d.frames = append(d.frames, frame{buf: bp, at: at})
	d.bytes += len(b)
	d.mu.Unlock()
	notify(d.ready)
	return nil
}

// pop returns the next piece, blocking until there is one; false once the
// line is closing and empty, or stopped.
func (d *delayLine) pop() (frame, bool) {
	for {
		d.mu.Lock()
		if d.head < len(d.frames) {
			f := d.frames[d.head]
			d.frames[d.head] = frame{}
			d.head++
			if d.head == len(d.frames) {
				d.frames, d.head = d.frames[:0], 0
			}
			d.mu.Unlock()
			return f, true
		}
		closing := d.closing
		d.mu.Unlock()
		if closing {
			return frame{}, false
		}
		select {
		case <-d.ready:
		case <-d.stopCh:
			return frame{}, false
		}
	}
}

// release frees a piece's bytes after it was written or dropped.
func (d *delayLine) release(f frame) {
	d.mu.Lock()
	d.bytes -= len(*f.buf)
	d.mu.Unlock()
	d.c.nic.pool.Put(f.buf)
	notify(d.space)
}

// fail records the first write error and drops what is queued.
func (d *delayLine) fail(err error) {
	d.mu.Lock()
	if d.err == nil {
		d.err = fmt.Errorf("netshape: delayed write: %w", err)
	}
	d.mu.Unlock()
	d.drop()
}

// drop discards what is queued.
func (d *delayLine) drop() {
	d.mu.Lock()
	dropped := d.frames[d.head:]
	d.frames, d.head = d.frames[:0], 0
	for i, f := range dropped {
		d.bytes -= len(*f.buf)
		d.c.nic.pool.Put(f.buf)
		dropped[i] = frame{}
	}
	d.mu.Unlock()
	notify(d.space)
}

// run is the delay line's goroutine.
func (d *delayLine) run() {
	defer close(d.done)
	timer := stoppedTimer()
	var left time.Time // when the previous piece left
	for {
		f, ok := d.pop()
		if !ok {
			d.drop() // what a stop left queued
			return
		}
		dep := f.at
		if dep.Before(left) {
			dep = left
		}
		if out := d.c.nic.out; out != nil {
			dep = out.reserve(dep, len(*f.buf))
		}
		left = dep
		due := dep.Add(d.delay)
		d.mu.Lock()
		d.lastDue = due
		d.mu.Unlock()
		if !d.sleepUntil(timer, due) {
			d.release(f)
			d.drop()
			return
		}
		if d.failure() == nil {
			m, err := d.c.nc.Write(*f.buf)
			d.c.nic.sent.Add(int64(m))
			if err != nil {
				d.fail(err)
			}
		}
		d.release(f)
	}
}

// sleepUntil waits for due; false if the line was stopped.
func (d *delayLine) sleepUntil(timer *time.Timer, due time.Time) bool {
	select {
	case <-d.stopCh:
		return false
	default:
	}
	wait := time.Until(due)
	if wait <= 0 {
		return true
	}
	timer.Reset(wait)
	select {
	case <-timer.C:
		return true
	case <-d.stopCh:
		timer.Stop()
		return false
	}
}

// stop makes run drop the queue and exit.
func (d *delayLine) stop() { d.stopOnce.Do(func() { close(d.stopCh) }) }

// flush stops pushes and waits until run has delivered the queue, giving a
// peer that does not read closeLinger past the last due time. It returns
// the error run met writing, if any, or an error saying what was dropped
// when the linger ran out. After a stop it returns nil at once.
func (d *delayLine) flush() error {
	d.mu.Lock()
	d.closing = true
	// The queue leaves after the piece being written, at line rate.
	linger := closeLinger + d.delay
	if wait := time.Until(d.lastDue); wait > 0 {
		linger += wait
	}
	if out := d.c.nic.out; out != nil {
		linger += out.took(d.bytes)
		if wait := out.until(); wait > 0 {
			linger += wait
		}
	}
	d.mu.Unlock()
	notify(d.ready)

	timer := time.NewTimer(linger)
	defer timer.Stop()
	select {
	case <-d.done:
	case <-d.stopCh:
		return nil
	case <-timer.C:
		d.mu.Lock()
		queued := d.bytes
		d.mu.Unlock()
		d.stop()
		if queued == 0 { // run was on its way out
			return d.failure()
		}
		return fmt.Errorf("netshape: close: dropped %d delayed bytes the peer did not read within %v", queued, closeLinger)
	}
	return d.failure()
}

// wait blocks until run has returned.
func (d *delayLine) wait() { <-d.done }
