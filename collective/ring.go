package collective

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// ringStep is one step of a pipelined schedule: send one block to the
// next rank while receiving one from the previous rank. Blocks are cut
// into segments of segElems floats; segment j of a step's send waits for
// segment j of step dep's receive when dep >= 0 (the data to forward is
// what that receive produced).
type ringStep struct {
	send   []float32 // block to send to rank+1
	recv   []float32 // where the block from rank−1 goes
	red    []float32 // if non-nil: recv = red op incoming, else recv = incoming
	final  bool      // recv then holds a finished reduction: scale for Average (and quantize)
	noSend bool
	noRecv bool
	dep    int
	// after, when >= 0, is a step whose send read the memory this step
	// receives into: segment j is received only once that step's Send of
	// segment j has returned (a Send may read its buffer until then).
	after int
	// recvOff and sendOff are the numbers of receive and send segments
	// of the steps before this one: the progress counts at which this
	// step's receives and sends begin.
	recvOff, sendOff int
}

// chain makes every step but the first forward what the step before it
// received: the ring schedules of reduce-scatter and allgather.
func (c *Communicator) chain() {
	for t := range c.steps {
		c.steps[t].dep = t - 1
		c.steps[t].after = -1
	}
}

// segments is the number of segments of a block of n floats.
func (c *Communicator) segments(n int) int { return (n + c.segElems - 1) / c.segElems }

// runRing runs c.steps: a sender goroutine sends while the caller's
// goroutine receives, reduces and publishes its progress, on which the
// sender waits before forwarding. Both are joined before it returns; the
// first error wins and cancels the other side.
func (c *Communicator) runRing(ctx context.Context, name string, op Op, comp Compression, quantizeFinal bool) error {
	recvSegs, sendSegs := 0, 0
	for t := range c.steps {
		st := &c.steps[t]
		st.recvOff, st.sendOff = recvSegs, sendSegs
		if !st.noRecv {
			recvSegs += c.segments(len(st.recv))
		}
		if !st.noSend {
			sendSegs += c.segments(len(st.send))
		}
	}
	wire := comp.wireSize() * c.segElems
	c.sendBuf = growBytes(c.sendBuf, wire)
	c.recvBuf = growBytes(c.recvBuf, wire)
	c.recvF32 = grow(c.recvF32, c.segElems)
	c.progress.Store(0)
	c.sent.Store(0)
	c.err = nil
	k := codec{comp: comp, native: c.native}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := c.sendLoop(ctx, name, k); err != nil {
			c.fail(err)
			cancel()
		}
	})
	if err := c.recvLoop(ctx, name, k, op, quantizeFinal); err != nil {
		c.fail(err)
		cancel()
	}
	wg.Wait()
	return c.err
}

// fail records err if it is the call's first.
func (c *Communicator) fail(err error) {
	c.errMu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.errMu.Unlock()
}

