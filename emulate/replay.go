package emulate

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/sim"
	"github.com/shoalml/shoal/worker"
)

// Recording is one worker's pushes in a real run (shoal worker
// --record-pushes), as shard 0 saw them, with what the replay must match.
type Recording struct {
	Rank      int              `json:"rank"`
	WorldSize int              `json:"world_size"`
	Mode      consistency.Mode `json:"mode"`
	// Staleness is the shards' SSP bound.
	Staleness int64 `json:"staleness"`
	Servers   int   `json:"servers"`
	// Floats is the model's size; Batch and Seed the worker's.
	Floats int    `json:"floats"`
	Batch  int    `json:"batch"`
	Seed   uint64 `json:"seed"`
	// StartStep is where the worker began (> 0: it joined a run under
	// way, which cannot be replayed).
	StartStep int64               `json:"start_step"`
	Pushes    []worker.PushRecord `json:"pushes"`
}

// replayable says whether a run in mode with SSP bound staleness can be
// replayed: async and SSP with a bound of at least 1. Sync (and SSP with
// bound 0, the sync barrier) is one computation whatever the order.
func replayable(mode consistency.Mode, staleness int64) error {
	if mode != consistency.Async && mode != consistency.SSP || mode.Synchronous(staleness) {
		return fmt.Errorf("emulate: a %s run (bound %d) is not replayed: only async and ssp with a bound >= 1 have an order that matters (sync is the same computation in any order)", mode, staleness)
	}
	return nil
}

// Replay is the schedule of the run that recs recorded, one per worker
// (ranks 0 to N-1, any order): the order in which shard 0 answered the
// reads and applied the pushes. A push of clock c and staleness s was the
// shard's update c+s (from 0), and the read that gave a worker the
// weights of clock c came after update c-1 and before update c. Replay
// checks that the records agree with one another and with one run of
// every worker from step 0, each pushing every step and reading after its
// own push (no --push-every, --fetch-every or --overlap-push-pull, no
// worker that failed or joined late).
func Replay(recs []Recording) ([]sim.Op, error) {
	if len(recs) == 0 {
		return nil, fmt.Errorf("emulate: replay: no recordings")
	}
	first := recs[0]
	if err := replayable(first.Mode, first.Staleness); err != nil {
		return nil, err
	}
	if first.WorldSize < 1 || first.WorldSize > ps.MaxWorkers {
		return nil, fmt.Errorf("emulate: replay: worker %d's recording is of a job of %d workers, want 1..%d", first.Rank, first.WorldSize, ps.MaxWorkers)
	}
	byRank := make([]*Recording, first.WorldSize)
	for i := range recs {
		r := &recs[i]
		switch {
		case r.WorldSize != first.WorldSize || r.Mode != first.Mode || r.Staleness != first.Staleness || r.Servers != first.Servers ||
			r.Floats != first.Floats || r.Batch != first.Batch || r.Seed != first.Seed:
			return nil, fmt.Errorf("emulate: replay: worker %d's recording (%s, bound %d, %d workers, %d servers, %d floats, batch %d, seed %d) is of another job than worker %d's (%s, bound %d, %d workers, %d servers, %d floats, batch %d, seed %d)",
				r.Rank, r.Mode, r.Staleness, r.WorldSize, r.Servers, r.Floats, r.Batch, r.Seed,
				first.Rank, first.Mode, first.Staleness, first.WorldSize, first.Servers, first.Floats, first.Batch, first.Seed)
		case r.Rank < 0 || r.Rank >= r.WorldSize:
			return nil, fmt.Errorf("emulate: replay: a recording of rank %d in a job of %d workers", r.Rank, r.WorldSize)
		case byRank[r.Rank] != nil:
			return nil, fmt.Errorf("emulate: replay: two recordings of worker %d", r.Rank)
		case r.StartStep != 0:
			return nil, fmt.Errorf("emulate: replay: worker %d joined the run at step %d: only a run every worker made from step 0 can be replayed", r.Rank, r.StartStep)
		}
		byRank[r.Rank] = r
	}
	if missing := slices.Index(byRank, nil); missing >= 0 {
		return nil, fmt.Errorf("emulate: replay: %d recordings of a job of %d workers: worker %d's is missing", len(recs), first.WorldSize, missing)
	}

	// An op's place: a read of clock c before update c, a push after the
	// update it became and before the next; reads of one clock by worker.
	type placed struct {
		op    sim.Op
		clock int64
	}
	var ops []placed
	total := 0
	for _, r := range byRank {
		total += len(r.Pushes)
	}
	applied := make([]int, total) // 1 + the rank whose push became each update
	for _, r := range byRank {
		lastUpdate := int64(-1)
		for i, p := range r.Pushes {
			u := p.Clock + p.Staleness
			switch {
			case p.Step != int64(i):
				return nil, fmt.Errorf("emulate: replay: worker %d's push %d is of step %d: only a run in which every worker pushes every step from step 0 (--push-every 1, no worker that failed) can be replayed", r.Rank, i, p.Step)
			// Each bounded first, so that their sum cannot overflow.
			case p.Clock < 0 || p.Staleness < 0 || p.Clock >= int64(total) || p.Staleness >= int64(total) || u >= int64(total):
				return nil, fmt.Errorf("emulate: replay: worker %d's push of step %d was computed on clock %d with staleness %d, which is not one of the run's %d updates", r.Rank, p.Step, p.Clock, p.Staleness, total)
			case p.Clock <= lastUpdate:
				return nil, fmt.Errorf("emulate: replay: worker %d's step %d was computed on clock %d, before its own push of step %d (update %d) was applied: a run with --fetch-every > 1 or --overlap-push-pull cannot be replayed", r.Rank, p.Step, p.Clock, p.Step-1, lastUpdate)
			case applied[u] != 0:
				return nil, fmt.Errorf("emulate: replay: update %d was both worker %d's push and worker %d's (the recordings disagree)", u, applied[u]-1, r.Rank)
			}
			applied[u], lastUpdate = r.Rank+1, u
			ops = append(ops, placed{sim.Op{Worker: r.Rank, Step: p.Step, Read: true}, p.Clock}, placed{sim.Op{Worker: r.Rank, Step: p.Step}, u})
		}
	}
	slices.SortFunc(ops, func(a, b placed) int {
		// At one clock: the reads of it, then the push that moves past it.
		return cmp.Or(cmp.Compare(a.clock, b.clock), cmp.Compare(boolInt(!a.op.Read), boolInt(!b.op.Read)), cmp.Compare(a.op.Worker, b.op.Worker))
	})
	out := make([]sim.Op, len(ops))
	for i, p := range ops {
		out[i] = p.op
	}
	return out, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
