package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func worker(rank int, addr string) Meta {
	return Meta{Role: RoleWorker, Rank: rank, GRPCAddr: addr}
}

func ps(shard int, addr string) Meta {
	return Meta{Role: RolePS, Rank: shard, GRPCAddr: addr}
}

func TestTracker(t *testing.T) {
	w0 := Member{"w0", "127.0.0.1:9000", worker(0, "h:1")}
	w1 := Member{"w1", "127.0.0.1:9001", worker(1, "h:2")}
	w1moved := Member{"w1", "127.0.0.1:9101", worker(1, "h:22")}
	p0 := Member{"p0", "127.0.0.1:9002", ps(0, "h:3")}
	p1 := Member{"p1", "127.0.0.1:9003", ps(1, "h:4")}
	join := func(m Member) Event { return Event{EventJoin, m.Name, m.Addr, m.Meta} }
	update := func(m Member) Event { return Event{EventUpdate, m.Name, m.Addr, m.Meta} }
	leave := func(m Member) Event { return Event{Kind: EventLeave, Name: m.Name} }
	dead := func(m Member) Event { return Event{Kind: EventDead, Name: m.Name} }

	// step is one event and the view it must yield (nil: no new view).
	type step struct {
		ev   Event
		want *View
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"joins are ordered servers first, then by rank", []step{
			{join(w1), &View{Version: 1, Members: []Member{w1}, Joined: []Member{w1}}},
			{join(p1), &View{Version: 2, Members: []Member{p1, w1}, Joined: []Member{p1}}},
			{join(w0), &View{Version: 3, Members: []Member{p1, w0, w1}, Joined: []Member{w0}}},
			{join(p0), &View{Version: 4, Members: []Member{p0, p1, w0, w1}, Joined: []Member{p0}}},
		}},
		{"a repeated join changes nothing", []step{
			{join(w0), &View{Version: 1, Members: []Member{w0}, Joined: []Member{w0}}},
			{join(w0), nil},
			{update(w0), nil},
		}},
		{"a death and a graceful leave", []step{
			{join(w0), &View{Version: 1, Members: []Member{w0}, Joined: []Member{w0}}},
			{join(w1), &View{Version: 2, Members: []Member{w0, w1}, Joined: []Member{w1}}},
			{dead(w1), &View{Version: 3, Members: []Member{w0}, Died: []Member{w1}}},
			{dead(w1), nil},
			{leave(w0), &View{Version: 4, Members: []Member{}, Left: []Member{w0}}},
			{leave(w0), nil},
		}},
		{"a leave or death of a stranger changes nothing", []step{
			{leave(w0), nil},
			{dead(w1), nil},
			{join(w0), &View{Version: 1, Members: []Member{w0}, Joined: []Member{w0}}},
		}},
		{"a dead node restarted at a new address rejoins", []step{
			{join(w0), &View{Version: 1, Members: []Member{w0}, Joined: []Member{w0}}},
			{join(w1), &View{Version: 2, Members: []Member{w0, w1}, Joined: []Member{w1}}},
			{dead(w1), &View{Version: 3, Members: []Member{w0}, Died: []Member{w1}}},
			{join(w1moved), &View{Version: 4, Members: []Member{w0, w1moved}, Rejoined: []Member{w1moved}}},
			{dead(w1moved), &View{Version: 5, Members: []Member{w0}, Died: []Member{w1moved}}},
			{join(w1), &View{Version: 6, Members: []Member{w0, w1}, Rejoined: []Member{w1}}},
		}},
		{"a node that left comes back", []step{
			{join(p0), &View{Version: 1, Members: []Member{p0}, Joined: []Member{p0}}},
			{leave(p0), &View{Version: 2, Members: []Member{}, Left: []Member{p0}}},
			{join(p0), &View{Version: 3, Members: []Member{p0}, Rejoined: []Member{p0}}},
		}},
		{"an update of address or metadata", []step{
			{join(w1), &View{Version: 1, Members: []Member{w1}, Joined: []Member{w1}}},
			{update(w1moved), &View{Version: 2, Members: []Member{w1moved}, Updated: []Member{w1moved}}},
			// memberlist may report a live node's new data as a join.
			{join(w1), &View{Version: 3, Members: []Member{w1}, Updated: []Member{w1}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker()
			for i, s := range tt.steps {
				v, changed, err := tr.Step(s.ev)
				require.NoError(t, err, "step %d (%v %s)", i, s.ev.Kind, s.ev.Name)
				if s.want == nil {
					assert.False(t, changed, "step %d (%v %s): want no view, got %+v", i, s.ev.Kind, s.ev.Name, v)
					continue
				}
				require.True(t, changed, "step %d (%v %s): want a view", i, s.ev.Kind, s.ev.Name)
				assert.Equal(t, *s.want, v, "step %d (%v %s)", i, s.ev.Kind, s.ev.Name)
				assert.Equal(t, View{Version: v.Version, Members: v.Members}, tr.View(), "step %d: View() after it", i)
			}
		})
	}
}

func TestTrackerRefuses(t *testing.T) {
	tests := []struct {
		name    string
		ev      Event
		wantMsg string
	}{
		{"no name", Event{Kind: EventJoin}, "join event with no node name"},
		{"unknown kind", Event{Kind: 9, Name: "w0"}, `for "w0": unknown kind EventKind(9)`},
		{"update of a stranger", Event{Kind: EventUpdate, Name: "w0"}, `update for "w0", which is not a live member`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker()
			_, changed, err := tr.Step(tt.ev)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantMsg)
			assert.False(t, changed)
			assert.Equal(t, View{Members: []Member{}}, tr.View(), "a refused event changes nothing")
		})
	}
}

// A View handed out is the receiver's: changing it does not reach the Tracker.
func TestTrackerViewsAreCopies(t *testing.T) {
	tr := NewTracker()
	v, _, err := tr.Step(Event{EventJoin, "w0", "a:1", worker(0, "h:1")})
	require.NoError(t, err)
	v.Members[0].Name = "changed"
	assert.Equal(t, "w0", tr.View().Members[0].Name)
}
