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
