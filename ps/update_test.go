package ps

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
)

// ruleConfig is an async shard of 4 floats (initial 0,1,2,3) for 4
// workers under rule, plain SGD at lr 1, so that a step is the gradient
// the rule makes.
func ruleConfig(rule Update) Config {
	var l nn.Layout
	l.Add("w", 4)
	plan, _ := shard.New(4, 1, 16)
	ocfg := optim.DefaultConfig()
	ocfg.LR = 1
	return Config{Mode: consistency.Async, Plan: plan, Layout: l, Optimizer: ocfg, Workers: 4,
		Update: UpdateConfig{Rule: rule, DCLambda: 0.5}}
}

func newRuleServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg, []float32{0, 1, 2, 3})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// serve is worker w's pull of the whole share.
func serve(t *testing.T, s *Server, w int64) int64 {
	t.Helper()
	clock, err := s.SnapshotFor(w, make([]float32, s.Floats()))
	require.NoError(t, err)
	return clock
}

// TestUpdateRulesByHand: worker 0 reads the weights at clock 0; workers
// 1 and 2, never served, each push a gradient of ones (at staleness 0 and
// 1 by their word); then worker 0 pushes its gradient, computed on what it
// read: staleness 2. Each rule's step, worked out by hand:
//
//	full:      every push whole: 0 − 1 − 1 − g
//	average:   every push by 1/4 (4 workers)
//	staleness: pushes at τ 0 and 1 whole, worker 0's by 1/2
//	dcasgd:    1 and 2 unserved, so whole; worker 0's corrected against what
//	           it read: g + λ·g²·(w − w_bak) with λ 0.5 and w − w_bak = −2
//	           everywhere, g = (1, 2, −1, 0.5) → (0, −2, −2, 0.25)
func TestUpdateRulesByHand(t *testing.T) {
	g0 := []float32{1, 2, -1, 0.5}
	for _, tc := range []struct {
		rule Update
		want []float32
	}{
		{UpdateFull, []float32{0 - 2 - 1, 1 - 2 - 2, 2 + 1 - 2, 3 - 2 - 0.5}},
		{UpdateAverage, []float32{0 - 0.5 - 0.25, 1 - 0.5 - 0.5, 2 - 0.5 + 0.25, 3 - 0.5 - 0.125}},
		{UpdateStaleness, []float32{0 - 2 - 0.5, 1 - 2 - 1, 2 + 0.5 - 2, 3 - 2 - 0.25}},
		{UpdateDCASGD, []float32{-2 - 0, -1 + 2, 0 + 2, 1 - 0.25}},
	} {
		t.Run(tc.rule.String(), func(t *testing.T) {
			s := newRuleServer(t, ruleConfig(tc.rule))
			require.Equal(t, int64(0), serve(t, s, 0))
			assert.Equal(t, int64(0), push(t, s, 1, 0, 0, 1).Staleness)
			assert.Equal(t, int64(1), push(t, s, 2, 0, 0, 1).Staleness)
			res, err := s.Push(context.Background(), signed(s, Push{WorkerID: 0, Step: 0, Clock: 0, Ranges: whole, Grads: g0}))
			require.NoError(t, err)
			assert.Equal(t, int64(2), res.Staleness)
			assert.Equal(t, tc.want, values(t, s))
		})
	}
}

// TestSSPAveragesOverTheLiveWorkers: SSP's default rule is 1/N of the
// live workers, as before there were rules; staleness applies there too.
func TestSSPRules(t *testing.T) {
	for _, tc := range []struct {
		rule Update
		want float32
	}{{UpdateAuto, 0 - 1.0/3 - 2.0/3}, {UpdateStaleness, 0 - 1 - 2}, {UpdateFull, 0 - 1 - 2}} {
		t.Run(tc.rule.String(), func(t *testing.T) {
			cfg := ruleConfig(tc.rule)
			cfg.Mode, cfg.Workers, cfg.Staleness = consistency.SSP, 3, 4
			s := newRuleServer(t, cfg)
			push(t, s, 0, 0, 0, 1)
			push(t, s, 1, 0, 1, 2) // at staleness 0
			assert.InDelta(t, tc.want, values(t, s)[0], 1e-6)
		})
	}
}

