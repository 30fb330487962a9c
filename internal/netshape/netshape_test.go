package netshape_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/internal/netshape"
)

// gbpsFor is the Gbps of a NIC that moves bytesPerSec.
func gbpsFor(bytesPerSec float64) float64 { return bytesPerSec * 8 / 1e9 }

func newNIC(t testing.TB, cfg netshape.Config) *netshape.NIC {
	t.Helper()
	n, err := netshape.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	return n
}

// listen returns a loopback listener shaped by n (unshaped for a nil n).
func listen(t testing.TB, n *netshape.NIC) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	if n != nil {
		l = n.Listener(l)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// connect returns a TCP conn dialed through client and the conn accepted
// through server; a nil NIC leaves its end unshaped. Both are closed at the
// end of the test.
func connect(t testing.TB, client, server *netshape.NIC) (dialed, accepted net.Conn) {
	t.Helper()
	l := listen(t, server)
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		assert.NoError(t, err)
		ch <- c
	}()
	var d net.Dialer
	dial := d.DialContext
	if client != nil {
		dial = client.DialContext(&d)
	}
	dialed, err := dial(t.Context(), "tcp", l.Addr().String())
	require.NoError(t, err)
	accepted = <-ch
	require.NotNil(t, accepted)
	t.Cleanup(func() {
		dialed.Close()
		accepted.Close()
	})
	return dialed, accepted
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// writeRandomly writes b in pieces of random sizes up to max.
func writeRandomly(c net.Conn, b []byte, r *rand.Rand, max int) error {
	for len(b) > 0 {
		k := min(len(b), 1+r.IntN(max))
		n, err := c.Write(b[:k])
		if err != nil {
			return err
		}
		if n != k {
			return fmt.Errorf("wrote %d of %d bytes without an error", n, k)
		}
		b = b[k:]
	}
	return nil
}

// readRandomly reads n bytes with buffers of random sizes up to max.
func readRandomly(c net.Conn, n int, r *rand.Rand, max int) ([]byte, error) {
	out := make([]byte, 0, n)
	buf := make([]byte, max)
	for len(out) < n {
		k := min(n-len(out), 1+r.IntN(max))
		m, err := c.Read(buf[:k])
		out = append(out, buf[:m]...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func TestNewInvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  netshape.Config
		want string
	}{
		{"NaN Gbps", netshape.Config{Gbps: math.NaN()}, "Gbps is NaN"},
		{"+Inf Gbps", netshape.Config{Gbps: math.Inf(1)}, "Gbps is +Inf"},
		{"-Inf Gbps", netshape.Config{Gbps: math.Inf(-1)}, "Gbps is -Inf"},
		{"negative Gbps", netshape.Config{Gbps: -1}, "Gbps is -1, want >= 0"},
		{"negative RTT", netshape.Config{RTT: -time.Millisecond}, "RTT is -1ms, want >= 0"},
		{"negative Burst", netshape.Config{Gbps: 1, Burst: -1}, "Burst is -1 bytes"},
		{"negative Queue", netshape.Config{Gbps: 1, Queue: -1}, "Queue is -1 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := netshape.New(tc.cfg)
			assert.Nil(t, n)
			assert.ErrorIs(t, err, netshape.ErrInvalidConfig)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestNewValidConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  netshape.Config
	}{
		{"default", netshape.DefaultConfig()},
		{"rate", netshape.Config{Gbps: 10}},
		{"tiny rate and burst", netshape.Config{Gbps: 1e-9, Burst: 1}},
		{"huge rate", netshape.Config{Gbps: 1e12}},
		{"rate, RTT and burst", netshape.Config{Gbps: 1, RTT: time.Millisecond, Burst: 4096}},
		{"a one-byte queue", netshape.Config{Gbps: 1, Queue: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := netshape.New(tc.cfg)
			require.NoError(t, err)
			assert.Equal(t, tc.cfg, n.Config())
			assert.Zero(t, n.Sent())
			assert.Zero(t, n.Received())
			assert.NoError(t, n.Close())
		})
	}
}

func TestDefaultBurst(t *testing.T) {
	for _, tc := range []struct {
		name string
		gbps float64
		want int
	}{
		{"unlimited", 0, 64 << 10},
		{"slow", 0.1, 64 << 10},
		{"1 Gbps is 2 ms", 1, 250_000},
		{"10 Gbps is 2 ms", 10, 2_500_000},
		{"capped", 1e12, math.MaxInt32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, netshape.DefaultBurst(tc.gbps))
		})
	}
}

// TestIntegrity moves random bytes both ways over many conns sharing one
// client NIC and one server NIC, with random write and read sizes, and
// checks every byte and the NICs' counters.
func TestIntegrity(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  netshape.Config
	}{
		{"unlimited", netshape.Config{}},
		{"unlimited with RTT", netshape.Config{RTT: 2 * time.Millisecond}},
		{"4 Gbps", netshape.Config{Gbps: 4}},
		{"4 Gbps with RTT", netshape.Config{Gbps: 4, RTT: 2 * time.Millisecond}},
		{"1 KB bursts with RTT", netshape.Config{Gbps: 1, RTT: time.Millisecond, Burst: 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const conns, size = 8, 256 << 10
			client, server := newNIC(t, tc.cfg), newNIC(t, tc.cfg)
			l := listen(t, server)

			var wg sync.WaitGroup
			for i := range conns {
				wg.Go(func() {
					c, err := client.DialContext(nil)(t.Context(), "tcp", l.Addr().String())
					if assert.NoError(t, err) {
						exchange(t, c, toServer(i, size), fromServer(i, size))
					}
				})
			}
			for range conns {
				c, err := l.Accept()
				require.NoError(t, err)
				wg.Go(func() {
					var hdr [8]byte
					if _, err := io.ReadFull(c, hdr[:]); assert.NoError(t, err) {
						i := int(binary.LittleEndian.Uint64(hdr[:]))
						exchange(t, c, fromServer(i, size), toServer(i, size)[len(hdr):])
					}
				})
			}
			wg.Wait()

			assert.Equal(t, int64(conns*size), client.Sent(), "client sent")
			assert.Equal(t, int64(conns*size), server.Received(), "server received")
			assert.Equal(t, int64(conns*size), server.Sent(), "server sent")
			assert.Equal(t, int64(conns*size), client.Received(), "client received")
		})
	}
}

