//go:build linux

package collnet

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeMeminfo makes the machine look as if it had total bytes of memory,
// available of them free, until the test ends.
func fakeMeminfo(t *testing.T, total, available int64, err error) {
	old := meminfo
	meminfo = func() (int64, int64, error) { return total, available, err }
	t.Cleanup(func() { meminfo = old })
}

func TestRoomForRingLeavesAQuarterOfTheMemory(t *testing.T) {
	const gib = 1 << 30
	fakeMeminfo(t, 16*gib, 8*gib, nil)
	assert.NoError(t, roomForRing(4<<20))
	fakeMeminfo(t, 16*gib, 4*gib+1<<20, nil)
	assert.NoError(t, roomForRing(1<<20), "exactly a quarter left")
	assert.ErrorContains(t, roomForRing(1<<20+1), "want at least a quarter left")
	fakeMeminfo(t, 0, 0, errors.New("no /proc"))
	assert.NoError(t, roomForRing(4<<20), "fallocate's ENOSPC is the only limit without meminfo")
}

// The real /proc/meminfo parses, and says something sensible.
func TestMeminfo(t *testing.T) {
	total, available, err := meminfo()
	require.NoError(t, err)
	assert.Positive(t, available)
	assert.LessOrEqual(t, available, total)
}

// Ranks whose rings would take the memory below a quarter talk over TCP
// instead, and leave no ring file behind.
func TestATightMachineGetsTCPInsteadOfRings(t *testing.T) {
	fakeMeminfo(t, 16<<30, 4<<30, nil)
	ts := group(t, 3, true, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for r, tr := range ts {
		for _, l := range tr.(*transport).links {
			if l != nil {
				assert.Nil(t, l.send, "rank %d's link to %d has a ring", r, l.peer)
				assert.Nil(t, l.recv, "rank %d's link to %d has a ring", r, l.peer)
			}
		}
	}
	done := make(chan error, 1)
	go func() { done <- ts[1].Send(ctx, 0, []byte("over tcp")) }()
	got := make([]byte, 8)
	require.NoError(t, ts[0].Recv(ctx, 1, got))
	require.NoError(t, <-done)
	assert.Equal(t, "over tcp", string(got))
}
