package collective

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memTransports returns the transports of NewMemGroup(n), closed when the
// test ends.
func memTransports(t *testing.T, n int) []Transport {
	ts := NewMemGroup(n)
	t.Cleanup(func() {
		for _, tr := range ts {
			assert.NoError(t, tr.Close())
		}
	})
	return ts
}

func TestMemGroup(t *testing.T) {
	ts := memTransports(t, 3)
	ctx := t.Context()
	for i, tr := range ts {
		assert.Equal(t, i, tr.Rank())
		assert.Equal(t, 3, tr.Size())
	}
	assert.EqualError(t, ts[0].Send(ctx, 0, []byte{1}), "mem transport: rank 0 cannot talk to peer 0 (want 0..2, not itself)")
	assert.Error(t, ts[0].Recv(ctx, 3, []byte{1}))
	assert.Error(t, ts[0].Send(ctx, -1, []byte{1}))

	// Bytes sent before a Close are still delivered; then the peer's
	// stream ends with a *PeerError naming it.
	require.NoError(t, ts[1].Send(ctx, 0, []byte{1, 2, 3}))
	require.NoError(t, ts[1].Close())
	got := make([]byte, 2)
	require.NoError(t, ts[0].Recv(ctx, 1, got))
	assert.Equal(t, []byte{1, 2}, got)
	err := ts[0].Recv(ctx, 1, got)
	var pe *PeerError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Rank)
	assert.ErrorIs(t, err, ErrPeer)
	assert.EqualError(t, err, "rank 1: peer closed its transport")
	require.ErrorAs(t, ts[2].Send(ctx, 1, []byte{1}), &pe)
	assert.Equal(t, 1, pe.Rank)

	// The closed rank's own calls fail with ErrClosed; Close is idempotent.
	assert.ErrorIs(t, ts[1].Send(ctx, 0, []byte{1}), ErrClosed)
	assert.ErrorIs(t, ts[1].Recv(ctx, 0, got), ErrClosed)

	// A done ctx fails a call even when it could proceed.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, ts[0].Send(cctx, 2, []byte{1}), context.Canceled)

	assert.Panics(t, func() { NewMemGroup(0) })
}

// TestMemStreamCompacts: a long-lived stream reuses its buffer instead of
// growing with everything ever sent.
func TestMemStreamCompacts(t *testing.T) {
	ts := memTransports(t, 2)
	ctx := t.Context()
	msg := make([]byte, 1000)
	got := make([]byte, 700)
	for range 1000 {
		require.NoError(t, ts[0].Send(ctx, 1, msg))
		require.NoError(t, ts[1].Recv(ctx, 0, got))
	}
	p := ts[0].(*memTransport).g.pipes[0][1]
	assert.Less(t, cap(p.data), 1<<20, "the stream buffer must not grow with the total sent")
}