// toServer is what client conn i sends: random bytes whose first 8 carry i.
func toServer(i, size int) []byte {
	b := randomBytes(uint64(i), size)
	binary.LittleEndian.PutUint64(b, uint64(i))
	return b
}

// fromServer is what the server sends back on conn i.
func fromServer(i, size int) []byte { return randomBytes(uint64(1000+i), size) }

// exchange writes out on c while reading len(want) bytes, checks them and
// closes c.
func exchange(t *testing.T, c net.Conn, out, want []byte) {
	seed := rand.Uint64()
	var wg sync.WaitGroup
	wg.Go(func() {
		assert.NoError(t, writeRandomly(c, out, rand.New(rand.NewPCG(seed, 1)), 200<<10))
	})
	got, err := readRandomly(c, len(want), rand.New(rand.NewPCG(seed, 2)), 100<<10)
	wg.Wait()
	if assert.NoError(t, err) {
		assert.True(t, bytes.Equal(want, got), "bytes differ")
	}
	assert.NoError(t, c.Close())
}

// slow is a NIC config of 1 KB/s with a 1000-byte bucket and a 1000-byte
// transmit queue: the first 1000 bytes pass at once, the next 1000 wait in
// the queue and leave a second later, and a Write of more waits for them.
func slow(rtt time.Duration) netshape.Config {
	return netshape.Config{Gbps: gbpsFor(1000), Burst: 1000, Queue: 1000, RTT: rtt}
}

func assertTimeout(t *testing.T, err error) {
	t.Helper()
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var ne net.Error
	if assert.ErrorAs(t, err, &ne) {
		assert.True(t, ne.Timeout(), "Timeout() of %v", err)
	}
}

var rtts = []struct {
	name string
	rtt  time.Duration
}{{"no RTT", 0}, {"RTT", 2 * time.Millisecond}}

// TestWriteDeadline lets a Write wait for space in the transmit queue past
// its deadline: it fails with a timeout, counting what it queued, which is
// delivered, and the conn stays usable.
func TestWriteDeadline(t *testing.T) {
	for _, tc := range rtts {
		t.Run(tc.name, func(t *testing.T) {
			w, r := connect(t, newNIC(t, slow(tc.rtt)), nil)
			first, cut, last := randomBytes(1, 1000), randomBytes(2, 2000), randomBytes(3, 10)

			n, err := w.Write(first) // the bucket is full
			require.NoError(t, err)
			require.Equal(t, 1000, n)

			require.NoError(t, w.SetWriteDeadline(time.Now().Add(10*time.Millisecond)))
			n, err = w.Write(cut) // its first 1000 fill the queue for a second
			assert.Equal(t, 1000, n)
			assertTimeout(t, err)

			require.NoError(t, w.SetWriteDeadline(time.Time{}))
			n, err = w.Write(last)
			require.NoError(t, err)
			require.Equal(t, 10, n)
			require.NoError(t, w.Close())

			got, err := io.ReadAll(r)
			require.NoError(t, err)
			assert.Equal(t, slices.Concat(first, cut[:1000], last), got)
		})
	}
}

