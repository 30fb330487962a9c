package ps

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
)

// ckptServer is shard 1 of 2 of a 20-float vector in chunks of at most 4
// (six chunks; it owns three), momentum SGD, checkpointing to dir every `every` updates.
func ckptServer(t *testing.T, dir string, every int64, name string) (*Server, error) {
	t.Helper()
	var l nn.Layout
	l.Add(name, 20)
	plan, err := shard.New(20, 2, 16)
	require.NoError(t, err)
	ocfg := optim.DefaultConfig()
	ocfg.Algorithm, ocfg.LR = optim.Momentum, 0.1
	initial := make([]float32, 20)
	for i := range initial {
		initial[i] = float32(i)
	}
	return New(Config{Mode: consistency.Async, Shard: 1, Plan: plan, Layout: l, Optimizer: ocfg, CheckpointDir: dir, CheckpointEvery: every}, initial)
}

func ckptPush(t *testing.T, s *Server, step int64) {
	t.Helper()
	g := make([]float32, s.Floats())
	for i := range g {
		g[i] = float32(step+1) * 0.5
	}
	var rs []shard.Range
	rs = append(rs, s.Ranges()...)
	_, err := s.Push(context.Background(), signed(s, Push{WorkerID: 1, Step: step, Ranges: rs, Grads: g}))
	require.NoError(t, err)
}

func TestCheckpointResumeContinuesExactly(t *testing.T) {
	dir := t.TempDir()
	a, err := ckptServer(t, dir, 2, "w")
	require.NoError(t, err)
	for step := range int64(4) {
		ckptPush(t, a, step)
	}
	// A server restarted from the checkpoint at clock 4 and the original
	// take the same two further pushes to the same values: values,
	// momentum buffers and clock were all restored.
	b, err := ckptServer(t, dir, 2, "w")
	require.NoError(t, err)
	assert.Equal(t, int64(4), b.Clock())
	assert.Equal(t, readAll(t, a), readAll(t, b))
	for step := int64(4); step < 6; step++ {
		ckptPush(t, a, step)
		ckptPush(t, b, step)
	}
	assert.Equal(t, readAll(t, a), readAll(t, b))
	// The dedup record survived: a retry of step 5 is a duplicate.
	res, err := b.Push(context.Background(), signed(b, Push{WorkerID: 1, Step: 3, Ranges: b.Ranges(), Grads: make([]float32, b.Floats())}))
	require.NoError(t, err)
	assert.True(t, res.Duplicate)
	files, err := b.listCheckpoints()
	require.NoError(t, err)
	assert.Len(t, files, checkpointKeep, "older checkpoints are removed")
}

// TestAResumedShardHoldsNoSessionAndTrustsItsRecord: a shard restarted
// from its checkpoint holds no session (it answers a worker's push with
// ErrNoSession, on which the worker joins it again), and the record it
// resumed with is the worker's own: the join names the step after its
// last push, however few pushes this shard has taken since.
func TestAResumedShardHoldsNoSessionAndTrustsItsRecord(t *testing.T) {
	dir := t.TempDir()
	a, err := ckptServer(t, dir, 2, "w")
	require.NoError(t, err)
	for step := range int64(4) {
		ckptPush(t, a, step)
	}
	b, err := ckptServer(t, dir, 2, "w")
	require.NoError(t, err)
	_, err = b.Push(context.Background(), Push{WorkerID: 1, Session: a.sessions[1], Step: 4, Ranges: b.Ranges(), Grads: make([]float32, b.Floats())})
	require.ErrorIs(t, err, ErrNoSession)
	j, err := b.Join(1, 0, 1)
	require.NoError(t, err)
	assert.Equal(t, int64(4), j.Step, "after the last push the checkpoint holds")
}

func TestCorruptCheckpointFallsBackToAnOlderOne(t *testing.T) {
	dir := t.TempDir()
	a, err := ckptServer(t, dir, 2, "w")
	require.NoError(t, err)
	for step := range int64(4) {
		ckptPush(t, a, step)
	}
	files, err := a.listCheckpoints()
	require.NoError(t, err)
	require.Len(t, files, 2)
	// Flip a byte in the data of the newest one.
	b, err := os.ReadFile(files[0].path)
	require.NoError(t, err)
	b[len(b)-3] ^= 0x40
	require.NoError(t, os.WriteFile(files[0].path, b, 0o644))

	r, err := ckptServer(t, dir, 2, "w")
	require.NoError(t, err)
	assert.Equal(t, files[1].clock, r.Clock(), "resumed from the older, intact checkpoint")

	// With the older one truncated too, nothing usable is left: refuse.
	require.NoError(t, os.Truncate(files[1].path, 100))
	_, err = ckptServer(t, dir, 2, "w")
	require.ErrorIs(t, err, ErrCheckpoint)
	assert.Contains(t, err.Error(), "checksum")
	assert.Contains(t, err.Error(), filepath.Base(files[1].path))
}

func TestForeignCheckpointIsRefused(t *testing.T) {
	dir := t.TempDir()
	a, err := ckptServer(t, dir, 1, "w")
	require.NoError(t, err)
	ckptPush(t, a, 0)
	// Same shard and plan, another model (tensor name).
	_, err = ckptServer(t, dir, 1, "other")
	require.ErrorIs(t, err, ErrCheckpoint)
	assert.Contains(t, err.Error(), "written for another shard, plan, model or optimizer")
	assert.Contains(t, err.Error(), "other[20]")
}

