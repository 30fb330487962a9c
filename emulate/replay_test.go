package emulate_test

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/emulate"
	"github.com/shoalml/shoal/sim"
	"github.com/shoalml/shoal/worker"
)

// A run replayed from its workers' recordings is the same run: the
// schedule rebuilt from the pushes' clocks and stalenesses leads the
// shard through the same updates, to the bit. Here the recorded run is
// itself an emulation of a simulated schedule, whose order is known.
func TestAReplayIsTheRecordedRun(t *testing.T) {
	for _, tc := range []struct {
		mode      consistency.Mode
		n         int
		staleness int64
	}{{consistency.Async, 4, 0}, {consistency.SSP, 8, 1}} {
		cfg := job(t, tc.mode, tc.n, tc.staleness)
		recorded, err := emulate.Run(ctxT(t), cfg)
		require.NoError(t, err)
		require.Len(t, recorded.Recordings, tc.n)
		// Shuffled: Replay takes the recordings in any order.
		recs := slices.Clone(recorded.Recordings)
		slices.Reverse(recs)
		ops, err := emulate.Replay(recs)
		require.NoError(t, err)
		assert.Len(t, ops, 2*int(recorded.Updates), "a read and a push a step")

		cfg.Schedule = ops
		cfg.Sim.Jitter, cfg.Sim.Seed = 0, 99 // ignored: the schedule is given
		replayed, err := emulate.Run(ctxT(t), cfg)
		require.NoError(t, err, "%s N=%d", tc.mode, tc.n)
		assert.Equal(t, recorded.Staleness, replayed.Staleness, "%s N=%d", tc.mode, tc.n)
		assert.Equal(t, recorded.Curve, replayed.Curve, "%s N=%d", tc.mode, tc.n)
		assert.Equal(t, recorded.Recordings, replayed.Recordings, "%s N=%d", tc.mode, tc.n)
		assert.Zero(t, replayed.Simulated.Seconds, "nothing simulated")
	}
}

func TestReplayRefusesWhatItCannotReplay(t *testing.T) {
	// Two workers, two steps each: worker 0 pushes updates 0 and 2,
	// worker 1 updates 1 and 3.
	good := func() []emulate.Recording {
		rec := func(rank int, pushes ...worker.PushRecord) emulate.Recording {
			return emulate.Recording{Rank: rank, WorldSize: 2, Mode: consistency.Async, Servers: 1, Floats: 10, Batch: 4, Seed: 1, Pushes: pushes}
		}
		return []emulate.Recording{
			rec(0, worker.PushRecord{Step: 0, Clock: 0, Staleness: 0}, worker.PushRecord{Step: 1, Clock: 1, Staleness: 1}),
			rec(1, worker.PushRecord{Step: 0, Clock: 0, Staleness: 1}, worker.PushRecord{Step: 1, Clock: 2, Staleness: 1}),
		}
	}
	ops, err := emulate.Replay(good())
	require.NoError(t, err)
	assert.Equal(t, []sim.Op{
		{Worker: 0, Step: 0, Read: true}, {Worker: 1, Step: 0, Read: true}, {Worker: 0, Step: 0},
		{Worker: 0, Step: 1, Read: true}, {Worker: 1, Step: 0}, {Worker: 1, Step: 1, Read: true},
		{Worker: 0, Step: 1}, {Worker: 1, Step: 1},
	}, ops)

	for _, tc := range []struct {
		name   string
		mangle func([]emulate.Recording) []emulate.Recording
		want   string
	}{
		{"none", func([]emulate.Recording) []emulate.Recording { return nil }, "no recordings"},
		{"sync", func(r []emulate.Recording) []emulate.Recording {
			r[0].Mode, r[1].Mode = consistency.Sync, consistency.Sync
			return r
		}, "a sync run (bound 0) is not replayed"},
		{"ssp bound 0", func(r []emulate.Recording) []emulate.Recording {
			r[0].Mode, r[1].Mode = consistency.SSP, consistency.SSP
			return r
		}, "a ssp run (bound 0) is not replayed"},
		{"missing", func(r []emulate.Recording) []emulate.Recording { return r[:1] }, "worker 1's is missing"},
		{"no workers", func(r []emulate.Recording) []emulate.Recording { r[0].WorldSize = -1; return r }, "a job of -1 workers, want 1.."},
		{"too many workers", func(r []emulate.Recording) []emulate.Recording { r[0].WorldSize = 1 << 40; return r }, "a job of 1099511627776 workers, want 1.."},
		{"twice", func(r []emulate.Recording) []emulate.Recording { r[1].Rank = 0; return r }, "two recordings of worker 0"},
		{"rank", func(r []emulate.Recording) []emulate.Recording { r[1].Rank = 5; return r }, "rank 5 in a job of 2 workers"},
		{"other job", func(r []emulate.Recording) []emulate.Recording { r[1].Seed = 2; return r }, "is of another job"},
		{"late", func(r []emulate.Recording) []emulate.Recording { r[1].StartStep = 3; return r }, "joined the run at step 3"},
		{"gap", func(r []emulate.Recording) []emulate.Recording { r[0].Pushes[1].Step = 2; return r }, "push 1 is of step 2"},
		{"past the end", func(r []emulate.Recording) []emulate.Recording { r[1].Pushes[1].Staleness = 7; return r }, "not one of the run's 4 updates"},
		{"negative", func(r []emulate.Recording) []emulate.Recording { r[1].Pushes[1].Clock = -1; return r }, "not one of the run's 4 updates"},
		// Clock + staleness overflowed to a negative update, which
		// passed the check and panicked as an index.
		{"overflow", func(r []emulate.Recording) []emulate.Recording {
			r[1].Pushes[1].Clock, r[1].Pushes[1].Staleness = math.MaxInt64, 1
			return r
		}, "not one of the run's 4 updates"},
		{"overlap", func(r []emulate.Recording) []emulate.Recording {
			r[0].Pushes[1] = worker.PushRecord{Step: 1, Clock: 0, Staleness: 2}
			return r
		}, "before its own push of step 0 (update 0) was applied"},
		{"one update twice", func(r []emulate.Recording) []emulate.Recording { r[1].Pushes[0].Staleness = 0; return r }, "update 0 was both worker 0's push and worker 1's"},
	} {
		_, err := emulate.Replay(tc.mangle(good()))
		assert.ErrorContains(t, err, tc.want, tc.name)
	}
}

// A schedule that does not have every worker push every step of the job
// is refused before any worker starts.
func TestAGivenScheduleMustCoverTheJob(t *testing.T) {
	cfg := job(t, consistency.Async, 2, 0)
	cfg.Schedule = []sim.Op{{Worker: 0, Step: 0, Read: true}, {Worker: 0, Step: 0}}
	_, err := emulate.Run(ctxT(t), cfg)
	assert.ErrorContains(t, err, "the schedule has 1 pushes of worker 0, the job 64 steps a worker")
	cfg.Schedule = []sim.Op{{Worker: 2, Step: 0}}
	_, err = emulate.Run(ctxT(t), cfg)
	assert.ErrorContains(t, err, "the schedule has worker 2's push of step 0 in a job of 2 workers")
}
