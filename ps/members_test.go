package ps

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
)

func TestAWorkerThatDiesMidStepIsLeftOut(t *testing.T) {
	s := newModeServer(t, consistency.Sync, 3, 0, 0)
	push(t, s, 0, 0, 0, 1)
	push(t, s, 1, 0, 0, 3)
	require.True(t, s.WorkerGone(2))
	assert.Equal(t, int64(1), s.Clock(), "the step held up by the dead worker completes")
	assert.Equal(t, []float32{-2, -1, 0, 1}, values(t, s), "the mean of the two pushes that arrived")
	assert.Equal(t, int64(1), s.Stats().ShortSteps)
	assert.Equal(t, []int64{0, 1}, s.LiveWorkers())
	assert.False(t, s.WorkerGone(2), "gone already")

	// Later steps wait for the two live workers only, and are not short.
	push(t, s, 0, 1, 1, 1)
	push(t, s, 1, 1, 1, 1)
	assert.Equal(t, int64(2), s.Clock())
	assert.Equal(t, int64(1), s.Stats().ShortSteps)

	// The dead worker's pushes are refused and change nothing.
	before := values(t, s)
	_, err := s.Push(context.Background(), signed(s, Push{WorkerID: 2, Step: 2, Clock: 2, Ranges: whole, Grads: fill(9)}))
	require.ErrorIs(t, err, ErrNotMember)
	assert.ErrorContains(t, err, "worker 2 died or left")
	assert.Equal(t, before, values(t, s))
}

func TestADeathBeforeAnyPushTakesEffectAtOnce(t *testing.T) {
	s := newModeServer(t, consistency.Sync, 2, 0, 0)
	require.True(t, s.WorkerGone(1))
	push(t, s, 0, 0, 0, 1)
	assert.Equal(t, int64(1), s.Clock(), "one live worker makes a step")
	assert.Equal(t, int64(0), s.Stats().ShortSteps, "the step started with one worker: it is not short")
}

func TestSyncJoin(t *testing.T) {
	s := newModeServer(t, consistency.Sync, 3, 0, 0)
	for w := range int64(3) {
		step, err := joinStep(s, w, 0)
		require.NoError(t, err)
		assert.Equal(t, int64(0), step, "a fresh run begins at step 0")
	}
	require.True(t, s.WorkerGone(2))
	push(t, s, 0, 0, 0, 1)
	push(t, s, 1, 0, 0, 1)
	require.Equal(t, int64(1), s.Clock())

	// Worker 2 comes back while step 1 is in progress: it enters at step 2.
	push(t, s, 0, 1, 1, 1)
	step, err := joinStep(s, 2, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(2), step)
	_, err = s.Push(context.Background(), signed(s, Push{WorkerID: 2, Step: 1, Clock: 1, Ranges: whole, Grads: fill(9)}))
	require.ErrorIs(t, err, ErrInvalidArgument, "its push for the step it did not enter")
	assert.ErrorContains(t, err, "it joined for step 2 on")
	push(t, s, 1, 1, 1, 1)
	require.Equal(t, int64(2), s.Clock(), "step 1 needed only the two who were live at its start")

	// Step 2 needs all three.
	push(t, s, 0, 2, 2, 1)
	push(t, s, 1, 2, 2, 1)
	assert.Equal(t, int64(2), s.Clock())
	push(t, s, 2, 2, 2, 1)
	assert.Equal(t, int64(3), s.Clock())
	assert.Equal(t, []int64{0, 1, 2}, s.LiveWorkers())
}

func TestSyncJoinAtAStepBoundaryEntersAtOnce(t *testing.T) {
	s := newModeServer(t, consistency.Sync, 2, 0, 0)
	require.True(t, s.WorkerGone(1))
	push(t, s, 0, 0, 0, 1)
	step, err := joinStep(s, 1, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), step, "no push of step 1 yet: it enters now")
	push(t, s, 1, 1, 1, 1)
	assert.Equal(t, int64(1), s.Clock(), "step 1 waits for worker 0 too")
	push(t, s, 0, 1, 1, 1)
	assert.Equal(t, int64(2), s.Clock())
}

func TestSyncJoinAfterPushingBeginsAtTheNextStep(t *testing.T) {
	// A restart faster than failure detection: the worker is still live
	// and already pushed the step in progress.
	s := newModeServer(t, consistency.Sync, 2, 0, 0)
	push(t, s, 1, 0, 0, 1)
	step, err := joinStep(s, 1, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), step)
}

