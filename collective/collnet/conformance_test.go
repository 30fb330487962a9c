package collnet

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/collective/collectivetest"
)

// TestConformance runs the collective package's transport conformance
// suite over TCP and over shared memory.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds hundreds of groups: about 100 s with -race on 2 cores")
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			collectivetest.Conformance(t, func(t *testing.T, n int) []collective.Transport {
				// The suite closes the transports.
				cfgs := groupConfigs(t, n, m.shm)
				for i := range cfgs {
					cfgs[i].Logger = nil
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				ts, errs := connect(ctx, cfgs)
				for r, err := range errs {
					require.NoError(t, err, "rank %d", r)
				}
				return ts
			})
		})
	}
}
