package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChanges(t *testing.T) {
	fp := Fingerprint("layout A")
	worker := func(rank int, fp uint64) Member {
		return Member{Name: "w", Meta: Meta{Role: RoleWorker, Rank: rank, ModelFingerprint: fp}}
	}
	tr := NewTracker()
	step := func(ev Event) View {
		t.Helper()
		v, changed, err := tr.Step(ev)
		require.NoError(t, err)
		require.True(t, changed)
		return v
	}
	w0, w1 := worker(0, fp), worker(1, fp)
	w0.Name, w1.Name = "worker-0", "worker-1"
	stranger := worker(5, Fingerprint("layout B"))
	stranger.Name = "worker-5"
	server := Member{Name: "ps-0", Meta: Meta{Role: RolePS, ModelFingerprint: fp}}

	v := step(Event{Kind: EventJoin, Name: w1.Name, Meta: w1.Meta})
	assert.Equal(t, []string{"joined"}, whats(Changes(v, RoleWorker, fp)))
	v = step(Event{Kind: EventJoin, Name: server.Name, Meta: server.Meta})
	assert.Empty(t, Changes(v, RoleWorker, fp), "a server is not a worker")
	v = step(Event{Kind: EventJoin, Name: stranger.Name, Meta: stranger.Meta})
	assert.Empty(t, Changes(v, RoleWorker, fp), "a worker of another model is not ours")
	assert.Len(t, Changes(v, RoleWorker, 0), 1, "fingerprint 0 takes any")
	v = step(Event{Kind: EventDead, Name: w1.Name})
	got := Changes(v, RoleWorker, fp)
	require.Len(t, got, 1)
	assert.Equal(t, "died", got[0].What())
	assert.Equal(t, 1, got[0].Member.Meta.Rank)
	v = step(Event{Kind: EventJoin, Name: w1.Name, Addr: "127.0.0.1:9", Meta: w1.Meta})
	assert.Equal(t, []string{"rejoined"}, whats(Changes(v, RoleWorker, fp)))
	step(Event{Kind: EventJoin, Name: w0.Name, Meta: w0.Meta})
	v = step(Event{Kind: EventLeave, Name: w0.Name})
	assert.Equal(t, []string{"left"}, whats(Changes(v, RoleWorker, fp)))
}

func whats(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.What())
	}
	return out
}

func TestFingerprint(t *testing.T) {
	assert.NotEqual(t, Fingerprint("a"), Fingerprint("b"))
	assert.Equal(t, Fingerprint("a"), Fingerprint("a"))
	assert.NotZero(t, Fingerprint(""))
}
