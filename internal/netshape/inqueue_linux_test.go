package netshape

import (
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKernelQueue reads what waits in a loopback TCP socket's receive queue,
// without allocating.
func TestKernelQueue(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		assert.NoError(t, err)
		accepted <- c
	}()
	a, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer a.Close()
	b := <-accepted
	require.NotNil(t, b)
	defer b.Close()

	probe := newQueueProbe(b)
	n, ok := probe.waiting()
	assert.True(t, ok)
	assert.Zero(t, n)

	_, err = a.Write(make([]byte, 1000)) // one segment on loopback
	require.NoError(t, err)
	_, err = io.ReadFull(b, make([]byte, 10))
	require.NoError(t, err)
	n, ok = probe.waiting()
	assert.True(t, ok)
	assert.Equal(t, 990, n)
	assert.Zero(t, testing.AllocsPerRun(100, func() { probe.waiting() }), "a Read's probe allocates")

	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	_, ok = newQueueProbe(p).waiting()
	assert.False(t, ok, "a pipe has no kernel queue")
}