// TestALyingWorkerCannotLowerItsStaleness: the shard counts staleness from
// its own clock, from the last time it served the worker. A worker that
// read at clock 0 and claims, two updates later, to have computed on
// clock 2 is still at staleness 2, and its push is scaled by 1/2; one
// that claims an older clock than it read is taken at its word (it can
// only make itself staler). A push-pull's read is a serve too.
func TestALyingWorkerCannotLowerItsStaleness(t *testing.T) {
	s := newRuleServer(t, ruleConfig(UpdateStaleness))
	serve(t, s, 0)
	push(t, s, 1, 0, 0, 1)
	push(t, s, 2, 0, 1, 1)
	before := values(t, s)
	res := push(t, s, 0, 0, 2, 4) // the lie: "computed on clock 2"
	assert.Equal(t, int64(2), res.Staleness, "from the serve at clock 0, not the claim")
	assert.Equal(t, before[0]-2, values(t, s)[0], "scaled by 1/2, not applied whole")
	for _, v := range []int64{3, 1 << 40} {
		assert.Equal(t, int64(3), s.upd.staleness(s.Clock(), Push{WorkerID: 0, Clock: v}), "claim %d", v)
	}

	// The push-pull's read serves worker 0 at clock 4; a claim older
	// than that counts.
	_, err := s.PushRead(context.Background(), signed(s, Push{WorkerID: 0, Step: 1, Clock: 3, Ranges: whole, Grads: fill(1)}), func(PushResult, ChunkRead) {})
	require.NoError(t, err)
	push(t, s, 1, 1, 4, 1)
	assert.Equal(t, int64(1), s.upd.staleness(s.Clock(), Push{WorkerID: 0, Clock: 5}), "served at 4, one update since")
	assert.Equal(t, int64(5), s.upd.staleness(s.Clock(), Push{WorkerID: 0, Clock: 0}), "an older claim than the serve")

	// Reads that serve no worker (an evaluation, a range) move nothing.
	_, err = s.Snapshot(make([]float32, 4))
	require.NoError(t, err)
	_, err = s.Read(shard.Range{Off: 0, Len: 4}, make([]float32, 4))
	require.NoError(t, err)
	serve(t, s, 99) // not a worker of this shard
	assert.Equal(t, int64(1), s.upd.staleness(s.Clock(), Push{WorkerID: 0, Clock: 5}))
}

func TestUpdateRuleConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"average without workers", func(c *Config) { c.Update.Rule = UpdateAverage; c.Workers = 0 }, "update rule average in async mode needs the number of workers"},
		{"dcasgd without workers", func(c *Config) { c.Update.Rule = UpdateDCASGD; c.Workers = 0 }, "update rule dcasgd in async mode needs the number of workers"},
		{"dcasgd over its bound", func(c *Config) { c.Update.Rule = UpdateDCASGD; c.Workers, c.Update.DCMaxBytes = 64, 1000 },
			"64 workers × 4 floats × 4 bytes = 0.0 MiB on shard 0, over the bound of 0.0 MiB (--dc-max-mib)"},
		{"negative lambda", func(c *Config) { c.Update.DCLambda = -1 }, "dcasgd lambda -1: want a finite value >= 0"},
		{"unknown rule", func(c *Config) { c.Update.Rule = 42 }, "update rule 42: unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ruleConfig(UpdateFull)
			tc.edit(&cfg)
			_, err := New(cfg, []float32{0, 1, 2, 3})
			assert.ErrorContains(t, err, tc.want)
		})
	}
	cfg := ruleConfig(UpdateDCASGD)
	cfg.Workers, cfg.Update.DCMaxBytes = 64, DCBytes(64, 4)
	_, err := New(cfg, []float32{0, 1, 2, 3})
	assert.NoError(t, err, "exactly at the bound")
}

func TestParseUpdate(t *testing.T) {
	for _, u := range []Update{UpdateAuto, UpdateFull, UpdateAverage, UpdateStaleness, UpdateDCASGD} {
		got, err := ParseUpdate(u.String())
		require.NoError(t, err)
		assert.Equal(t, u, got)
	}
	_, err := ParseUpdate("fast")
	assert.ErrorContains(t, err, `update rule "fast": unknown (want auto, full, average, staleness, dcasgd)`)
}

