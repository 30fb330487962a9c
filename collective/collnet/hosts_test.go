package collnet

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
)

// Every rank learns every rank's host id from the rendezvous and answers
// it through collective.HostLocator, so that a hierarchical allreduce
// groups the ranks as the shared-memory links do: two hosts of two here,
// each pair of a host over shared memory (in the shm mode), the others
// over TCP.
func TestHostOfIsTheRendezvousHostID(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			const n = 4
			ts := group(t, n, m.shm, func(cfg *Config) { cfg.HostID = fmt.Sprint("host-", cfg.Rank/2) })
			for r, tr := range ts {
				hl, ok := tr.(collective.HostLocator)
				require.True(t, ok, "rank %d: collnet's transport must be a collective.HostLocator", r)
				for peer := range n {
					assert.Equal(t, fmt.Sprint("host-", peer/2), hl.HostOf(peer), "rank %d: HostOf(%d)", r, peer)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			bufs := make([][]float32, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r, tr := range ts {
				cfg := collective.DefaultConfig()
				cfg.Algorithm = collective.Hierarchical
				c, err := collective.New(tr, cfg)
				require.NoError(t, err)
				bufs[r] = []float32{float32(r), 1, 2, float32(10 * r), 5}
				wg.Go(func() { errs[r] = c.Allreduce(ctx, bufs[r], collective.Sum) })
			}
			wg.Wait()
			for r := range n {
				require.NoError(t, errs[r], "rank %d", r)
				assert.Equal(t, []float32{6, 4, 8, 60, 20}, bufs[r], "rank %d", r)
			}
		})
	}
}
