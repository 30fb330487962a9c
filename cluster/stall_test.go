package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stallFor is how long a process of a busy machine goes unscheduled in
// TestAStalledNodeIsNotDeclaredDead: a node hears nothing and says nothing
// for that long, then goes on (worse than a stall, where the packets wait
// in the socket: here they are lost). On a 2-core machine running a
// CNN's workers beside other work, live workers were declared dead, and
// in sync mode the false death changed the result.
const stallFor = 1500 * time.Millisecond

// TestAStalledNodeIsNotDeclaredDead: with LoopbackDetection, the profile
// of every process shoal train starts, a node silent for stallFor is
// suspected and refutes it once it runs again: no member sees it die
// (or come back), while a node that stays silent is still declared dead.
func TestAStalledNodeIsNotDeclaredDead(t *testing.T) {
	d := LoopbackDetection()
	// Suspicion must outlast the stall with room to spare: the probe
	// that finds it, the suspicion time, and the refutation's gossip.
	require.GreaterOrEqual(t, time.Duration(d.SuspicionMult)*d.ProbeInterval, 2*stallFor)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	start := func(name string, rank int) (*Membership, *cutTransport) {
		return startCut(t, name, rank, func(*Detection) {})
	}
	a, _ := start("w0", 0)
	b, _ := start("w1", 1)
	c, cut := start("w2", 2)
	require.NoError(t, b.Join(ctx, []string{a.Addr()}))
	require.NoError(t, c.Join(ctx, []string{a.Addr()}))
	for _, m := range []*Membership{a, b, c} {
		waitView(ctx, t, m, "3 members", func(v View) bool { return len(v.Members) == 3 })
	}

	// c stalls, then runs again; a and b are watched for the stall and
	// twice the suspicion time after it.
	cut.cut.Store(true)
	stalled := time.NewTimer(stallFor)
	watch := time.NewTimer(stallFor + 2*time.Duration(d.SuspicionMult)*d.ProbeInterval)
	var died, back []string
	for done := false; !done; {
		select {
		case <-stalled.C:
			cut.cut.Store(false)
		case v := <-a.Views():
			died, back = seen(v, "a", died, back)
		case v := <-b.Views():
			died, back = seen(v, "b", died, back)
		case <-watch.C:
			done = true
		}
	}
	assert.Empty(t, died, "a stalled node was declared dead")
	assert.Empty(t, back, "a stalled node was declared dead and came back")
	assert.Len(t, a.View().Members, 3)
	assert.Len(t, b.View().Members, 3)

	// A node that stays silent still dies.
	cut.cut.Store(true)
	for _, m := range []*Membership{a, b} {
		waitView(ctx, t, m, "w2 dead", func(v View) bool { return !slices.Contains(names(v.Members), "w2") })
	}
}

// seen adds to died and back what view v of node who says of w2.
func seen(v View, who string, died, back []string) ([]string, []string) {
	if slices.Contains(names(v.Died), "w2") {
		died = append(died, who)
	}
	if slices.Contains(names(v.Rejoined), "w2") {
		back = append(back, who)
	}
	return died, back
}
