package cluster

import (
	"cmp"
	"fmt"
	"slices"
)

// EventKind is what happened to a node.
type EventKind uint8

// Event kinds, as memberlist reports them.
const (
	EventJoin   EventKind = iota + 1 // a node became alive
	EventUpdate                      // a live node changed its address or metadata
	EventLeave                       // a node left gracefully
	EventDead                        // a node was declared dead by failure detection
)

func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventLeave:
		return "leave"
	case EventDead:
		return "dead"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one membership event. Addr and Meta matter for join and update;
// leave and dead need only Name.
type Event struct {
	Kind EventKind
	Name string
	// Addr is the node's gossip address, host:port.
	Addr string
	Meta Meta
}

// Member is one live node.
type Member struct {
	Name string
	Addr string // gossip address, host:port
	Meta Meta
}

// View is the membership after a change. A View and its slices belong to
// the receiver; the Tracker keeps no reference to them.
type View struct {
	// Version increases by one with every view a Tracker yields; the
	// first is 1.
	Version uint64
	// Members are the live nodes, ordered by role (servers first), then
	// rank, then name.
	Members []Member
	// What changed since the previous view, each in the same order as
	// Members. A node that comes back under a name that had left or died
	// (a restarted process, possibly at a new address) is in Rejoined, not
	// Joined.
	Joined, Rejoined, Updated []Member
	// Left (gracefully) and Died (declared dead) hold the member as it
	// last was.
	Left, Died []Member
}

// Tracker turns membership events into versioned Views. It is a plain
// state machine: no goroutines, no clocks, no locks; the caller serialises
// calls.
type Tracker struct {
	version uint64
	live    map[string]Member
	// gone holds the names that left or died, so that their return is
	// told apart from a first join.
	gone map[string]bool
}

// NewTracker returns a Tracker with no members, at version 0.
func NewTracker() *Tracker {
	return &Tracker{live: make(map[string]Member), gone: make(map[string]bool)}
}

// Step applies ev. When membership changed it returns the new View and
// true; an event that changes nothing (a repeated join, an update with
// identical data, the leave of a node not live) returns false. An event
// with no name or an unknown kind, or an update for a node that is not
// live, is an error and changes nothing.
func (t *Tracker) Step(ev Event) (View, bool, error) {
	if ev.Name == "" {
		return View{}, false, fmt.Errorf("membership %v event with no node name", ev.Kind)
	}
	var v View
	m := Member{Name: ev.Name, Addr: ev.Addr, Meta: ev.Meta}
	old, isLive := t.live[ev.Name]
	switch ev.Kind {
	case EventJoin, EventUpdate:
		switch {
		case isLive && old == m:
			return View{}, false, nil
		case isLive:
			v.Updated = []Member{m}
		case ev.Kind == EventUpdate:
			return View{}, false, fmt.Errorf("membership update for %q, which is not a live member", ev.Name)
		case t.gone[ev.Name]:
			v.Rejoined = []Member{m}
			delete(t.gone, ev.Name)
		default:
			v.Joined = []Member{m}
		}
		t.live[ev.Name] = m
	case EventLeave, EventDead:
		if !isLive {
			return View{}, false, nil
		}
		if ev.Kind == EventLeave {
			v.Left = []Member{old}
		} else {
			v.Died = []Member{old}
		}
		delete(t.live, ev.Name)
		t.gone[ev.Name] = true
	default:
		return View{}, false, fmt.Errorf("membership event for %q: unknown kind %v, want join, update, leave or dead", ev.Name, ev.Kind)
	}
	t.version++
	v.Version = t.version
	v.Members = t.members()
	return v, true, nil
}

// View returns the current membership with no changes listed.
func (t *Tracker) View() View {
	return View{Version: t.version, Members: t.members()}
}

func (t *Tracker) members() []Member {
	ms := make([]Member, 0, len(t.live))
	for _, m := range t.live {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, compareMembers)
	return ms
}

func compareMembers(a, b Member) int {
	return cmp.Or(
		cmp.Compare(a.Meta.Role, b.Meta.Role),
		cmp.Compare(a.Meta.Rank, b.Meta.Rank),
		cmp.Compare(a.Name, b.Name),
	)
}