// A checkpoint written under another partition function (plan version 1
// cut fixed-size chunks) is refused by name, not read as if its chunks were
// this plan's.
func TestCheckpointOfAnOldPlanIsRefused(t *testing.T) {
	dir := t.TempDir()
	a, err := ckptServer(t, dir, 1, "w")
	require.NoError(t, err)
	ckptPush(t, a, 0)
	files, err := a.listCheckpoints()
	require.NoError(t, err)
	require.NotEmpty(t, files)
	l, vec, meta, err := nn.LoadSafetensors(files[0].path)
	require.NoError(t, err)
	// As the code of plan version 1 wrote it: format 1, whose checksum
	// covers the floats alone.
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(meta["shoal_checkpoint"]), &m))
	m["plan_version"], m["kind"], m["crc32c"] = 1, ckptKindV1, crcFloats(vec)
	js, err := json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, nn.SaveSafetensors(files[0].path, l, vec, map[string]string{"shoal_checkpoint": string(js)}))

	_, err = ckptServer(t, dir, 1, "w")
	require.ErrorIs(t, err, ErrCheckpoint)
	assert.Contains(t, err.Error(), files[0].path)
	assert.Contains(t, err.Error(), "plan v1")
	assert.Contains(t, err.Error(), fmt.Sprintf("plan v%d", shard.Version))
}

func TestFinalCheckpointAndSyncConsistency(t *testing.T) {
	dir := t.TempDir()
	var l nn.Layout
	l.Add("w", 4)
	plan, _ := shard.New(4, 1, 16)
	ocfg := optim.DefaultConfig()
	ocfg.LR = 1
	cfg := Config{Mode: consistency.Sync, Plan: plan, Layout: l, Optimizer: ocfg, Workers: 2, CheckpointDir: dir, CheckpointEvery: 1000}
	s, err := New(cfg, []float32{0, 1, 2, 3})
	require.NoError(t, err)
	push(t, s, 0, 0, 0, 1)
	push(t, s, 1, 0, 0, 3)
	push(t, s, 0, 1, 1, 5) // step 1 in progress: not part of any checkpoint
	require.NoError(t, s.Checkpoint())
	r, err := New(cfg, []float32{0, 1, 2, 3})
	require.NoError(t, err)
	assert.Equal(t, int64(1), r.Clock())
	assert.Equal(t, []float32{-2, -1, 0, 1}, values(t, r))
	// Worker 0's push for step 1 was not saved, so its retry is accepted.
	res := push(t, r, 0, 1, 1, 5)
	assert.False(t, res.Duplicate)
}

// TestACheckpointThatCannotBeWrittenIsReported: once the checkpoint
// folder cannot be written (here it became a file), the failure is sent on
// Failed for the shard's owner to stop it, not only logged while the run
// goes on without checkpoints; with CheckpointErrorsWarn it is only logged.
func TestACheckpointThatCannotBeWrittenIsReported(t *testing.T) {
	for _, warn := range []bool{false, true} {
		t.Run(fmt.Sprintf("warn=%v", warn), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			s, err := ckptServer(t, dir, 1, "w")
			require.NoError(t, err)
			s.cfg.CheckpointErrorsWarn = warn
			ckptPush(t, s, 0) // written
			require.NoError(t, os.RemoveAll(dir))
			require.NoError(t, os.WriteFile(dir, nil, 0o644))
			ckptPush(t, s, 1) // the push is applied; its checkpoint cannot be written
			assert.Equal(t, int64(2), s.Clock())
			select {
			case err := <-s.Failed():
				require.False(t, warn, "reported although warn was set: %v", err)
				assert.ErrorContains(t, err, "checkpoint at clock 2 into "+dir)
			default:
				require.True(t, warn, "the failed checkpoint was not reported")
			}
		})
	}
}

// TestDamagedCheckpointMetadataFallsBack: the checksum covers the
// metadata too, and damaged metadata is damage, not another Shoal's file:
// the shard resumes from the older checkpoint and replays the journal
// from there, losing nothing. Before, a clock changed from 6 to 8 was
// accepted (the shard claimed clock 8 with clock 6's values, and the
// replay skipped updates 7 and 8 as already in the checkpoint), and a
// flipped bit in the metadata's "kind" stopped the shard as if the file
// were foreign.
func TestDamagedCheckpointMetadataFallsBack(t *testing.T) {
	for name, damage := range map[string]func(b []byte) []byte{
		"clock": func(b []byte) []byte {
			old := []byte(`clock\":6,`)
			require.Equal(t, 1, bytes.Count(b, old))
			return bytes.Replace(b, old, []byte(`clock\":8,`), 1)
		},
		"kind": func(b []byte) []byte {
			i := bytes.Index(b, []byte(`\"kind\"`))
			require.Positive(t, i)
			b[i+2] ^= 1 // "kind" becomes "jind"
			return b
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := journalConfig(consistency.Async, 1, dir) // a checkpoint every 3 updates
			s, err := New(cfg, []float32{0, 1, 2, 3})
			require.NoError(t, err)
			for step := range int64(8) {
				push(t, s, 0, step, step, 1)
			}
			want := values(t, s)
			files, err := s.listCheckpoints()
			require.NoError(t, err)
			require.Len(t, files, 2)
			require.Equal(t, int64(6), files[0].clock)
			require.NoError(t, s.Close()) // a crash: no final checkpoint
			b, err := os.ReadFile(files[0].path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(files[0].path, damage(b), 0o644))

			r, err := New(cfg, []float32{0, 1, 2, 3})
			require.NoError(t, err, "the older checkpoint and the journal hold every update")
			defer r.Close()
			assert.Equal(t, int64(8), r.Clock())
			assert.Equal(t, want, values(t, r))
		})
	}
}
