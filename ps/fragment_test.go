package ps

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
)

// The fragment tests' shard: shard 0 of a vector of 16 floats (i at index
// i) over 2 servers in chunks of 2 floats, 8 chunks in 4 rows. With 2
// fragments, fragment 0 is rows 0–1 (floats 0–7), of which this shard
// owns chunks 0 and 2, [0,2) and [4,6); fragment 1 is floats 8–15, of
// which it owns [8,10) and [12,14).
var (
	frag0 = []shard.Range{{Off: 0, Len: 2}, {Off: 4, Len: 2}}
	frag1 = []shard.Range{{Off: 8, Len: 2}, {Off: 12, Len: 2}}
)

func newFragmentServer(t *testing.T, mode consistency.Mode, workers int, outer optim.Config) *Server {
	t.Helper()
	s, err := New(fragmentConfig(t, mode, workers, outer), iota16())
	require.NoError(t, err)
	return s
}

func fragmentConfig(t *testing.T, mode consistency.Mode, workers int, outer optim.Config) Config {
	t.Helper()
	var l nn.Layout
	l.Add("w", 16)
	plan, err := shard.New(16, 2, 8)
	require.NoError(t, err)
	return Config{Mode: mode, Plan: plan, Layout: l, Optimizer: outer, Workers: workers, LocalSteps: 4, Fragments: 2, Update: UpdateConfig{Rule: UpdateFull}}
}

func iota16() []float32 {
	v := make([]float32, 16)
	for i := range v {
		v[i] = float32(i)
	}
	return v
}

func outerSGD() optim.Config {
	c := optim.DefaultConfig()
	c.Algorithm, c.LR, c.Momentum = optim.SGD, 1, 0
	return c
}

func outerNesterov() optim.Config {
	c := optim.DefaultConfig()
	c.Algorithm, c.LR, c.Momentum = optim.Nesterov, 0.7, 0.9
	return c
}

// pushFrag sends worker w's pseudo-gradient g (every value) of the
// fragment of ranges for step, computed at clock.
func pushFrag(t *testing.T, s *Server, w, step, clock int64, ranges []shard.Range, g float32) PushResult {
	t.Helper()
	res, err := s.Push(context.Background(), signed(s, Push{WorkerID: w, Step: step, Clock: clock, Ranges: ranges, Grads: []float32{g, g, g, g}}))
	require.NoError(t, err)
	return res
}

// TestSyncFragmentsTakeTurns: in sync mode shard step e is fragment
// e mod 2: the mean of the workers' pseudo-gradients for it moves that
// fragment alone, and each fragment's outer momentum is its own (the
// second step of fragment 0 carries the momentum of its first, not of
// fragment 1's step in between).
func TestSyncFragmentsTakeTurns(t *testing.T) {
	s := newFragmentServer(t, consistency.Sync, 2, outerNesterov())
	pushFrag(t, s, 0, 0, 0, frag0, 1)
	pushFrag(t, s, 1, 0, 0, frag0, 3)
	require.Equal(t, int64(1), s.Clock())
	// Mean Δ 2: Nesterov b = 2, update (2 + 0.9·2)·0.7 = 2.66.
	got := values(t, s)
	want := []float32{0 - 2.66, 1 - 2.66, 4 - 2.66, 5 - 2.66, 8, 9, 12, 13}
	assert.InDeltaSlice(t, want, got, 1e-5, "step 0 moved fragment 0 alone")

	pushFrag(t, s, 0, 1, 1, frag1, 1)
	pushFrag(t, s, 1, 1, 1, frag1, 1)
	// Fragment 1's first step: b = 1, (1 + 0.9)·0.7 = 1.33.
	got = values(t, s)
	want = []float32{0 - 2.66, 1 - 2.66, 4 - 2.66, 5 - 2.66, 8 - 1.33, 9 - 1.33, 12 - 1.33, 13 - 1.33}
	assert.InDeltaSlice(t, want, got, 1e-5, "step 1 moved fragment 1 alone")

	pushFrag(t, s, 0, 2, 2, frag0, 2)
	pushFrag(t, s, 1, 2, 2, frag0, 2)
	// Fragment 0's second step: b = 0.9·2 + 2 = 3.8, (2 + 0.9·3.8)·0.7
	// = 3.794 (with fragment 1's momentum, b = 0.9·1 + 2, it would be
	// 3.227).
	got = values(t, s)
	want = []float32{0 - 2.66 - 3.794, 1 - 2.66 - 3.794, 4 - 2.66 - 3.794, 5 - 2.66 - 3.794, 8 - 1.33, 9 - 1.33, 12 - 1.33, 13 - 1.33}
	assert.InDeltaSlice(t, want, got, 1e-5)
	assert.Equal(t, int64(6), s.Stats().Pushes)
}