func TestSSPMembership(t *testing.T) {
	s := newModeServer(t, consistency.SSP, 3, 0, 1)
	push(t, s, 0, 0, 0, 3)
	push(t, s, 1, 0, 0, 3)
	push(t, s, 0, 1, 1, 3)
	push(t, s, 1, 1, 1, 3)
	// Worker 2 pushed nothing: step 2 is 2 ahead of it.
	require.ErrorIs(t, s.WaitToRead(canceled(), 0, 2), ErrWaitTimeout)

	released := make(chan error, 1)
	go func() { released <- s.WaitToRead(context.Background(), 0, 2) }()
	require.True(t, s.WorkerGone(2))
	require.NoError(t, <-released, "the bound no longer waits for the dead worker")

	// With two live workers a push moves the weights by half its gradient.
	before := values(t, s)
	push(t, s, 0, 2, 4, 2)
	assert.Equal(t, before[0]-1, values(t, s)[0])

	// Worker 2 returns where the slowest live worker is, not at step 0.
	step, err := joinStep(s, 2, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(2), step)
	require.NoError(t, s.WaitToRead(canceled(), 0, 3), "its place counts as pushed up to there")
	push(t, s, 2, 2, 5, 3)
}

func TestAsyncJoinContinuesAfterTheLastPush(t *testing.T) {
	s := newModeServer(t, consistency.Async, 1, 0, 0)
	step, err := joinStep(s, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(0), step)
	push(t, s, 0, 0, 0, 1)
	push(t, s, 0, 1, 1, 1)
	step, err = joinStep(s, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(2), step, "a restarted worker's pushes must not be taken for duplicates")
	assert.False(t, s.WorkerGone(0), "async keeps no live set")
}

func TestJoinRefusesAnUnknownWorker(t *testing.T) {
	s := newModeServer(t, consistency.Sync, 2, 0, 0)
	_, err := joinStep(s, 2, 0)
	require.ErrorIs(t, err, ErrInvalidArgument)
}

// TestSyncJoinAgreesAcrossShards: a push that reached one shard and not
// yet the other makes them name different steps; asked again not before
// the later one, both admit the worker there, and neither waits for it
// at the earlier step.
func TestSyncJoinAgreesAcrossShards(t *testing.T) {
	a := newModeServer(t, consistency.Sync, 3, 0, 0)
	b := newModeServer(t, consistency.Sync, 3, 0, 0)
	require.True(t, a.WorkerGone(1))
	require.True(t, b.WorkerGone(1))
	push(t, a, 2, 0, 0, 1) // worker 2's push of step 0 reached shard a only
	stepA, err := joinStep(a, 1, 0)
	require.NoError(t, err)
	stepB, err := joinStep(b, 1, 0)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 0}, []int64{stepA, stepB}, "a has a push in progress, b none")
	for _, s := range []*Server{a, b} {
		step, err := joinStep(s, 1, 1)
		require.NoError(t, err)
		assert.Equal(t, int64(1), step)
	}
	// Step 0 completes on both without worker 1.
	push(t, b, 2, 0, 0, 1)
	for _, s := range []*Server{a, b} {
		push(t, s, 0, 0, 0, 1)
		assert.Equal(t, int64(1), s.Clock())
		// Step 1 waits for worker 1.
		push(t, s, 0, 1, 1, 1)
		push(t, s, 2, 1, 1, 1)
		assert.Equal(t, int64(1), s.Clock())
		push(t, s, 1, 1, 1, 1)
		assert.Equal(t, int64(2), s.Clock())
	}
}

func TestJoinLaterReleasesAStepThatWaitedForTheWorker(t *testing.T) {
	// A worker still live (a restart faster than failure detection) that
	// is admitted for a later step no longer holds the current one.
	s := newModeServer(t, consistency.Sync, 2, 0, 0)
	push(t, s, 0, 0, 0, 1)
	step, err := joinStep(s, 1, 1)
	require.NoError(t, err)
	assert.Equal(t, int64(1), step)
	assert.Equal(t, int64(1), s.Clock(), "step 0 went on with worker 0's push")
}

// TestJoinPastTheStepGapPushes: a worker that joins a sync or SSP run
// more than MaxStepGap steps in pushes at the step it was given, though
// it never pushed before (the step bound that keeps a forged push from
// stalling a run measures a sync push from the shard's step).
func TestJoinPastTheStepGapPushes(t *testing.T) {
	for _, mode := range []consistency.Mode{consistency.Sync, consistency.SSP} {
		t.Run(mode.String(), func(t *testing.T) {
			s := newModeServer(t, mode, 2, 0, 1)
			require.True(t, s.WorkerGone(1))
			for step := range int64(MaxStepGap + 10) {
				push(t, s, 0, step, step, 0)
			}
			at, err := joinStep(s, 1, 0)
			require.NoError(t, err)
			require.Greater(t, at, int64(MaxStepGap))
			before := s.Clock()
			push(t, s, 1, at, at, 0)
			push(t, s, 0, at, at, 0)
			want := before + 1 // sync: one step of both pushes
			if mode == consistency.SSP {
				want = before + 2 // one update a push
			}
			assert.Equal(t, want, s.Clock())
		})
	}
}
