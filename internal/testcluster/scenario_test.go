package testcluster_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/internal/testcluster"
)

// reached waits until the stalled worker blocks.
func reached(ctx context.Context, t *testing.T, st *testcluster.Stall, what string) {
	t.Helper()
	select {
	case <-st.Reached():
	case <-ctx.Done():
		t.Fatalf("waiting until %s: %v", what, ctx.Err())
	}
}

// pushed says whether every shard has steps steps from each of ranks.
func pushed(s *testcluster.Scenario, steps int64, ranks ...int64) func() bool {
	return func() bool {
		for _, core := range s.Cores() {
			for _, r := range ranks {
				if core.StepsPushed(r) != steps {
					return false
				}
			}
		}
		return true
	}
}

// ranEveryStep waits for each of ranks and checks that it ran all steps.
func ranEveryStep(ctx context.Context, t *testing.T, s *testcluster.Scenario, steps int64, ranks ...int) {
	t.Helper()
	for _, r := range ranks {
		res, err := s.Wait(ctx, r)
		require.NoError(t, err, "worker %d", r)
		assert.Equal(t, steps, res.Steps, "worker %d ran every step", r)
	}
}

// TestKill: worker 1 of 3 dies before its push of step 3. In sync the
// step it held up goes on with the survivors' pushes (one short step) and
// later steps wait only for them; in SSP the bound stops waiting for it;
// async never waited. Either way the survivors run every step.
func TestKill(t *testing.T) {
	const killedAt = 3
	for _, tc := range []struct {
		name      string
		mode      consistency.Mode
		staleness int64
		// survivors is how many steps each survivor pushed when worker 1
		// dies (0: not waited for), held is each shard's clock then.
		survivors, held int64
		short           int64
		live            []int64
		clock           func(steps int64) int64 // each shard's at the end
	}{
		// Both pushed step 3 and wait at its barrier for worker 1.
		{"sync", consistency.Sync, 0, killedAt + 1, killedAt, 1, []int64{0, 2}, func(n int64) int64 { return n }},
		// Both pushed step 4, one ahead of worker 1's 3 steps, and their
		// pulls for step 5 wait; every push is an update.
		{"ssp", consistency.SSP, 1, killedAt + 2, killedAt + 2*(killedAt+2), 0, []int64{0, 2}, func(n int64) int64 { return killedAt + 2*n }},
		{"async", consistency.Async, 0, 0, 0, 0, nil, func(n int64) int64 { return killedAt + 2*n }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			cfg := testcluster.DefaultScenarioConfig()
			cfg.Mode, cfg.Staleness = tc.mode, tc.staleness
			s := testcluster.NewScenario(t, cfg)
			stall := s.Stall(1, killedAt)
			s.StartAll(ctx)
			reached(ctx, t, stall, "worker 1 is about to push step 3")
			if tc.survivors > 0 {
				s.Await(ctx, "the survivors wait for worker 1", pushed(s, tc.survivors, 0, 2))
				for _, core := range s.Cores() {
					require.Equal(t, tc.held, core.Clock(), "worker 1 holds the others back")
				}
			}

			s.Kill(ctx, 1)
			_, err := s.Wait(ctx, 1)
			assert.ErrorIs(t, err, context.Canceled)
			ranEveryStep(ctx, t, s, cfg.Steps, 0, 2)
			for i, core := range s.Cores() {
				st := core.Stats()
				assert.Equal(t, tc.clock(cfg.Steps), core.Clock(), "shard %d", i)
				assert.Equal(t, tc.short, st.ShortSteps, "shard %d", i)
				assert.Equal(t, tc.live, core.LiveWorkers(), "shard %d", i)
				assert.Equal(t, int64(killedAt), core.StepsPushed(1), "shard %d", i)
				reports := s.Reports(i)
				require.NotEmpty(t, reports)
				death := reports[len(reports)-1]
				assert.Equal(t, "died", death.Change.What())
				assert.Equal(t, 1, death.Change.Member.Meta.Rank)
				assert.Equal(t, int64(killedAt), death.Steps, "the steps it had pushed")
				assert.Equal(t, 2, death.Live)
			}
		})
	}
}

