package collnet

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
)

// countingConn counts the bytes written through it, and whether it was
// closed.
type countingConn struct {
	net.Conn
	written *atomic.Int64
	closed  *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

func (c countingConn) Close() error {
	c.closed.Add(1)
	return c.Conn.Close()
}

// TestWrapData: with WrapData set and shared memory off, an allreduce's
// bytes all pass through the wrappers (each rank sends 2(N−1)/N of the
// buffer, nothing else), and Close closes them.
func TestWrapData(t *testing.T) {
	const n, floats = 4, 1 << 16
	cfgs := groupConfigs(t, n, false)
	written := make([]atomic.Int64, n)
	closed := make([]atomic.Int64, n)
	for r := range cfgs {
		cfgs[r].WrapData = func(c net.Conn) net.Conn { return countingConn{c, &written[r], &closed[r]} }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ts, errs := connect(ctx, cfgs)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	var wg sync.WaitGroup
	results := make([][]float32, n)
	for r := range n {
		wg.Go(func() {
			comm, err := collective.New(ts[r], collective.DefaultConfig())
			if !assert.NoError(t, err) {
				return
			}
			buf := make([]float32, floats)
			for i := range buf {
				buf[i] = float32(r + 1)
			}
			assert.NoError(t, comm.Allreduce(ctx, buf, collective.Sum))
			results[r] = buf
		})
	}
	wg.Wait()
	for r := range n {
		require.Len(t, results[r], floats)
		assert.Equal(t, float32(1+2+3+4), results[r][0])
		assert.Equal(t, float32(1+2+3+4), results[r][floats-1])
		assert.Equal(t, int64(2*(n-1)*floats/n*4), written[r].Load(), "rank %d: bytes written through the wrapper", r)
		require.NoError(t, ts[r].Close())
		assert.Equal(t, int64(n-1), closed[r].Load(), "rank %d: wrappers closed", r)
	}
}

// TestAStraysWrapperIsClosed: a connection refused at its hello (or, under
// TLS, at its handshake) leaves no Config.WrapData wrapper open (the NIC
// model keeps a goroutine for each until it closes); every wrapper made is
// closed once the links are. Before, every accepted or dialed connection
// was wrapped at once and a refused one's wrapper was never closed.
func TestAStraysWrapperIsClosed(t *testing.T) {
	creds := testCreds(t, true)
	for _, tc := range []struct {
		name     string
		tls      bool
		insider  bool  // the stranger has the job's credentials and says hello as another job's rank
		wrappers int64 // made in all
	}{
		{"plaintext", false, false, 2},             // each end of the real link only
		{"TLS, a stranger", true, false, 3},        // and the stranger's, which its failed handshake ran over
		{"TLS, another job's rank", true, true, 4}, // and both ends of its link, refused at the hello
	} {
		t.Run(tc.name, func(t *testing.T) {
			var made, written, closed atomic.Int64
			cfgs, lis := acceptPair(t, false, func(cfg *Config) {
				cfg.WrapData = func(c net.Conn) net.Conn { made.Add(1); return countingConn{c, &written, &closed} }
				if tc.tls {
					cfg.Security = creds
				}
			})
			addr := lis.Addr().String()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			conns := make([]peerConn, 1)
			accepted := make(chan error, 1)
			if tc.insider {
				go func() { accepted <- accept(ctx, cfgs[1], lis, conns) }()
				other := cfgs[0]
				other.JobID = "another job"
				_, err := dial(ctx, other, 1, addr)
				require.ErrorContains(t, err, "another job")
			} else {
				stranger, err := net.Dial("tcp", addr) // queued before rank 0's
				require.NoError(t, err)
				defer stranger.Close()
				_, err = stranger.Write(appendHello(nil, hello{From: 0, To: 1, Size: 2, JobID: "another job"}))
				require.NoError(t, err)
				go func() { accepted <- accept(ctx, cfgs[1], lis, conns) }()
			}
			rank0, err := dial(ctx, cfgs[0], 1, addr)
			require.NoError(t, err)
			require.NoError(t, <-accepted) // the stranger was refused by then
			require.NoError(t, rank0.data.Close())
			require.NoError(t, conns[0].data.Close())
			assert.Equal(t, tc.wrappers, made.Load())
			assert.Equal(t, made.Load(), closed.Load(), "every wrapper made is closed")
		})
	}
}
