package collectivetest

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
)

// messageSizes are the Sends of one stream in the SendRecv test.
var messageSizes = []int{1, 2, 3, 7, 64, 1000, 4099, 100003}

// streamBytes is the content of the stream from rank from to rank to.
func streamBytes(from, to int) []byte {
	total := 0
	for _, s := range messageSizes {
		total += s
	}
	b := make([]byte, total)
	rng := rand.New(rand.NewPCG(uint64(from), uint64(to)))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func testTransport(t *testing.T, mk NewGroupFunc) {
	for _, n := range []int{2, 3, 4} {
		t.Run(name("SendRecv/N=%d", n), func(t *testing.T) { testSendRecv(t, mk, n) })
	}
	t.Run("RecvDeadline", func(t *testing.T) {
		g := newGroup(t, mk, 2, cfg(0, collective.None))
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		err := g.ts[0].Recv(ctx, 1, make([]byte, 8))
		assert.ErrorIs(t, err, context.DeadlineExceeded, "Recv from a silent peer must return ctx's error")
	})
	t.Run("RecvCancel", func(t *testing.T) {
		g := newGroup(t, mk, 2, cfg(0, collective.None))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- g.ts[1].Recv(ctx, 0, make([]byte, 8)) }()
		cancel()
		select {
		case err := <-done:
			assert.ErrorIs(t, err, context.Canceled, "Recv must return ctx's error when ctx is cancelled")
		case <-time.After(callTimeout):
			t.Fatal("Recv ignored the cancellation of its ctx")
		}
	})
	t.Run("PeerClose", func(t *testing.T) {
		// Rank 2 closes while rank 0 waits on it; ranks 0 and 1 then
		// see it as a failed peer but still talk to each other.
		g := newGroup(t, mk, 3, cfg(0, collective.None))
		ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
		defer cancel()
		pending := make(chan error, 1)
		go func() { pending <- g.ts[0].Recv(ctx, 2, make([]byte, 8)) }()
		g.close(2)
		requirePeerError(t, <-pending, 2, "pending Recv from a peer that closed")
		requirePeerError(t, g.ts[1].Recv(ctx, 2, make([]byte, 8)), 2, "Recv from a peer that closed")

		var sendErr error
		chunk := make([]byte, 64<<10)
		for range 256 { // 16 MiB: more than any socket buffer
			if sendErr = g.ts[1].Send(ctx, 2, chunk); sendErr != nil {
				break
			}
		}
		requirePeerError(t, sendErr, 2, "Send to a peer that closed (within 16 MiB)")

		msg := []byte("still here")
		var wg sync.WaitGroup
		wg.Go(func() { assert.NoError(t, g.ts[0].Send(ctx, 1, msg), "Send 0→1 after rank 2 closed") })
		got := make([]byte, len(msg))
		assert.NoError(t, g.ts[1].Recv(ctx, 0, got), "Recv 1←0 after rank 2 closed")
		wg.Wait()
		assert.Equal(t, msg, got)
	})
	t.Run("OwnClose", func(t *testing.T) {
		g := newGroup(t, mk, 2, cfg(0, collective.None))
		ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
		defer cancel()
		pending := make(chan error, 1)
		go func() { pending <- g.ts[0].Recv(ctx, 1, make([]byte, 8)) }()
		g.close(0)
		err := <-pending
		require.Error(t, err, "a Recv in flight must fail when its own transport closes")
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "Close must end the pending Recv, not its deadline")
		assert.Error(t, g.ts[0].Recv(ctx, 1, make([]byte, 8)), "Recv after Close")
	})
}

// testSendRecv sends a stream of mixed-size messages along every ordered
// pair at once and reads each back with a different split: small reads
// that cut messages, then one read that merges the rest.
func testSendRecv(t *testing.T, mk NewGroupFunc, n int) {
	g := newGroup(t, mk, n, cfg(0, collective.None))
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2*n*n)
	for from := range n {
		for to := range n {
			if from == to {
				continue
			}
			want := streamBytes(from, to)
			wg.Go(func() {
				off := 0
				for _, s := range messageSizes {
					if err := g.ts[from].Send(ctx, to, want[off:off+s]); err != nil {
						errs <- err
						return
					}
					off += s
				}
			})
			wg.Go(func() {
				got := make([]byte, len(want))
				off := 0
				for i := 0; off < 8000; i++ {
					s := []int{5, 1, 17, 4093}[i%4]
					if err := g.ts[to].Recv(ctx, from, got[off:off+s]); err != nil {
						errs <- err
						return
					}
					off += s
				}
				if err := g.ts[to].Recv(ctx, from, got[off:]); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, want) {
					i := 0
					for got[i] == want[i] {
						i++
					}
					t.Errorf("stream %d→%d: byte %d of %d differs (lost, reordered or corrupted data)", from, to, i, len(want))
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// requirePeerError fails unless err is a *PeerError naming rank that
// also matches collective.ErrPeer, and is not a deadline.
func requirePeerError(t *testing.T, err error, rank int, what string) {
	t.Helper()
	require.Error(t, err, what)
	var pe *collective.PeerError
	require.ErrorAs(t, err, &pe, "%s: want a *collective.PeerError", what)
	assert.Equal(t, rank, pe.Rank, "%s: PeerError.Rank", what)
	assert.ErrorIs(t, err, collective.ErrPeer, what)
	assert.False(t, errors.Is(err, context.DeadlineExceeded), "%s: failed only at the deadline: %v", what, err)
}
