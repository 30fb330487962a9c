package collnet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
)

// TestFirstFailureNamesTheRootCause: in a ring of four, rank 2 dies; rank
// 3 sees it and reports first; rank 0, which only sees rank 3 leave,
// learns from the record that rank 2 failed first.
func TestFirstFailureNamesTheRootCause(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ts := group(t, 4, m.shm, nil)
			require.NoError(t, ts[2].Close())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := ts[3].Recv(ctx, 2, make([]byte, 4))
			var pe *collective.PeerError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, 2, pe.Rank)
			first := FirstFailure(ts[3], err)
			assert.Equal(t, err, first, "the rank that saw the first failure gets its own error back")

			// Rank 3 exits because of it; rank 0 sees only that.
			require.NoError(t, ts[3].Close())
			err = ts[0].Recv(ctx, 3, make([]byte, 4))
			require.ErrorAs(t, err, &pe)
			require.Equal(t, 3, pe.Rank)
			got := FirstFailure(ts[0], err)
			assert.ErrorAs(t, got, &pe, "the annotation keeps the error's chain")
			assert.Contains(t, got.Error(), "the first failure: rank 2, reported by rank 3")

			// Errors that name no peer pass through unchanged.
			plain := fmt.Errorf("not a peer error")
			assert.Equal(t, plain, FirstFailure(ts[1], plain))
			require.NoError(t, ts[1].Close())
			require.NoError(t, ts[0].Close())
		})
	}
}
