package elastic

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/worker"
)

// dyingTransport closes itself after `after` Sends: a root that dies
// part-way through a generation's state broadcast.
type dyingTransport struct {
	collective.Transport
	after int32
	n     atomic.Int32
}

func (d *dyingTransport) Send(ctx context.Context, peer int, buf []byte) error {
	if d.n.Add(1) > d.after {
		d.Transport.Close()
	}
	return d.Transport.Send(ctx, peer, buf)
}

// TestAFailedSyncLeavesTheMemberItsOwnState: when the root dies while
// broadcasting its weights, a member's sync fails and leaves it with its
// own weights whole. Before, they were half overwritten in place while its
// position, optimizer state and generation stayed its own, so it could
// become the next generation's root and hand the mix on.
func TestAFailedSyncLeavesTheMemberItsOwnState(t *testing.T) {
	j := newJob(t, 2)
	cfg := j.member(1, 2)
	n := len(cfg.Initial)
	mk := func(step int64, v float32, c Config) *member {
		p := make([]float32, n)
		for i := range p {
			p[i] = v
		}
		return &member{cfg: c, log: slog.New(slog.DiscardHandler), params: p, pos: position{step: step}, per: 10, synced: 1}
	}
	root := mk(7, 1, j.member(0, 2)) // finished step 7 before the failure
	other := mk(6, 2, cfg)           // had not
	ts := collective.NewMemGroup(2)
	dying := &dyingTransport{Transport: ts[0], after: 3 + 5} // head (3 segments), then 5 segments of weights
	ccfg := collective.Config{SegmentBytes: 16, CallTimeout: 5 * time.Second}
	var errs [2]error
	var wg sync.WaitGroup
	for r, tr := range []collective.Transport{dying, ts[1]} {
		m := []*member{root, other}[r]
		wg.Go(func() {
			comm, err := collective.New(tr, ccfg)
			require.NoError(t, err)
			ring, err := worker.NewRing(comm, n, worker.RingConfig{Optimizer: cfg.Ring.Optimizer, Synced: true})
			require.NoError(t, err)
			errs[r] = m.sync(context.Background(), comm, ring, 0)
		})
	}
	wg.Wait()
	ts[1].Close()
	require.Error(t, errs[1], "the root died mid-broadcast")
	t.Logf("member's sync error: %v", errs[1])
	own := slices.Repeat([]float32{2}, n)
	assert.Equal(t, own, other.params, "after a failed sync the member holds its own weights (2), none of the root's (1)")
	assert.Equal(t, int64(6), other.pos.step, "and its own position")
}