// TestRestart: worker 1 dies before its push of step 2 and starts again
// while worker 0 is stalled before its push of step 5. JoinWorker names
// where it begins: in sync the step after the one in progress (worker 2
// pushed step 5), in SSP where the slowest live worker is (worker 0, 5
// steps), in async the step after its last push. It runs from there to
// the end with the others, and the shards wait for it again.
func TestRestart(t *testing.T) {
	const killedAt, stalledAt = 2, 5
	for _, tc := range []struct {
		name      string
		mode      consistency.Mode
		staleness int64
		// survivors: the steps each survivor pushed when worker 1 dies;
		// worker2: those worker 2 pushed when it restarts (0: not waited
		// for).
		survivors, worker2 int64
		start              int64
		short              int64
		live               []int64
		clock              func(steps int64) int64
	}{
		{"sync", consistency.Sync, 0, killedAt + 1, stalledAt + 1, stalledAt + 1, 1, []int64{0, 1, 2}, func(n int64) int64 { return n }},
		// Worker 2 goes one step past worker 0's 5 and waits.
		{"ssp", consistency.SSP, 1, killedAt + 2, stalledAt + 2, stalledAt, 0, []int64{0, 1, 2},
			func(n int64) int64 { return killedAt + (n - stalledAt) + 2*n }},
		{"async", consistency.Async, 0, 0, 0, killedAt, 0, nil, func(n int64) int64 { return 3 * n }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			cfg := testcluster.DefaultScenarioConfig()
			cfg.Mode, cfg.Staleness = tc.mode, tc.staleness
			s := testcluster.NewScenario(t, cfg)
			dies, stalled := s.Stall(1, killedAt), s.Stall(0, stalledAt)
			s.StartAll(ctx)
			reached(ctx, t, dies, "worker 1 is about to push step 2")
			if tc.survivors > 0 {
				s.Await(ctx, "the survivors wait for worker 1", pushed(s, tc.survivors, 0, 2))
			}
			s.Kill(ctx, 1)
			reached(ctx, t, stalled, "worker 0 is about to push step 5")
			if tc.worker2 > 0 {
				s.Await(ctx, "worker 2 waits for worker 0", pushed(s, tc.worker2, 2))
			}

			start := s.Restart(ctx, 1)
			assert.Equal(t, tc.start, start, "where JoinWorker says worker 1 begins")
			stalled.Release()
			ranEveryStep(ctx, t, s, cfg.Steps, 0, 1, 2)
			for i, core := range s.Cores() {
				assert.Equal(t, tc.clock(cfg.Steps), core.Clock(), "shard %d", i)
				assert.Equal(t, tc.short, core.Stats().ShortSteps, "shard %d", i)
				assert.Equal(t, tc.live, core.LiveWorkers(), "shard %d", i)
				assert.Equal(t, cfg.Steps, core.StepsPushed(1), "shard %d: the restarted worker pushed the last step", i)
				reports := s.Reports(i)
				require.NotEmpty(t, reports)
				back := reports[len(reports)-1]
				assert.Equal(t, "rejoined", back.Change.What())
				assert.Equal(t, 1, back.Change.Member.Meta.Rank)
				assert.Equal(t, 3, back.Live)
			}
		})
	}
}

// TestStall: a worker that stalls is still a member. Without backup
// workers it holds the sync step; with one backup worker the others run
// every step without it and its late push is dropped.
func TestStall(t *testing.T) {
	t.Run("holds the step", func(t *testing.T) {
		ctx := ctxT(t)
		cfg := testcluster.DefaultScenarioConfig()
		s := testcluster.NewScenario(t, cfg)
		stall := s.Stall(2, 2)
		s.StartAll(ctx)
		reached(ctx, t, stall, "worker 2 is about to push step 2")
		s.Await(ctx, "workers 0 and 1 pushed step 2", pushed(s, 3, 0, 1))
		for i, core := range s.Cores() {
			assert.Equal(t, int64(2), core.Clock(), "shard %d: step 2 waits for worker 2", i)
			assert.Equal(t, []int64{0, 1, 2}, core.LiveWorkers(), "shard %d", i)
			assert.Len(t, s.Reports(i), cfg.Workers, "shard %d: the joins, no other change", i)
		}

		stall.Release()
		ranEveryStep(ctx, t, s, cfg.Steps, 0, 1, 2)
		for i, core := range s.Cores() {
			st := core.Stats()
			assert.Equal(t, cfg.Steps, core.Clock(), "shard %d", i)
			assert.Equal(t, int64(cfg.Workers)*cfg.Steps, st.Pushes, "shard %d: every push counted", i)
			assert.Zero(t, st.Dropped, "shard %d", i)
			assert.Zero(t, st.ShortSteps, "shard %d", i)
		}
	})
	t.Run("a backup worker covers it", func(t *testing.T) {
		ctx := ctxT(t)
		cfg := testcluster.DefaultScenarioConfig()
		cfg.BackupWorkers = 1
		s := testcluster.NewScenario(t, cfg)
		// Worker 0 stalls too until worker 2 is stalled at step 0, so
		// that step 0 cannot go ahead before worker 2 stalls.
		stall, first := s.Stall(2, 0), s.Stall(0, 0)
		s.StartAll(ctx)
		reached(ctx, t, stall, "worker 2 is about to push step 0")
		reached(ctx, t, first, "worker 0 is about to push step 0")
		first.Release()
		ranEveryStep(ctx, t, s, cfg.Steps, 0, 1) // while worker 2 stalled
		for i, core := range s.Cores() {
			assert.Equal(t, cfg.Steps, core.Clock(), "shard %d", i)
			assert.Zero(t, core.StepsPushed(2), "shard %d", i)
			assert.Equal(t, []int64{0, 1, 2}, core.LiveWorkers(), "shard %d: no membership change", i)
		}

		stall.Release()
		res, err := s.Wait(ctx, 2)
		require.NoError(t, err)
		assert.True(t, res.Complete, "worker 2 finds the run complete")
		for i, core := range s.Cores() {
			st := core.Stats()
			assert.Equal(t, int64(1), st.Dropped, "shard %d: worker 2's step 0, late", i)
			assert.Zero(t, st.ShortSteps, "shard %d", i)
			assert.Equal(t, cfg.Steps, core.Clock(), "shard %d", i)
		}
	})
}

