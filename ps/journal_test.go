package ps

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
)

// journalConfig is a shard of 4 floats with momentum (so that replay must
// restore optimizer state too), checkpointing every 3 updates into dir and
// journaling.
func journalConfig(mode consistency.Mode, workers int, dir string) Config {
	var l nn.Layout
	l.Add("w", 4)
	plan, _ := shard.New(4, 1, 16)
	ocfg := optim.DefaultConfig()
	ocfg.Algorithm, ocfg.LR, ocfg.Momentum = "momentum", 0.5, 0.9
	return Config{Mode: mode, Plan: plan, Layout: l, Optimizer: ocfg, Workers: workers, Staleness: 1,
		CheckpointDir: dir, CheckpointEvery: 3, Journal: true}
}

// crashAndRestart starts a new shard from dir without the old one's final
// checkpoint, as after a SIGKILL.
func crashAndRestart(t *testing.T, cfg Config) *Server {
	t.Helper()
	r, err := New(cfg, []float32{0, 1, 2, 3})
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

func TestJournalLosesNoUpdate(t *testing.T) {
	for _, tc := range []struct {
		mode    consistency.Mode
		workers int
	}{{consistency.Async, 2}, {consistency.Sync, 2}, {consistency.SSP, 2}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			cfg := journalConfig(tc.mode, tc.workers, t.TempDir())
			s, err := New(cfg, []float32{0, 1, 2, 3})
			require.NoError(t, err)
			for step := range int64(7) {
				for w := range int64(tc.workers) {
					clock := step
					if tc.mode != consistency.Sync {
						clock = s.Clock()
					}
					push(t, s, w, step, clock, float32(1+w+step))
				}
			}
			want, clock := values(t, s), s.Clock()
			require.NoError(t, s.Close()) // no final checkpoint: a crash

			r := crashAndRestart(t, cfg)
			assert.Equal(t, clock, r.Clock(), "every update is back, none twice")
			assert.Equal(t, want, values(t, r), "bit for bit, optimizer state included")
			res := push(t, r, 1, 6, r.Clock(), 100)
			assert.True(t, res.Duplicate, "the dedup records are back too")
			assert.Equal(t, want, values(t, r))

		})
	}
}

// fivePushesJournaled runs one async worker's 5 pushes through a shard
// that checkpoints at update 3 and journals 4 and 5, then stops it as a
// crash would; it returns the shard's config and its last journal file.
func fivePushesJournaled(t *testing.T) (Config, string) {
	t.Helper()
	cfg := journalConfig(consistency.Async, 1, t.TempDir())
	s, err := New(cfg, []float32{0, 1, 2, 3})
	require.NoError(t, err)
	for step := range int64(5) {
		push(t, s, 0, step, step, 1)
	}
	require.NoError(t, s.Close())
	files, err := s.listJournals()
	require.NoError(t, err)
	return cfg, files[len(files)-1].path
}

func TestJournalTornTailIsDropped(t *testing.T) {
	cfg, last := fivePushesJournaled(t)
	st, err := os.Stat(last)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(last, st.Size()-3)) // the process died writing update 5

	r := crashAndRestart(t, cfg)
	assert.Equal(t, int64(4), r.Clock(), "update 4 replayed, the torn 5 dropped")
	res := push(t, r, 0, 4, 4, 1)
	assert.False(t, res.Duplicate, "update 5 was never acknowledged: its retry applies")
	assert.Equal(t, int64(5), r.Clock())
}

// recordAt is where update k's record starts in the journal of
// fivePushesJournaled (updates 4 and 5, one size each), past the file's
// magic.
func recordAt(b []byte, k int) int {
	size := (len(b) - len(journalMagic)) / 2
	return len(journalMagic) + (k-4)*size
}

// TestJournalDamageStopsTheStart: a record that does not check out was not
// torn by a dying process (that leaves a prefix): the update in it, and any
// after it, were acknowledged. Wherever the damage is (the body, the length
// field, the last record) the shard does not start, and says how to start
// anyway; it never reads damage as the journal's clean end.
func TestJournalDamageStopsTheStart(t *testing.T) {
	cfg, last := fivePushesJournaled(t)
	good, err := os.ReadFile(last)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		at   func(b []byte) int
		want []string
	}{
		{"a bit of update 4's body", func(b []byte) int { return recordAt(b, 4) + 8 + 2 },
			[]string{"the record after clock 3 is damaged (a record's checksum does not match) and 1 intact record(s) follow it"}},
		{"update 4's length", func(b []byte) int { return recordAt(b, 4) + 1 },
			[]string{"the record after clock 3 is damaged (a record's length does not match its checksum)"}},
		{"the length's checksum", func(b []byte) int { return recordAt(b, 4) + 5 },
			[]string{"the record after clock 3 is damaged (a record's length does not match its checksum)"}},
		{"the last record's body", func(b []byte) int { return recordAt(b, 5) + 8 + 2 },
			[]string{"the record after clock 4 is damaged (a record's checksum does not match) and 0 intact record(s) follow it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(good)
			b[tc.at(b)] ^= 1
			require.NoError(t, os.WriteFile(last, b, 0o600))
			_, err := New(cfg, []float32{0, 1, 2, 3})
			require.ErrorIs(t, err, ErrCheckpoint)
			for _, w := range tc.want {
				assert.ErrorContains(t, err, w)
			}
			assert.ErrorContains(t, err, "move the journal away to start from clock")
		})
	}
	require.NoError(t, os.WriteFile(last, good, 0o600))
	r := crashAndRestart(t, cfg)
	assert.Equal(t, int64(5), r.Clock(), "the undamaged journal replays whole")
}