// TestAsyncFragmentsApplyAsTheyArrive: in async mode each fragment's
// pseudo-gradient is applied when it comes, in any order, and a
// push-read reads back that fragment's chunks alone.
func TestAsyncFragmentsApplyAsTheyArrive(t *testing.T) {
	s := newFragmentServer(t, consistency.Async, 2, outerSGD())
	var read []shard.Range
	res, err := s.PushRead(context.Background(), signed(s, Push{WorkerID: 0, Step: 0, Clock: 0, Ranges: frag1, Grads: []float32{1, 1, 1, 1}}),
		func(_ PushResult, c ChunkRead) { read = append(read, c.Range) })
	require.NoError(t, err)
	assert.Equal(t, int64(1), res.Clock)
	assert.Equal(t, frag1, read, "the reply carries fragment 1's chunks alone")
	pushFrag(t, s, 1, 0, 0, frag1, 1)
	pushFrag(t, s, 0, 1, 1, frag0, 2)
	// Update rule "full": each push applied whole, outer SGD at lr 1.
	assert.Equal(t, []float32{-2, -1, 2, 3, 6, 7, 10, 11}, values(t, s))
	assert.Equal(t, int64(3), s.Clock())
}

// TestAFragmentPushRefusedChangesNothing: a push that covers no fragment
// exactly (the whole share, half a fragment, two chunks of different
// fragments), has the wrong length for its ranges, or (sync) is the
// fragment the schedule does not sync at its step is refused, counted,
// and leaves the weights and the clock as they were.
func TestAFragmentPushRefusedChangesNothing(t *testing.T) {
	cases := []struct {
		name   string
		in     Push
		reason string
		modes  []consistency.Mode
	}{
		{"the whole share", Push{Ranges: append(append([]shard.Range{}, frag0...), frag1...), Grads: make([]float32, 8)}, RejectedShape, []consistency.Mode{consistency.Sync, consistency.Async}},
		{"half a fragment", Push{Ranges: frag0[:1], Grads: []float32{1, 1}}, RejectedShape, []consistency.Mode{consistency.Sync, consistency.Async}},
		{"chunks of two fragments", Push{Ranges: []shard.Range{frag0[1], frag1[0]}, Grads: []float32{1, 1, 1, 1}}, RejectedShape, []consistency.Mode{consistency.Sync, consistency.Async}},
		{"wrong length", Push{Ranges: frag0, Grads: []float32{1, 1, 1}}, RejectedShape, []consistency.Mode{consistency.Sync, consistency.Async}},
		{"a range past the vector", Push{Ranges: []shard.Range{{Off: 16, Len: 2}}, Grads: []float32{1, 1}}, RejectedShape, []consistency.Mode{consistency.Sync, consistency.Async}},
		{"fragment 0 at step 1, which syncs fragment 1", Push{Ranges: frag0, Grads: []float32{1, 1, 1, 1}}, RejectedStep, []consistency.Mode{consistency.Sync}},
	}
	for _, tc := range cases {
		for _, mode := range tc.modes {
			t.Run(tc.name+"/"+mode.String(), func(t *testing.T) {
				s := newFragmentServer(t, mode, 1, outerNesterov())
				// Fragment 0's step 0 first: the shard is at step 1, which
				// syncs fragment 1.
				pushFrag(t, s, 0, 0, 0, frag0, 1)
				before, clock := values(t, s), s.Clock()
				in := tc.in
				in.WorkerID, in.Step, in.Clock = 0, 1, clock
				_, err := s.Push(context.Background(), signed(s, in))
				require.ErrorIs(t, err, ErrInvalidArgument)
				t.Log(err)
				assert.Equal(t, before, values(t, s), "the weights are unchanged")
				assert.Equal(t, clock, s.Clock(), "the clock is unchanged")
				assert.Equal(t, int64(1), s.Stats().RejectedBy[tc.reason], "refusals by reason: %v", s.Stats().RejectedBy)

				// The next good push is fragment 1's first step, as if the
				// refused one had never come.
				ref := newFragmentServer(t, mode, 1, outerNesterov())
				pushFrag(t, ref, 0, 0, 0, frag0, 1)
				pushFrag(t, ref, 0, 1, 1, frag1, 2)
				pushFrag(t, s, 0, 1, clock, frag1, 2)
				assert.Equal(t, values(t, ref), values(t, s))
			})
		}
	}
}

// TestFragmentsConfig: Fragments needs local steps that it divides, a
// plan with as many chunks per shard, no journal and no dcasgd.
func TestFragmentsConfig(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*Config)
		error string
	}{
		{"ok", func(*Config) {}, ""},
		{"one", func(c *Config) { c.Fragments = 1 }, ""},
		{"four", func(c *Config) { c.Fragments = 4 }, ""},
		{"no local steps", func(c *Config) { c.LocalSteps = 0 }, "fragments 2: fragments are synchronised every LocalSteps steps"},
		{"not a divisor", func(c *Config) { c.LocalSteps = 5 }, "fragments 2 with 5 local steps: want a divisor"},
		{"negative", func(c *Config) { c.Fragments = -2 }, "fragments -2: want 1.."},
		{"more than the rows", func(c *Config) { c.Fragments, c.LocalSteps = 8, 8 }, "want at least 8 chunks per server, chunks of at most 4 bytes"},
		{"journal", func(c *Config) { c.Journal, c.CheckpointDir = true, t.TempDir() }, "fragments are not journalled"},
		{"dcasgd", func(c *Config) { c.Mode, c.Update.Rule = consistency.Async, UpdateDCASGD }, "use average or staleness"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fragmentConfig(t, consistency.Sync, 2, outerSGD())
			tc.edit(&cfg)
			_, err := New(cfg, iota16())
			if tc.error == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.error)
		})
	}
}