func (c *Communicator) sendLoop(ctx context.Context, name string, k codec) error {
	peer := c.mod(c.rank + 1)
	for t := range c.steps {
		st := &c.steps[t]
		if st.noSend {
			continue
		}
		for j, off := 0, 0; off < len(st.send); j, off = j+1, off+c.segElems {
			if st.dep >= 0 {
				if err := c.waitProgress(ctx, int64(c.steps[st.dep].recvOff+j+1)); err != nil {
					return fmt.Errorf("%s: step %d of %d: %w", name, t+1, len(c.steps), err)
				}
			}
			seg := st.send[off:min(off+c.segElems, len(st.send))]
			if err := c.t.Send(ctx, peer, k.encode(c.sendBuf, seg)); err != nil {
				return fmt.Errorf("%s: step %d of %d: send to rank %d: %w", name, t+1, len(c.steps), peer, err)
			}
			c.sent.Add(1)
			select {
			case c.sentNotify <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

// waitProgress waits until the receiver has completed need segments.
// There is one waiter (the sender), so a 1-slot channel loses no wake-up.
func (c *Communicator) waitProgress(ctx context.Context, need int64) error {
	return waitCount(ctx, &c.progress, c.notify, need)
}

// waitSent waits until the sender's Sends of need segments have returned.
// The one waiter is the receiver.
func (c *Communicator) waitSent(ctx context.Context, need int64) error {
	return waitCount(ctx, &c.sent, c.sentNotify, need)
}

func waitCount(ctx context.Context, n *atomic.Int64, notify <-chan struct{}, need int64) error {
	for n.Load() < need {
		select {
		case <-notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (c *Communicator) recvLoop(ctx context.Context, name string, k codec, op Op, quantizeFinal bool) error {
	peer := c.mod(c.rank - 1)
	scale := float32(1 / float64(c.avgN))
	for t := range c.steps {
		st := &c.steps[t]
		if st.noRecv {
			continue
		}
		for j, off := 0, 0; off < len(st.recv); j, off = j+1, off+c.segElems {
			if st.after >= 0 {
				// Causality all but guarantees it (the data to come was
				// computed from what we sent), but a Send may read its
				// buffer until it returns, and the race detector needs
				// to see the order.
				if err := c.waitSent(ctx, int64(c.steps[st.after].sendOff+j+1)); err != nil {
					return fmt.Errorf("%s: step %d of %d: %w", name, t+1, len(c.steps), err)
				}
			}
			end := min(off+c.segElems, len(st.recv))
			dst := st.recv[off:end]
			in := dst
			if st.red != nil {
				in = c.recvF32[:len(dst)]
			}
			w, direct := k.wire(c.recvBuf, in)
			if err := c.t.Recv(ctx, peer, w); err != nil {
				return fmt.Errorf("%s: step %d of %d: recv from rank %d: %w", name, t+1, len(c.steps), peer, err)
			}
			if !direct {
				k.decode(in, w)
			}
			if st.red != nil {
				reduce(op, dst, st.red[off:end], in)
			}
			if st.final {
				if op == Average {
					scaleBy(dst, scale)
				}
				if quantizeFinal {
					k.comp.quantize(dst)
				}
			}
			c.progress.Add(1)
			select {
			case c.notify <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

// reduce sets dst[i] = a[i] op b[i]; dst may alias a.
func reduce(op Op, dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case Min:
		for i := range dst {
			dst[i] = min(a[i], b[i])
		}
	case Max:
		for i := range dst {
			dst[i] = max(a[i], b[i])
		}
	default: // Sum, Average
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	}
}

func scaleBy(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

// exchange runs send for every peer rank+1, rank+2, … on a sender
// goroutine while recv runs for every peer rank−1, rank−2, … on the
// caller's. Round s pairs every rank's send to rank+s with that rank's
// receive from rank−s, so transports whose Send waits for the receiver
// cannot deadlock. A failure with one peer does not stop the exchange
// with the others (each side goes on unless ctx has ended), so a dead
// rank makes every live rank fail naming it instead of starving ranks
// that wait on the first to notice. The first error is returned.
func (c *Communicator) exchange(ctx context.Context, name string, send, recv func(ctx context.Context, peer int) error) error {
	N := c.size
	if N == 1 {
		return nil
	}
	c.err = nil
	var wg sync.WaitGroup
	wg.Go(func() {
		for s := 1; s < N; s++ {
			peer := c.mod(c.rank + s)
			if err := send(ctx, peer); err != nil {
				c.fail(fmt.Errorf("%s: send to rank %d: %w", name, peer, err))
				if ctx.Err() != nil {
					return
				}
			}
		}
	})
	for s := 1; s < N; s++ {
		peer := c.mod(c.rank - s)
		if err := recv(ctx, peer); err != nil {
			c.fail(fmt.Errorf("%s: recv from rank %d: %w", name, peer, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	wg.Wait()
	return c.err
}

// sendFloats sends x to peer as float32 in segments. Only the sender
// goroutine (or the caller, when there is none) may call it.
func (c *Communicator) sendFloats(ctx context.Context, peer int, x []float32) error {
	k := codec{comp: None, native: c.native}
	c.sendBuf = growBytes(c.sendBuf, 4*c.segElems)
	for off := 0; off < len(x); off += c.segElems {
		seg := x[off:min(off+c.segElems, len(x))]
		if err := c.t.Send(ctx, peer, k.encode(c.sendBuf, seg)); err != nil {
			return err
		}
	}
	return nil
}

// recvFloats receives len(x) float32 from peer into x in segments. Only
// the caller's goroutine may call it.
func (c *Communicator) recvFloats(ctx context.Context, peer int, x []float32) error {
	k := codec{comp: None, native: c.native}
	c.recvBuf = growBytes(c.recvBuf, 4*c.segElems)
	for off := 0; off < len(x); off += c.segElems {
		seg := x[off:min(off+c.segElems, len(x))]
		w, direct := k.wire(c.recvBuf, seg)
		if err := c.t.Recv(ctx, peer, w); err != nil {
			return err
		}
		if !direct {
			k.decode(seg, w)
		}
	}
	return nil
}
