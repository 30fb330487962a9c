package cluster

// Done tells from the workers' reports (FollowWorkers) when a job's run
// is over: every one of its Workers ranks has come, none is left, and at
// least one ended its run (left gracefully); a straggler's death may come
// last. A worker that finished before the others joined (async lets it)
// does not end the run for them. It is a plain state machine: no lock,
// clock or goroutine; the caller serializes Step and times the wait for
// ranks that never came.
type Done struct {
	// Workers is the job's number of workers, ranks 0..Workers-1.
	Workers int

	finished bool         // some worker left gracefully: it ended its run
	seen     map[int]bool // the ranks seen
}

// Step takes in one report. over says whether every worker that came has
// left, one at least gracefully; missing then lists the ranks that never
// came (none: the run is over; some: the caller waits a while for them,
// and a later report, such as one of them joining, calls off the wait).
func (d *Done) Step(r Report) (over bool, missing []int) {
	if d.seen == nil {
		d.seen = map[int]bool{}
	}
	d.seen[r.Change.Member.Meta.Rank] = true
	d.finished = d.finished || r.Change.Kind == EventLeave
	if r.Live > 0 || !d.finished {
		return false, nil
	}
	for rank := range d.Workers {
		if !d.seen[rank] {
			missing = append(missing, rank)
		}
	}
	return true, missing
}