func TestUnstableWarning(t *testing.T) {
	cfg := ruleConfig(UpdateFull)
	cfg.Optimizer.Algorithm, cfg.Optimizer.LR, cfg.Optimizer.Momentum = "momentum", 0.01, 0.9
	cfg.Workers = 8
	assert.Contains(t, cfg.UnstableWarning(), "update rule full in async mode with 8 workers at lr 0.01 and momentum 0.9")
	cfg.Workers = 4
	assert.Empty(t, cfg.UnstableWarning(), "lr·N/(1−μ) = 0.4")
	cfg.Workers = 0
	assert.Empty(t, cfg.UnstableWarning(), "workers unknown")
	cfg.Update.Rule = UpdateDCASGD
	cfg.Workers = 8
	assert.Contains(t, cfg.UnstableWarning(), "update rule dcasgd in async mode with 8 workers")
	cfg.Update.Rule = UpdateStaleness
	assert.Empty(t, cfg.UnstableWarning())
	cfg.Update.Rule = UpdateAuto
	assert.Empty(t, cfg.UnstableWarning(), "the default")
	cfg.Optimizer.Momentum = 0.5
	cfg.Update.Rule, cfg.Workers = UpdateFull, 16
	assert.Empty(t, cfg.UnstableWarning(), "lr·N/(1−μ) = 0.32: trained above sync in the emulation")
}

// TestTheDefaultRule: async divides each push by its staleness, with or
// without its workers known; SSP averages over its live workers, as it
// always did.
func TestTheDefaultRule(t *testing.T) {
	for _, tc := range []struct {
		mode    consistency.Mode
		workers int
		want    Update
	}{{consistency.Async, 8, UpdateStaleness}, {consistency.Async, 0, UpdateStaleness}, {consistency.SSP, 8, UpdateAverage}, {consistency.SSP, 0, UpdateAverage}} {
		cfg := ruleConfig(UpdateAuto)
		cfg.Mode, cfg.Workers, cfg.Staleness = tc.mode, tc.workers, 2
		s := newRuleServer(t, cfg)
		assert.Equal(t, tc.want, s.Config().Update.Rule, "%s, %d workers", tc.mode, tc.workers)
	}
}

// ruleScript is a run of pushes and serves in which every rule's state
// matters: worker 0 is served at clock 0 and pushes only after the
// checkpoint at update 3, which must hold its serve (and, for DC-ASGD,
// the weights it was served); worker 1 push-pulls, each read a serve
// the journal must hold.
func ruleScript(t *testing.T, s *Server, from, to int) {
	t.Helper()
	read := func(PushResult, ChunkRead) {}
	ops := []func(){
		func() { serve(t, s, 0) },
		func() { serve(t, s, 1) },
		func() {
			_, err := s.PushRead(context.Background(), signed(s, Push{WorkerID: 1, Step: 0, Clock: 0, Ranges: whole, Grads: []float32{1, 2, 3, 4}}), read)
			require.NoError(t, err)
		},
		func() { push(t, s, 2, 0, 0, -1) },
		func() {
			_, err := s.PushRead(context.Background(), signed(s, Push{WorkerID: 1, Step: 1, Clock: 1, Ranges: whole, Grads: []float32{0.5, -1, 2, 1}}), read)
			require.NoError(t, err)
		},
		func() { serve(t, s, 2) }, // a serve alone, journaled
		func() { push(t, s, 2, 1, 3, 0.25) },
		// the crash comes here
		func() { push(t, s, 0, 0, 0, 2) },
		func() { push(t, s, 1, 2, 2, 1) },
		func() { push(t, s, 2, 2, 3, 1) },
	}
	for _, op := range ops[from:to] {
		op()
	}
}

const ruleCrashAt = 7

// TestUpdateRulesResumeTheSameComputation: a shard killed after the
// checkpoint at update 3 and two journaled updates and a journaled serve
// after it resumes with the rule's state (when each worker was served,
// and what) and goes on exactly as a shard that never stopped.
func TestUpdateRulesResumeTheSameComputation(t *testing.T) {
	for _, rule := range []Update{UpdateFull, UpdateAverage, UpdateStaleness, UpdateDCASGD} {
		t.Run(rule.String(), func(t *testing.T) {
			cfg := ruleConfig(rule)
			cfg.Optimizer.Algorithm, cfg.Optimizer.Momentum = "momentum", 0.9
			ref := newRuleServer(t, cfg)
			ruleScript(t, ref, 0, 10)

			cfg.CheckpointDir, cfg.CheckpointEvery, cfg.Journal = t.TempDir(), 3, true
			s, err := New(cfg, []float32{0, 1, 2, 3})
			require.NoError(t, err)
			ruleScript(t, s, 0, ruleCrashAt)
			require.NoError(t, s.Close()) // no final checkpoint: a crash
			ckpts, err := s.listCheckpoints()
			require.NoError(t, err)
			require.Equal(t, int64(3), ckpts[0].clock, "the checkpoint at update 3 is the newest")

			r := crashAndRestart(t, cfg)
			assert.Equal(t, s.upd.served, r.upd.served)
			assert.Equal(t, s.upd.backup, r.upd.backup)
			ruleScript(t, r, ruleCrashAt, 10)
			assert.Equal(t, values(t, ref), values(t, r), "bit for bit")
			if rule == UpdateDCASGD {
				assert.Len(t, r.upd.backup, 3, "a copy per worker served")
			}
		})
	}
}

