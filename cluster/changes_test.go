package cluster

import (
	"fmt"
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

type fakeSet struct{ gone []int64 }

func (f *fakeSet) WorkerGone(r int64) bool   { f.gone = append(f.gone, r); return true }
func (f *fakeSet) StepsPushed(r int64) int64 { return 10 * r }

func TestFollowWorkers(t *testing.T) {
	fp := Fingerprint("model")
	tr := NewTracker()
	views := make(chan View, 8)
	step := func(ev Event) {
		v, changed, err := tr.Step(ev)
		require.NoError(t, err)
		require.True(t, changed)
		views <- v
	}
	for r, name := range []string{"worker-0", "worker-1", "worker-2"} {
		step(Event{Kind: EventJoin, Name: name, Meta: Meta{Role: RoleWorker, Rank: r, ModelFingerprint: fp}})
	}
	step(Event{Kind: EventJoin, Name: "ps-0", Meta: Meta{Role: RolePS, ModelFingerprint: fp}})
	step(Event{Kind: EventDead, Name: "worker-1"})
	step(Event{Kind: EventLeave, Name: "worker-2"})
	step(Event{Kind: EventJoin, Name: "worker-1", Addr: "new", Meta: Meta{Role: RoleWorker, Rank: 1, ModelFingerprint: fp}})
	close(views)

	set := &fakeSet{}
	var got []string
	FollowWorkers(views, fp, set, func(r Report) {
		got = append(got, fmt.Sprintf("%d %s steps=%d live=%d", r.Change.Member.Meta.Rank, r.Change.What(), r.Steps, r.Live))
	})
	assert.Equal(t, []int64{1, 2}, set.gone, "the dead and the leaver are taken out, nobody else")
	assert.Equal(t, []string{
		"0 joined steps=0 live=1", "1 joined steps=10 live=2", "2 joined steps=20 live=3",
		"1 died steps=10 live=2", "2 left steps=20 live=1", "1 rejoined steps=10 live=2",
	}, got)
}