// TestWriteDeadlineChangedWhileWaiting moves the deadline of a Write that
// waits for queue space into the past: it returns a timeout and the count
// of what it queued, and exactly that much is delivered.
func TestWriteDeadlineChangedWhileWaiting(t *testing.T) {
	for _, tc := range rtts {
		t.Run(tc.name, func(t *testing.T) {
			w, r := connect(t, newNIC(t, slow(tc.rtt)), nil)
			type result struct {
				n   int
				err error
			}
			done := make(chan result, 1)
			want := randomBytes(4, 50_000) // 49 s at 1000 B/s past the first 1000
			go func() {
				n, err := w.Write(want) // 1000 now, 1000 queued, the rest waits
				done <- result{n, err}
			}()
			_, err := io.ReadFull(r, make([]byte, 1000)) // the first piece arrived
			require.NoError(t, err)
			require.NoError(t, w.SetWriteDeadline(time.Now()))
			res := <-done
			// How much was queued before the deadline moved depends on how
			// long this goroutine took to move it (a piece a second; under
			// -race on a loaded machine it once took more than one): the
			// Write ends early, with a timeout, having queued what it says.
			assert.GreaterOrEqual(t, res.n, 1000)
			assert.Less(t, res.n, len(want))
			assertTimeout(t, res.err)
			require.NoError(t, w.Close())
			rest, err := io.ReadAll(r)
			require.NoError(t, err)
			assert.Equal(t, want[1000:res.n], rest)
		})
	}
}

// TestReadDeadline lets Reads wait for ingress tokens past their deadline,
// then reads on: no byte is lost or reordered.
func TestReadDeadline(t *testing.T) {
	r, w := connect(t, newNIC(t, netshape.Config{Gbps: gbpsFor(100_000), Burst: 1000}), nil)
	want := randomBytes(4, 5000) // 40 ms at 100 KB/s after the first 1000
	go func() {
		_, err := w.Write(want)
		assert.NoError(t, err)
		assert.NoError(t, w.Close())
	}()

	require.NoError(t, r.SetReadDeadline(time.Now().Add(5*time.Millisecond)))
	var got []byte
	buf := make([]byte, 700)
	var err error
	for err == nil {
		var n int
		n, err = r.Read(buf)
		got = append(got, buf[:n]...)
	}
	assertTimeout(t, err)

	require.NoError(t, r.SetReadDeadline(time.Time{}))
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, want, append(got, rest...))
}

func TestExpiredDeadline(t *testing.T) {
	for _, tc := range rtts {
		t.Run(tc.name, func(t *testing.T) {
			n := newNIC(t, netshape.Config{Gbps: 1, RTT: tc.rtt})
			a, b := connect(t, n, n)
			_, err := b.Write([]byte("x"))
			require.NoError(t, err)
			require.NoError(t, a.SetDeadline(time.Now().Add(-time.Second)))
			_, err = a.Write([]byte("x"))
			assertTimeout(t, err)
			_, err = a.Read(make([]byte, 1))
			assertTimeout(t, err)
		})
	}
}

// TestCloseUnblocks closes conns whose Write waits for queue space and
// whose Read waits for tokens.
func TestCloseUnblocks(t *testing.T) {
	for _, tc := range rtts {
		for _, viaNIC := range []bool{false, true} {
			name := tc.name + "/conn.Close"
			if viaNIC {
				name = tc.name + "/NIC.Close"
			}
			t.Run(name, func(t *testing.T) {
				n := newNIC(t, slow(tc.rtt))
				w, peerR := connect(t, n, nil)
				r, peerW := connect(t, n, nil)

				writeErr := make(chan error, 1)
				go func() {
					_, err := w.Write(make([]byte, 5000))
					writeErr <- err
				}()
				readErr := make(chan error, 1)
				readSome := make(chan struct{})
				go func() {
					buf := make([]byte, 5000)
					_, err := r.Read(buf) // the bucket is full
					close(readSome)
					for err == nil {
						_, err = r.Read(buf)
					}
					readErr <- err
				}()
				_, err := peerW.Write(make([]byte, 5000))
				require.NoError(t, err)
				_, err = io.ReadFull(peerR, make([]byte, 1000))
				require.NoError(t, err)
				<-readSome

				if viaNIC {
					require.NoError(t, n.Close())
				} else {
					require.NoError(t, w.Close())
					require.NoError(t, r.Close())
				}
				assert.ErrorIs(t, <-writeErr, net.ErrClosed)
				assert.ErrorIs(t, <-readErr, net.ErrClosed)
				_, err = w.Write([]byte("x"))
				assert.ErrorIs(t, err, net.ErrClosed)
			})
		}
	}
}

