package cluster

import (
	"hash/fnv"
	"slices"
)

// Change is one thing that happened to one member of a job, as a View
// lists it.
type Change struct {
	// Kind is EventJoin (first join, or a rejoin when Rejoined is set),
	// EventLeave or EventDead; updates are not changes of membership.
	Kind     EventKind
	Rejoined bool
	Member   Member
}

// What says what happened in the words of a log line: "joined",
// "rejoined", "left" or "died".
func (c Change) What() string {
	switch {
	case c.Kind == EventJoin && c.Rejoined:
		return "rejoined"
	case c.Kind == EventJoin:
		return "joined"
	case c.Kind == EventLeave:
		return "left"
	case c.Kind == EventDead:
		return "died"
	}
	return c.Kind.String()
}

// Changes lists the joins, rejoins, leaves and deaths of v among the
// members of role that train the model with fingerprint (0: any), ordered
// by rank. Members of another job (another fingerprint) are left out, so
// that a process that joined the wrong cluster cannot change this one.
func Changes(v View, role Role, fingerprint uint64) []Change {
	var out []Change
	add := func(kind EventKind, rejoined bool, ms []Member) {
		for _, m := range ms {
			if m.Meta.Role == role && (fingerprint == 0 || m.Meta.ModelFingerprint == fingerprint) {
				out = append(out, Change{Kind: kind, Rejoined: rejoined, Member: m})
			}
		}
	}
	add(EventJoin, false, v.Joined)
	add(EventJoin, true, v.Rejoined)
	add(EventLeave, false, v.Left)
	add(EventDead, false, v.Died)
	slices.SortStableFunc(out, func(a, b Change) int { return compareMembers(a.Member, b.Member) })
	return out
}

// Fingerprint is a model fingerprint for Meta: FNV-1a of a description
// that differs between models (Shoal uses the layout of the parameter
// vector). It is never 0.
func Fingerprint(desc string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(desc))
	return max(h.Sum64(), 1)
}

// WorkerSet is what follows the workers' membership: a parameter-server
// shard (ps.Server) in Shoal.
type WorkerSet interface {
	// WorkerGone takes a worker that died or left out of the set.
	WorkerGone(rank int64) bool
	// StepsPushed is how many steps the worker had pushed.
	StepsPushed(rank int64) int64
}

// Report is one worker's change as FollowWorkers applied it.
type Report struct {
	Change Change
	// Steps the worker had pushed to the set; Live workers of the job in
	// the view.
	Steps int64
	Live  int
	View  uint64
}

// FollowWorkers applies the workers' changes in each view to set until
// views is closed: a worker that died or left is taken out (WorkerGone);
// one that comes back rejoins the set itself (over JoinWorker), so a join
// is only reported. Members of another job (another fingerprint, unless
// it is 0) are ignored. report gets every change, in order.
func FollowWorkers(views <-chan View, fingerprint uint64, set WorkerSet, report func(Report)) {
	for v := range views {
		live := 0
		for _, m := range v.Members {
			if m.Meta.Role == RoleWorker && (fingerprint == 0 || m.Meta.ModelFingerprint == fingerprint) {
				live++
			}
		}
		for _, c := range Changes(v, RoleWorker, fingerprint) {
			rank := int64(c.Member.Meta.Rank)
			if c.Kind == EventLeave || c.Kind == EventDead {
				set.WorkerGone(rank)
			}
			report(Report{Change: c, Steps: set.StepsPushed(rank), Live: live, View: v.Version})
		}
	}
}
