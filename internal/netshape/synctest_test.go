package netshape_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/internal/netshape"
)

// These tests run in synctest bubbles over net.Pipe, where time is virtual:
// they check the model's timing exactly without measuring the machine.

// mbps1 is 1 MB/s with a 100 KB bucket.
var mbps1 = netshape.Config{Gbps: gbpsFor(1e6), Burst: 100_000}

// nicIn is newNIC for a bubble: the NIC is closed before the bubble ends.
func nicIn(t *testing.T, cfg netshape.Config) *netshape.NIC {
	t.Helper()
	n, err := netshape.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	return n
}

// sendAll writes size bytes on w and closes it.
func sendAll(t *testing.T, w net.Conn, size int) {
	_, err := w.Write(make([]byte, size))
	assert.NoError(t, err)
	assert.NoError(t, w.Close())
}

// receiveAll reads r to EOF and returns how many bytes came and when the
// last one did, relative to start.
func receiveAll(t *testing.T, r net.Conn, start time.Time) (int, time.Duration) {
	var (
		n    int
		last time.Duration
	)
	buf := make([]byte, 32<<10)
	for {
		m, err := r.Read(buf)
		if m > 0 {
			n += m
			last = time.Since(start)
		}
		if err == io.EOF {
			return n, last
		}
		if !assert.NoError(t, err) {
			return n, last
		}
	}
}

// TestVirtualEgressRate: after the 100 KB bucket, 1 MB takes 1 s.
func TestVirtualEgressRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := nicIn(t, mbps1)
		a, b := net.Pipe()
		w := n.Conn(a)
		start := time.Now()
		go sendAll(t, w, 1_100_000)
		got, took := receiveAll(t, b, start)
		assert.Equal(t, 1_100_000, got)
		assert.InDelta(t, time.Second, took, float64(time.Millisecond))
		assert.Equal(t, int64(1_100_000), n.Sent())
	})
}

// TestVirtualSharedEgress: two conns of one NIC share its egress rate and
// take turns, so both finish at about the time their sum takes.
func TestVirtualSharedEgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := nicIn(t, mbps1)
		took := twoFlows(t, func(a, b net.Conn) (net.Conn, net.Conn) { return n.Conn(a), b })
		assert.InDelta(t, time.Second, max(took[0], took[1]), float64(time.Millisecond))
		// Within one 64 KiB piece (65 ms) of each other.
		assert.Greater(t, min(took[0], took[1]), 900*time.Millisecond)
	})
}

// TestVirtualSharedIngress: a NIC receiving from two unshaped senders is
// the bottleneck for both together.
func TestVirtualSharedIngress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := nicIn(t, mbps1)
		took := twoFlows(t, func(a, b net.Conn) (net.Conn, net.Conn) { return b, n.Conn(a) })
		assert.InDelta(t, time.Second, max(took[0], took[1]), float64(time.Millisecond))
		assert.Equal(t, int64(1_100_000), n.Received())
	})
}

// twoFlows sends 550,000 bytes over each of two pipes at once and returns
// when each receiver had them all. Of a new pipe's ends a and b, ends
// returns the conn to send on and the one to receive on, either of them
// shaped by a NIC; twoFlows closes both.
func twoFlows(t *testing.T, ends func(a, b net.Conn) (send, recv net.Conn)) [2]time.Duration {
	start := time.Now()
	var (
		wg   sync.WaitGroup
		took [2]time.Duration
	)
	for i := range took {
		send, recv := ends(net.Pipe())
		go sendAll(t, send, 550_000)
		wg.Go(func() {
			defer recv.Close()
			var got int
			got, took[i] = receiveAll(t, recv, start)
			assert.Equal(t, 550_000, got)
		})
	}
	wg.Wait()
	return took
}

// TestVirtualRTT: a request and its reply between two NICs take one RTT.
func TestVirtualRTT(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := netshape.Config{RTT: 10 * time.Millisecond}
		a, b := net.Pipe()
		client, server := nicIn(t, cfg).Conn(a), nicIn(t, cfg).Conn(b)
		defer client.Close()
		defer server.Close()
		go func() {
			buf := make([]byte, 4)
			_, err := io.ReadFull(server, buf)
			assert.NoError(t, err)
			_, err = server.Write([]byte("pong"))
			assert.NoError(t, err)
		}()
		start := time.Now()
		_, err := client.Write([]byte("ping"))
		require.NoError(t, err)
		reply := make([]byte, 4)
		_, err = io.ReadFull(client, reply)
		require.NoError(t, err)
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
		assert.Equal(t, "pong", string(reply))
	})
}

// TestVirtualRateAndRTT: the last byte of a transfer arrives RTT/2 after it
// departs.
func TestVirtualRateAndRTT(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := mbps1
		cfg.RTT = 100 * time.Millisecond
		n := nicIn(t, cfg)
		a, b := net.Pipe()
		start := time.Now()
		go sendAll(t, n.Conn(a), 1_100_000)
		got, took := receiveAll(t, b, start)
		assert.Equal(t, 1_100_000, got)
		assert.InDelta(t, time.Second+50*time.Millisecond, took, float64(time.Millisecond))
	})
}