// TestDrop: pushes lost on the way, before a shard saw them or after it
// applied them (the reply lost), are sent again by the client and applied
// exactly once: each shard counts every (worker, step) once and each
// retry of an applied push as a duplicate. In sync the weights are those
// of a run without losses.
func TestDrop(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mode      consistency.Mode
		staleness int64
		clock     func(steps int64) int64
	}{
		{"sync", consistency.Sync, 0, func(n int64) int64 { return n }},
		{"ssp", consistency.SSP, 1, func(n int64) int64 { return 2 * n }},
		{"async", consistency.Async, 0, func(n int64) int64 { return 2 * n }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			cfg := testcluster.DefaultScenarioConfig()
			cfg.Mode, cfg.Staleness, cfg.Workers = tc.mode, tc.staleness, 2
			last := cfg.Steps - 1 // pushed without a pull
			s := testcluster.NewScenario(t, cfg)
			c := s.Cluster()
			c.Shard(0).LosePush(0, 1, testcluster.LoseRequest)
			c.Shard(0).LosePush(1, last, testcluster.LoseReply)
			c.Shard(1).LosePush(1, 2, testcluster.LoseReply)
			c.Shard(1).LosePush(0, 3, testcluster.LoseRequest)
			s.StartAll(ctx)
			ranEveryStep(ctx, t, s, cfg.Steps, 0, 1)
			for i, core := range s.Cores() {
				st := core.Stats()
				assert.Equal(t, 2, c.Shard(i).Lost(), "shard %d: both losses happened", i)
				assert.Equal(t, int64(cfg.Workers)*cfg.Steps, st.Pushes, "shard %d: each (worker, step) applied once", i)
				assert.Equal(t, int64(1), st.Duplicates, "shard %d: the retry of the push whose reply was lost", i)
				assert.Zero(t, st.Rejected, "shard %d", i)
				assert.Equal(t, tc.clock(cfg.Steps), core.Clock(), "shard %d", i)
				for w := range int64(cfg.Workers) {
					assert.Equal(t, cfg.Steps, core.StepsPushed(w), "shard %d, worker %d", i, w)
				}
			}
			if tc.mode != consistency.Sync {
				return
			}
			want := testcluster.NewScenario(t, cfg)
			want.StartAll(ctx)
			for r := range cfg.Workers {
				_, err := want.Wait(ctx, r)
				require.NoError(t, err)
			}
			got, ref := weights(ctx, t, s), weights(ctx, t, want)
			assert.LessOrEqual(t, testcluster.RelErr(got, ref), 1e-6, "the weights of a run without losses")
		})
	}
}

// weights pulls the scenario's whole vector.
func weights(ctx context.Context, t *testing.T, s *testcluster.Scenario) []float32 {
	t.Helper()
	c := s.Cluster()
	cl, err := client.Dial(ctx, c.Addrs(), client.WithDialOptions(c.DialOption()))
	require.NoError(t, err)
	defer cl.Close()
	v := make([]float32, cl.Info().Plan.VectorLen)
	_, err = cl.Pull(ctx, v)
	require.NoError(t, err)
	return v
}