func TestClosedNIC(t *testing.T) {
	n := newNIC(t, netshape.Config{Gbps: 1, RTT: time.Millisecond})
	l := listen(t, n)
	require.NoError(t, n.Close())
	require.NoError(t, n.Close(), "second Close")

	_, err := n.DialContext(nil)(t.Context(), "tcp", l.Addr().String())
	assert.ErrorIs(t, err, netshape.ErrNICClosed)
	assert.ErrorIs(t, err, net.ErrClosed)

	dialed, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer dialed.Close()
	_, err = l.Accept()
	assert.ErrorIs(t, err, netshape.ErrNICClosed)

	a, b := net.Pipe()
	defer b.Close()
	c := n.Conn(a)
	_, err = c.Write([]byte("x"))
	assert.ErrorIs(t, err, net.ErrClosed)
	_, err = b.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the wrapped conn was closed")
}

// TestCloseFlushesDelayLine closes a conn right after a Write: the peer
// still gets every byte, at their due time, then EOF.
func TestCloseFlushesDelayLine(t *testing.T) {
	n := newNIC(t, netshape.Config{RTT: 50 * time.Millisecond})
	w, r := connect(t, n, nil)
	want := randomBytes(5, 3<<20)
	_, err := w.Write(want)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	assert.Equal(t, int64(len(want)), n.Sent())
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// TestNICCloseDropsDelayLine closes a NIC with data on a delay line due in
// an hour: Close returns, the data is dropped and the peer sees EOF.
func TestNICCloseDropsDelayLine(t *testing.T) {
	n := newNIC(t, netshape.Config{RTT: 2 * time.Hour})
	w, r := connect(t, n, nil)
	_, err := w.Write([]byte("dropped"))
	require.NoError(t, err)
	require.NoError(t, n.Close())
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.Zero(t, n.Sent())
}

// TestDelayLineWriteError breaks the underlying conn: the error surfaces on
// a later Write, or on Close.
func TestDelayLineWriteError(t *testing.T) {
	t.Run("Write", func(t *testing.T) {
		n := newNIC(t, netshape.Config{RTT: time.Millisecond})
		a, b := net.Pipe()
		require.NoError(t, b.Close())
		c := n.Conn(a)
		defer c.Close()
		var err error
		for err == nil { // Writes queue until the delay line has failed
			_, err = c.Write(make([]byte, 64<<10))
		}
		assert.ErrorIs(t, err, io.ErrClosedPipe)
	})
	t.Run("Close", func(t *testing.T) {
		n := newNIC(t, netshape.Config{RTT: time.Millisecond})
		a, b := net.Pipe()
		require.NoError(t, b.Close())
		c := n.Conn(a)
		_, err := c.Write([]byte("queued"))
		require.NoError(t, err)
		assert.ErrorIs(t, c.Close(), io.ErrClosedPipe)
	})
}

// recorder is a net.Conn that records the sizes of its Writes.
type recorder struct {
	net.Conn
	mu     sync.Mutex
	writes []int
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.writes = append(r.writes, len(p))
	r.mu.Unlock()
	return r.Conn.Write(p)
}

// TestWritePieces checks that large Writes reach the underlying conn in
// pieces no larger than the burst, in order.
func TestWritePieces(t *testing.T) {
	for _, tc := range rtts {
		t.Run(tc.name, func(t *testing.T) {
			n := newNIC(t, netshape.Config{Gbps: 1, Burst: 1000, RTT: tc.rtt})
			a, b := connect(t, nil, nil)
			rec := &recorder{Conn: a}
			c := n.Conn(rec)
			want := randomBytes(6, 10_500)
			go func() {
				_, err := c.Write(want)
				assert.NoError(t, err)
				assert.NoError(t, c.Close())
			}()
			got, err := io.ReadAll(b)
			require.NoError(t, err)
			assert.Equal(t, want, got)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			assert.Len(t, rec.writes, 11)
			for _, w := range rec.writes {
				assert.LessOrEqual(t, w, 1000)
			}
		})
	}
}

// TestDialContextErrors checks that dial errors and contexts pass through.
func TestDialContextErrors(t *testing.T) {
	n := newNIC(t, netshape.Config{Gbps: 1})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := n.DialContext(nil)(ctx, "tcp", "127.0.0.1:1")
	assert.ErrorIs(t, err, context.Canceled)
	_, err = n.ContextDialer(nil)(t.Context(), "no-such-host.invalid:80")
	assert.Error(t, err)
	assert.False(t, errors.Is(err, netshape.ErrNICClosed))
}
