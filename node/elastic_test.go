package node

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/elastic"
	"github.com/shoalml/shoal/launch"
)

// TestEveryReformIsAMemberEvent: the new rank 0 of each generation after
// the first tells the launcher what changed: the members that died and
// joined, and, where the ring formed again with the same members (a
// forged or spurious re-form, a collective that broke with nobody gone),
// one "reformed" event with the reason, where it used to say nothing.
func TestEveryReformIsAMemberEvent(t *testing.T) {
	var out bytes.Buffer
	r := ringRun{WorkerConfig: &WorkerConfig{Events: true}, out: &out}
	on := r.generationEvents()
	on(elastic.Generation{Number: 1, Members: []int{0, 1, 2}, Rank: 0, Joined: []int{0, 1, 2}, Reason: "start"})
	on(elastic.Generation{Number: 2, Members: []int{0, 1, 2}, Rank: 0, Step: 40, Reason: "collective: peer 2: connection reset"})
	on(elastic.Generation{Number: 3, Members: []int{0, 2}, Rank: 0, Left: []int{1}, Step: 70, Reason: "collective: peer 1: EOF"})
	on(elastic.Generation{Number: 4, Members: []int{0, 2}, Rank: 1, Step: 90, Reason: "a member asked to join"}) // not rank 0: says nothing

	var got []launch.Event
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e launch.Event
		require.NoError(t, json.Unmarshal([]byte(line), &e), "line %q", line)
		got = append(got, e)
	}
	assert.Equal(t, []launch.Event{
		{Event: launch.Member, Role: launch.RingRole, Change: launch.Reformed, Steps: 40, Live: 3, Reason: "collective: peer 2: connection reset"},
		{Event: launch.Member, Role: "worker", Rank: 1, Change: "died", Steps: 70, Live: 2},
	}, got)
}