// TestVirtualReadDeadlineKeepsData: a Read whose ingress wait outlasts its
// deadline returns a timeout, and a later Read returns those bytes when
// their tokens are due.
func TestVirtualReadDeadlineKeepsData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := nicIn(t, netshape.Config{Gbps: gbpsFor(1000), Burst: 1000})
		a, b := net.Pipe()
		r := n.Conn(a)
		defer r.Close()
		want := randomBytes(7, 1500)
		defer b.Close()
		go func() {
			_, err := b.Write(want)
			assert.NoError(t, err)
		}()
		start := time.Now()
		buf := make([]byte, 1000)
		k, err := r.Read(buf) // the bucket is full
		require.NoError(t, err)
		got := append([]byte(nil), buf[:k]...)

		require.NoError(t, r.SetReadDeadline(start.Add(100*time.Millisecond)))
		k, err = r.Read(buf) // 500 bytes need 500 ms of tokens
		assert.Zero(t, k)
		assertTimeout(t, err)
		assert.Equal(t, 100*time.Millisecond, time.Since(start))

		require.NoError(t, r.SetReadDeadline(time.Time{}))
		rest := make([]byte, 500)
		_, err = io.ReadFull(r, rest)
		require.NoError(t, err)
		assert.Equal(t, 500*time.Millisecond, time.Since(start))
		assert.Equal(t, want, append(got, rest...))
		assert.Equal(t, int64(1500), n.Received())
	})
}

// TestVirtualQueueSendsWhileAway: a Write returns once its bytes are in the
// transmit queue, and the NIC sends them while the process does something
// else, as a kernel drains a socket's send buffer: 600 KB written, 400 ms
// away, 500 KB more, and the last byte arrives when an unbroken 1.1 MB
// transfer's would.
func TestVirtualQueueSendsWhileAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := nicIn(t, mbps1)
		a, b := net.Pipe()
		w := n.Conn(a)
		start := time.Now()
		go func() {
			_, err := w.Write(make([]byte, 600_000))
			assert.NoError(t, err)
			assert.Equal(t, time.Duration(0), time.Since(start), "the Write waited for the line")
			time.Sleep(400 * time.Millisecond) // the process computes
			sendAll(t, w, 500_000)
		}()
		got, took := receiveAll(t, b, start)
		assert.Equal(t, 1_100_000, got)
		assert.InDelta(t, time.Second, took, float64(time.Millisecond))
	})
}

// TestVirtualIngressReceivesWhileAway: a receiver that stops reading for
// 500 ms while a sender of its own line rate goes on finds the bytes waiting
// in the (here in-memory) kernel queue, and they count from when the line
// brought them in: the transfer ends when the sender's does, not 500 ms of
// line time later.
func TestVirtualIngressReceivesWhileAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := queuePipe()
		send, recv := nicIn(t, mbps1).Conn(a), nicIn(t, mbps1).Conn(b)
		defer recv.Close()
		start := time.Now()
		go sendAll(t, send, 1_100_000)
		first := make([]byte, 100_000)
		_, err := io.ReadFull(recv, first) // the bucket
		require.NoError(t, err)
		time.Sleep(500 * time.Millisecond) // the process has no core
		got, took := receiveAll(t, recv, start)
		assert.Equal(t, 1_000_000, got)
		assert.InDelta(t, time.Second, took, float64(2*time.Millisecond))
	})
}

// TestVirtualIngressBurstGetsNoCredit: bytes that wake a Read waiting on an
// empty queue count from then, however fast they came: 1.1 MB arriving at
// once from an unshaped sender after a quiet second takes the bucket at once
// and the rest at line rate.
func TestVirtualIngressBurstGetsNoCredit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := queuePipe()
		recv := nicIn(t, mbps1).Conn(b)
		defer recv.Close()
		start := time.Now()
		go func() {
			time.Sleep(time.Second)
			sendAll(t, a, 1_100_000)
		}()
		got, took := receiveAll(t, recv, start)
		assert.Equal(t, 1_100_000, got)
		assert.InDelta(t, 2*time.Second, took, float64(2*time.Millisecond))
	})
}

// queuePipe returns the two ends of an in-memory conn whose writes never
// block and whose ends say, as the kernel's SIOCINQ does, how many bytes
// wait to be read.
func queuePipe() (net.Conn, net.Conn) {
	ab, ba := newPipeBuf(), newPipeBuf()
	return &queueEnd{in: ba, out: ab}, &queueEnd{in: ab, out: ba}
}

type pipeBuf struct {
	mu     sync.Mutex
	cond   *sync.Cond
	data   []byte
	closed bool
}

func newPipeBuf() *pipeBuf {
	p := &pipeBuf{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *pipeBuf) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cond.Broadcast()
}

type queueEnd struct{ in, out *pipeBuf }

func (e *queueEnd) Queued() int {
	e.in.mu.Lock()
	defer e.in.mu.Unlock()
	return len(e.in.data)
}

func (e *queueEnd) Read(b []byte) (int, error) {
	e.in.mu.Lock()
	defer e.in.mu.Unlock()
	for len(e.in.data) == 0 && !e.in.closed {
		e.in.cond.Wait()
	}
	if len(e.in.data) == 0 {
		return 0, io.EOF
	}
	n := copy(b, e.in.data)
	e.in.data = e.in.data[n:]
	return n, nil
}

func (e *queueEnd) Write(b []byte) (int, error) {
	e.out.mu.Lock()
	defer e.out.mu.Unlock()
	if e.out.closed {
		return 0, io.ErrClosedPipe
	}
	e.out.data = append(e.out.data, b...)
	e.out.cond.Broadcast()
	return len(b), nil
}

func (e *queueEnd) Close() error {
	e.out.close()
	e.in.close()
	return nil
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "queuepipe" }
func (pipeAddr) String() string  { return "queuepipe" }

func (e *queueEnd) LocalAddr() net.Addr              { return pipeAddr{} }
func (e *queueEnd) RemoteAddr() net.Addr             { return pipeAddr{} }
func (e *queueEnd) SetDeadline(time.Time) error      { return nil }
func (e *queueEnd) SetReadDeadline(time.Time) error  { return nil }
func (e *queueEnd) SetWriteDeadline(time.Time) error { return nil }
