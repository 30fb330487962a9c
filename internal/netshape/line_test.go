package netshape

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLine checks the bucket kept as a clock: 1000 bytes/s, 100 bytes deep.
func TestLine(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

	t.Run("a full bucket passes at once, then the line rate", func(t *testing.T) {
		l := newLine(1000, 100)
		assert.Equal(t, t0, l.reserve(t0, 100))
		assert.Equal(t, ms(50), l.reserve(t0, 50))
		assert.Equal(t, ms(150), l.reserve(t0, 100))
	})
	t.Run("an idle line refills the bucket, no further", func(t *testing.T) {
		l := newLine(1000, 100)
		l.reserve(t0, 100)
		assert.Equal(t, ms(5000), l.reserve(ms(5000), 100))
		assert.Equal(t, ms(5100), l.reserve(ms(5000), 100))
	})
	t.Run("a half-full bucket", func(t *testing.T) {
		l := newLine(1000, 100)
		l.reserve(t0, 100)
		assert.Equal(t, ms(50), l.reserve(ms(50), 50))
		assert.Equal(t, ms(100), l.reserve(ms(50), 50))
	})
	t.Run("bytes booked from the past leave at once while the line owes them time", func(t *testing.T) {
		// A process queues 1000 bytes at t0 and gets a core again at 600 ms:
		// the pieces it books from when they were queued are due in the past,
		// and the line goes on from the last of them.
		l := newLine(1000, 100)
		due := t0
		for range 6 {
			due = l.reserve(due, 100)
		}
		assert.Equal(t, ms(500), due)
		assert.Equal(t, ms(600), l.reserve(ms(600), 100))
		assert.Equal(t, ms(700), l.reserve(ms(600), 100))
	})
	t.Run("took", func(t *testing.T) {
		assert.Equal(t, 250*time.Millisecond, newLine(1000, 100).took(250))
	})
}

// TestHostFileSharesTheLines: NICs that open one host file (the
// processes of a fake host) reserve on the same two lines, so what one
// sends waits for what the other sent; a NIC of its own does not, and
// the host's egress is not its ingress. 1 GB/s: a byte a nanosecond.
func TestHostFileSharesTheLines(t *testing.T) {
	file := filepath.Join(t.TempDir(), "host-0")
	cfg := Config{Gbps: 8, Burst: 64 << 10, HostFile: file}
	a, err := New(cfg)
	require.NoError(t, err)
	b, err := New(cfg) // another process would map the same file
	require.NoError(t, err)
	alone, err := New(Config{Gbps: 8, Burst: 64 << 10})
	require.NoError(t, err)
	at := time.Now()
	assert.True(t, a.out.reserve(at, 64<<10).Equal(at), "a's bucket's worth passes at once")
	assert.True(t, b.out.reserve(at, 1<<20).Equal(at.Add(1<<20)), "b waits for a's bytes: one line")
	assert.True(t, alone.out.reserve(at, 1<<20).Equal(at.Add(1<<20-64<<10)), "a NIC of its own has its bucket")
	assert.True(t, b.in.reserve(at, 64<<10).Equal(at), "the ingress is another line")
	assert.True(t, a.in.reserve(at, 1<<20).Equal(at.Add(1<<20)), "shared too")
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	require.NoError(t, alone.Close())

	_, err = New(Config{Gbps: 8, HostFile: filepath.Join(t.TempDir(), "no-such-dir", "host-0")})
	assert.ErrorContains(t, err, "no-such-dir/host-0")
}