// TestAVersion2JournalIsStillRead: a journal written before the update
// rules (its records hold no serves) replays.
func TestAVersion2JournalIsStillRead(t *testing.T) {
	cfg, last := fivePushesJournaled(t)
	b, err := os.ReadFile(last)
	require.NoError(t, err)
	probe, err := New(journalConfig(consistency.Async, 1, t.TempDir()), []float32{0, 1, 2, 3})
	require.NoError(t, err)
	defer probe.Close()
	r := bytes.NewReader(b[len(journalMagic):])
	v2 := []byte(journalMagicV2)
	for {
		rec, err := probe.readRecord(r, false)
		if err != nil {
			break
		}
		v2 = appendRecord(v2, rec, true)
	}
	require.NoError(t, os.WriteFile(last, v2, 0o600))
	s := crashAndRestart(t, cfg)
	assert.Equal(t, int64(5), s.Clock())
}

func ExampleParseUpdate() {
	u, err := ParseUpdate("staleness")
	fmt.Println(u, err)
	// Output: staleness <nil>
}

// TestScaleLRFollowsTheLiveWorldSize: with ScaleLR the learning rate is
// the base times the live world size at each update, and it follows
// membership: in sync a step after a worker left moves by 2× the mean,
// no longer 3×; in async the same after WorkerGone, and back after Join.
// A shard killed and restarted replays each update at its own scale.
func TestScaleLRFollowsTheLiveWorldSize(t *testing.T) {
	t.Run("sync", func(t *testing.T) {
		cfg := ruleConfig(UpdateAuto)
		cfg.Mode, cfg.Workers, cfg.ScaleLR = consistency.Sync, 3, true
		cfg.CheckpointDir, cfg.CheckpointEvery, cfg.Journal = t.TempDir(), 100, true
		s, err := New(cfg, []float32{0, 1, 2, 3})
		require.NoError(t, err)
		for w := range int64(3) {
			push(t, s, w, 0, 0, 1)
		}
		assert.Equal(t, float32(0-3), values(t, s)[0], "the mean, 1, at lr 1×3")
		require.True(t, s.WorkerGone(2))
		for w := range int64(2) {
			push(t, s, w, 1, 1, 1)
		}
		want := values(t, s)
		assert.Equal(t, float32(0-3-2), want[0], "after the shrink: lr 1×2")
		require.NoError(t, s.Close()) // a crash

		r := crashAndRestart(t, cfg)
		assert.Equal(t, want, values(t, r), "the journal's updates at their own scales")
	})
	t.Run("async", func(t *testing.T) {
		cfg := ruleConfig(UpdateFull)
		cfg.ScaleLR = true
		s := newRuleServer(t, cfg)
		push(t, s, 0, 0, 0, 1)
		assert.Equal(t, float32(0-4), values(t, s)[0], "lr 1×4")
		s.WorkerGone(3)
		push(t, s, 0, 1, 1, 1)
		assert.Equal(t, float32(0-4-3), values(t, s)[0], "lr 1×3 once worker 3 is gone")
		_, err := joinStep(s, 3, 0)
		require.NoError(t, err)
		push(t, s, 0, 2, 2, 1)
		assert.Equal(t, float32(0-4-3-4), values(t, s)[0], "lr 1×4 once it joined again")
	})
	t.Run("async needs the workers", func(t *testing.T) {
		cfg := ruleConfig(UpdateFull)
		cfg.ScaleLR, cfg.Workers = true, 0
		_, err := New(cfg, []float32{0, 1, 2, 3})
		assert.ErrorContains(t, err, "in async mode needs the number of workers")
	})
}