// TestJournalTornInItsHeaderIsATear: the process died in the middle of the
// last record's length field.
func TestJournalTornInItsHeaderIsATear(t *testing.T) {
	cfg, last := fivePushesJournaled(t)
	b, err := os.ReadFile(last)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(last, b[:recordAt(b, 5)+3], 0o600))
	r := crashAndRestart(t, cfg)
	assert.Equal(t, int64(4), r.Clock())
}

// TestJournalOfAnEarlierFraming: a journal without the magic (the framing
// before it could not tell damage from a tear) is refused with what to do.
func TestJournalOfAnEarlierFraming(t *testing.T) {
	cfg, last := fivePushesJournaled(t)
	b, err := os.ReadFile(last)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(last, b[len(journalMagic):], 0o600))
	_, err = New(cfg, []float32{0, 1, 2, 3})
	require.ErrorIs(t, err, ErrCheckpoint)
	assert.ErrorContains(t, err, `does not start with "SHJRNL03" or "SHJRNL02": an earlier Shoal wrote it`)
}

func TestJournalIsReadableByItsOwnerOnly(t *testing.T) {
	_, last := fivePushesJournaled(t)
	st, err := os.Stat(last)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "as the checkpoints: the same weights' updates")
}

// TestAFullDiskStopsTheShardWithoutAPanic: a journal write that fails
// (/dev/full answers every write with ENOSPC) refuses that push and every
// one after it with ErrJournal, applies none of them, and reports the
// failure on Failed for the shard's owner to stop it.
func TestAFullDiskStopsTheShardWithoutAPanic(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full to stand for a full disk: %v", err)
	}
	cfg := journalConfig(consistency.Async, 1, t.TempDir())
	s, err := New(cfg, []float32{0, 1, 2, 3})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	push(t, s, 0, 0, 0, 1)
	before := values(t, s)

	s.mu.Lock()
	s.jour.f.Close()
	s.jour.f, s.jour.w = full, bufio.NewWriter(full)
	s.mu.Unlock()
	for step := int64(1); step <= 2; step++ {
		_, err := s.Push(context.Background(), signed(s, Push{WorkerID: 0, Step: step, Clock: s.Clock(), Ranges: whole, Grads: fill(1)}))
		require.ErrorIs(t, err, ErrJournal)
		assert.ErrorContains(t, err, "no space left on device")
	}
	assert.Equal(t, before, values(t, s), "nothing that was not journaled is applied")
	assert.Equal(t, int64(1), s.Clock())
	select {
	case err := <-s.Failed():
		assert.ErrorIs(t, err, ErrJournal)
	default:
		t.Fatal("the journal's failure is not on Failed")
	}
}

func TestJournalNeedsACheckpointDir(t *testing.T) {
	cfg := journalConfig(consistency.Async, 1, "")
	_, err := New(cfg, []float32{0, 1, 2, 3})
	assert.ErrorContains(t, err, "journal: needs a checkpoint directory")
}

func TestOldJournalsAreRemoved(t *testing.T) {
	dir := t.TempDir()
	cfg := journalConfig(consistency.Async, 1, dir)
	s, err := New(cfg, []float32{0, 1, 2, 3})
	require.NoError(t, err)
	defer s.Close()
	for step := range int64(20) {
		push(t, s, 0, step, step, 1)
	}
	files, err := s.listJournals()
	require.NoError(t, err)
	ckpts, err := s.listCheckpoints()
	require.NoError(t, err)
	require.Len(t, ckpts, checkpointKeep)
	assert.LessOrEqual(t, files[0].clock, ckpts[len(ckpts)-1].clock, "the oldest checkpoint kept is covered")
	assert.LessOrEqual(t, len(files), checkpointKeep+1, "no journal older than what the checkpoints need")
}

// FuzzReadJournalRecord reads arbitrary bytes as a journal record: it must
// never panic, and whatever it accepts must fit the shard.
func FuzzReadJournalRecord(f *testing.F) {
	cfg := journalConfig(consistency.Async, 1, f.TempDir())
	s, err := New(cfg, []float32{0, 1, 2, 3})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Push(context.Background(), signed(s, Push{Ranges: whole, Grads: fill(1)})); err != nil {
		f.Fatal(err)
	}
	files, err := s.listJournals()
	if err != nil || len(files) == 0 {
		f.Fatal("no journal", err)
	}
	good, err := os.ReadFile(files[len(files)-1].path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good[len(journalMagic):])
	f.Add([]byte{255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, v2 := range []bool{false, true} {
			rec, err := s.readRecord(bytes.NewReader(b), v2)
			if err == nil && len(rec.grads) != s.Floats() && (len(rec.grads) != 0 || v2) {
				t.Fatalf("accepted a record of %d floats for a shard of %d", len(rec.grads), s.Floats())
			}
		}
	})
}
