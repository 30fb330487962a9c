package ps

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
)

// ErrCheckpoint marks a checkpoint that cannot be used: corrupt, or
// written by another shard, plan, model or optimizer.
var ErrCheckpoint = errors.New("unusable checkpoint")

// checkpointKeep is how many checkpoints a shard keeps on disk.
const checkpointKeep = 2

// checkpointer writes a shard's state every `every` updates.
type checkpointer struct {
	dir   string
	every int64
	// mu serialises writers; a push that finds a write in progress does
	// not wait for it.
	mu sync.Mutex
	// due is a state captured under Server.mu, waiting to be written.
	due *ckptState
	// last is the clock of the newest state captured.
	last int64
}

// ckptState is a copy of everything a shard needs to resume.
type ckptState struct {
	clock    int64
	values   [][]float32   // per owned chunk
	opt      []optim.State // per owned chunk
	lastStep map[int64]int64
	progress map[int64]int64
	// served and backup are the update rule's (update.go): the clock each
	// worker was last served at, and DC-ASGD's copy of what.
	served map[int64]int64
	backup map[int64][]float32
}

// ckptMeta is the checkpoint's identity and scalars, stored as the
// safetensors metadata.
type ckptMeta struct {
	Kind        string          `json:"kind"`
	Shard       int             `json:"shard"`
	Servers     int             `json:"servers"`
	VectorLen   int             `json:"vector_length"`
	ChunkFloats int             `json:"chunk_floats"`
	PlanVersion uint32          `json:"plan_version"`
	Layout      string          `json:"layout"`
	Algorithm   string          `json:"algorithm"`
	Clock       int64           `json:"clock"`
	OptSteps    []int64         `json:"opt_steps"`
	LastStep    map[int64]int64 `json:"last_step"`
	Progress    map[int64]int64 `json:"progress"`
	// Served and DCBackups are the update rule's state (update.go): the
	// clock each worker was last served at, and the workers whose DC-ASGD
	// copy of what they were served the file holds
	// (chunk.<c>.dc_backup.<worker>).
	Served    map[int64]int64 `json:"served,omitempty"`
	DCBackups []int64         `json:"dc_backups,omitempty"`
	CRC32C    uint32          `json:"crc32c"`
}

// ckptKind names the format: version 2's CRC32C covers the metadata (the
// clock, the steps, the progress) as well as the floats; version 1's, the
// floats alone, so a damaged clock went unseen and the journal's replay
// skipped acknowledged updates as already in the checkpoint. Version 1
// files are still read.
const (
	ckptKind   = "shoal-ps-checkpoint/2"
	ckptKindV1 = "shoal-ps-checkpoint/1"
)

// checksum is the CRC32C of the floats and then of the metadata as JSON,
// with its own CRC32C field zero.
func (m ckptMeta) checksum(vec []float32) (uint32, error) {
	m.CRC32C = 0
	js, err := json.Marshal(m)
	if err != nil {
		return 0, err
	}
	return crc32.Update(crcFloats(vec), crc32.MakeTable(crc32.Castagnoli), js), nil
}

func (s *Server) ckptName(clock int64) string {
	return filepath.Join(s.ckpt.dir, fmt.Sprintf("shard-%d-of-%d-clock-%012d.safetensors", s.cfg.Shard, s.cfg.Plan.Servers, clock))
}

// captureLocked copies the state for a checkpoint if one is due. In sync
// mode a step in progress is left out: values and optimizer state do not
// change until a step is applied, and the workers already in the barrier
// get their dedup record from before their push, so they push again after
// a restart and the step is collected anew.
func (s *Server) captureLocked() {
	if s.ckpt.dir == "" || s.ckpt.every <= 0 || s.clock-s.ckpt.last < s.ckpt.every {
		return
	}
	st := &ckptState{clock: s.clock, lastStep: map[int64]int64{}, progress: map[int64]int64{}}
	for _, ch := range s.chunks {
		st.values = append(st.values, append([]float32(nil), ch.buf.data...))
		st.opt = append(st.opt, ch.opt.State())
	}
	for k, v := range s.lastStep {
		st.lastStep[k] = v
	}
	s.mode.rewindLocked(st.lastStep)
	for k, v := range s.progress {
		st.progress[k] = v
	}
	if s.upd != nil {
		st.served = maps.Clone(s.upd.served)
		st.backup = make(map[int64][]float32, len(s.upd.backup))
		for w, b := range s.upd.backup {
			st.backup[w] = slices.Clone(b)
		}
	}
	s.ckpt.due, s.ckpt.last = st, s.clock
	if s.jour != nil {
		// The updates after this state go to a journal of their own; the
		// older one stays until a checkpoint covering it is on disk.
		if err := s.startJournalLocked(s.clock); err != nil {
			panic(fmt.Sprintf("ps: shard %d: starting a journal: %v", s.cfg.Shard, err))
		}
	}
}

// maybeCheckpoint writes a captured state, outside the shard's lock.
func (s *Server) maybeCheckpoint() {
	if s.ckpt.dir == "" {
		return
	}
	if !s.ckpt.mu.TryLock() {
		return // another push is writing; it picks up what is due
	}
	defer s.ckpt.mu.Unlock()
	for {
		s.mu.Lock()
		st := s.ckpt.due
		s.ckpt.due = nil
		s.mu.Unlock()
		if st == nil {
			return
		}
		if err := s.writeCheckpoint(st); err != nil {
			s.log.Error("checkpoint failed", "clock", st.clock, "err", err)
			if !s.cfg.CheckpointErrorsWarn {
				select {
				case s.failed <- fmt.Errorf("checkpoint at clock %d into %s: %w", st.clock, s.ckpt.dir, err):
				default: // the first one is reported
				}
			}
		}
	}
}

// Failed delivers the first checkpoint that could not be written during
// the run, unless Config.CheckpointErrorsWarn is set; the shard's owner
// should stop serving.
func (s *Server) Failed() <-chan error { return s.failed }

// Close closes the journal, if any; call it after the final Checkpoint.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeJournalLocked()
}

// Checkpoint writes the current state now (at shutdown, say), unless the
// newest checkpoint already holds it. In sync mode a step in progress is
// left out (see captureLocked).
func (s *Server) Checkpoint() error {
	if s.ckpt.dir == "" {
		return nil
	}
	s.ckpt.mu.Lock()
	defer s.ckpt.mu.Unlock()
	s.mu.Lock()
	every := s.ckpt.every
	s.ckpt.every = 1
	s.captureLocked()
	s.ckpt.every = every
	st := s.ckpt.due
	s.ckpt.due = nil
	s.mu.Unlock()
	if st == nil {
		return nil
	}
	return s.writeCheckpoint(st)
}

func (s *Server) writeCheckpoint(st *ckptState) error {
	var l nn.Layout
	var vec []float32
	meta := ckptMeta{Kind: ckptKind, Shard: s.cfg.Shard, Servers: s.cfg.Plan.Servers, VectorLen: s.cfg.Plan.VectorLen,
		ChunkFloats: s.cfg.Plan.ChunkFloats, PlanVersion: shard.Version, Layout: s.cfg.Layout.String(),
		Algorithm: s.cfg.Optimizer.Algorithm, Clock: st.clock, LastStep: st.lastStep, Progress: st.progress, Served: st.served}
	meta.DCBackups = slices.Sorted(maps.Keys(st.backup))
	at := 0
	for i, ch := range s.chunks {
		c := s.cfg.Plan.ChunkAt(ch.r.Off)
		l.Add(fmt.Sprintf("chunk.%d.values", c), ch.r.Len)
		vec = append(vec, st.values[i]...)
		names := make([]string, 0, len(st.opt[i].Slots))
		for name := range st.opt[i].Slots {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			l.Add(fmt.Sprintf("chunk.%d.%s", c, name), ch.r.Len)
			vec = append(vec, st.opt[i].Slots[name]...)
		}
		for _, w := range meta.DCBackups {
			l.Add(fmt.Sprintf("chunk.%d.dc_backup.%d", c, w), ch.r.Len)
			vec = append(vec, st.backup[w][at:at+ch.r.Len]...)
		}
		at += ch.r.Len
		meta.OptSteps = append(meta.OptSteps, st.opt[i].Steps)
	}
	crc, err := meta.checksum(vec)
	if err != nil {
		return err
	}
	meta.CRC32C = crc
	js, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.ckpt.dir, 0o755); err != nil {
		return err
	}
	path := s.ckptName(st.clock)
	if err := nn.SaveSafetensors(path, l, vec, map[string]string{"shoal_checkpoint": string(js)}); err != nil {
		return err
	}
	if d, err := os.Open(s.ckpt.dir); err == nil {
		_ = d.Sync() // make the rename durable
		d.Close()
	}
	s.log.Info("checkpoint written", "path", path, "clock", st.clock)
	s.mu.Lock()
	s.stats.Checkpoints++
	s.stats.LastCheckpoint, s.stats.LastCheckpointClock = time.Now(), st.clock
	s.mu.Unlock()
	files, _ := s.listCheckpoints()
	for i, f := range files {
		if i >= checkpointKeep {
			os.Remove(f.path)
		}
	}
	if n := min(len(files), checkpointKeep); n > 0 {
		s.removeOldJournals(files[n-1].clock)
	}
	return nil
}

type ckptFile struct {
	path  string
	clock int64
}

// listCheckpoints returns this shard's checkpoint files, newest first.
func (s *Server) listCheckpoints() ([]ckptFile, error) {
	files, err := listNumbered(s.ckpt.dir, fmt.Sprintf("shard-%d-of-%d-clock-", s.cfg.Shard, s.cfg.Plan.Servers), ".safetensors")
	sort.Slice(files, func(i, j int) bool { return files[i].clock > files[j].clock })
	return files, err
}

// listNumbered returns the files of dir named prefix, a number, suffix,
// with that number as their clock; a missing dir has none.
func listNumbered(dir, prefix, suffix string) ([]ckptFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var files []ckptFile
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
			continue
		}
		c, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, prefix), suffix), 10, 64)
		if err != nil {
			continue
		}
		files = append(files, ckptFile{filepath.Join(dir, name), c})
	}
	return files, nil
}

// resume loads the newest usable checkpoint, if any. A corrupt file is
// refused (logged) in favour of an older one; if every file is corrupt, or
// one belongs to another shard, plan, model or optimizer, the shard does
// not start: a silent fresh start would throw the training away.
func (s *Server) resume() error {
	files, err := s.listCheckpoints()
	if err != nil {
		return fmt.Errorf("checkpoint dir %s: %w", s.ckpt.dir, err)
	}
	var refused []string
	for _, f := range files {
		st, err := s.loadCheckpoint(f.path)
		if err != nil {
			if errors.Is(err, errForeign) {
				return fmt.Errorf("%w: %s: %w", ErrCheckpoint, f.path, err)
			}
			s.log.Warn("refusing corrupt checkpoint", "path", f.path, "err", err)
			refused = append(refused, fmt.Sprintf("%s: %v", f.path, err))
			continue
		}
		s.restore(st)
		s.log.Info("resumed from checkpoint", "path", f.path, "clock", st.clock)
		return nil
	}
	if len(refused) > 0 {
		return fmt.Errorf("%w: no usable checkpoint in %s:\n  %s", ErrCheckpoint, s.ckpt.dir, strings.Join(refused, "\n  "))
	}
	return nil
}

var errForeign = errors.New("written for another shard, plan, model or optimizer")

// loadCheckpoint reads and checks a checkpoint without touching the shard.
func (s *Server) loadCheckpoint(path string) (*ckptState, error) {
	l, vec, m, err := nn.LoadSafetensors(path)
	if err != nil {
		return nil, err
	}
	// The file's name says it is this shard's: metadata that does not
	// parse, or names no kind, is damage (an older file may serve); a
	// kind of another version is another Shoal's.
	var meta ckptMeta
	js, ok := m["shoal_checkpoint"]
	if !ok {
		return nil, fmt.Errorf("no shoal_checkpoint metadata: the file is damaged")
	}
	if err := json.Unmarshal([]byte(js), &meta); err != nil {
		return nil, fmt.Errorf("its metadata does not parse (%v): the file is damaged", err)
	}
	var sum uint32
	switch meta.Kind {
	case ckptKind:
		if sum, err = meta.checksum(vec); err != nil {
			return nil, err
		}
	case ckptKindV1:
		sum = crcFloats(vec)
	default:
		if strings.HasPrefix(meta.Kind, "shoal-ps-checkpoint/") {
			return nil, fmt.Errorf("%w: it is a %s, this Shoal reads %s and %s", errForeign, meta.Kind, ckptKind, ckptKindV1)
		}
		return nil, fmt.Errorf("its metadata names kind %q, not %s: the file is damaged", meta.Kind, ckptKind)
	}
	if sum != meta.CRC32C {
		return nil, fmt.Errorf("checksum %08x, the file says %08x: the data is damaged", sum, meta.CRC32C)
	}
	p := s.cfg.Plan
	want := fmt.Sprintf("shard %d of %d, vector %d, chunks %d, plan v%d, optimizer %s, layout %s",
		s.cfg.Shard, p.Servers, p.VectorLen, p.ChunkFloats, shard.Version, s.cfg.Optimizer.Algorithm, s.cfg.Layout.String())
	got := fmt.Sprintf("shard %d of %d, vector %d, chunks %d, plan v%d, optimizer %s, layout %s",
		meta.Shard, meta.Servers, meta.VectorLen, meta.ChunkFloats, meta.PlanVersion, meta.Algorithm, meta.Layout)
	if got != want {
		return nil, fmt.Errorf("%w: it holds %s; this server is %s", errForeign, got, want)
	}
	if len(meta.OptSteps) != len(s.chunks) {
		return nil, fmt.Errorf("%d optimizer step counts for %d chunks", len(meta.OptSteps), len(s.chunks))
	}
	st := &ckptState{clock: meta.Clock, lastStep: meta.LastStep, progress: meta.Progress, served: meta.Served, backup: map[int64][]float32{}}
	if len(meta.DCBackups) > s.cfg.Workers {
		return nil, fmt.Errorf("DC-ASGD copies of %d workers, this shard has %d", len(meta.DCBackups), s.cfg.Workers)
	}
	for _, w := range meta.DCBackups {
		if err := s.checkWorker(w); err != nil {
			return nil, fmt.Errorf("a DC-ASGD copy: %w", err)
		}
		st.backup[w] = make([]float32, 0, s.floats)
	}
	if st.lastStep == nil {
		st.lastStep = map[int64]int64{}
	}
	if st.progress == nil {
		st.progress = map[int64]int64{}
	}
	for i, ch := range s.chunks {
		c := p.ChunkAt(ch.r.Off)
		t, ok := l.Find(fmt.Sprintf("chunk.%d.values", c))
		if !ok || t.Size() != ch.r.Len {
			return nil, fmt.Errorf("chunk %d: values missing or of the wrong size", c)
		}
		st.values = append(st.values, t.View(vec))
		ost := optim.State{Steps: meta.OptSteps[i], Slots: map[string][]float32{}}
		for _, name := range ch.opt.SlotNames() {
			t, ok := l.Find(fmt.Sprintf("chunk.%d.%s", c, name))
			if !ok {
				return nil, fmt.Errorf("chunk %d: optimizer slot %q missing", c, name)
			}
			ost.Slots[name] = t.View(vec)
		}
		for _, w := range meta.DCBackups {
			t, ok := l.Find(fmt.Sprintf("chunk.%d.dc_backup.%d", c, w))
			if !ok || t.Size() != ch.r.Len {
				return nil, fmt.Errorf("chunk %d: the DC-ASGD copy of worker %d missing or of the wrong size", c, w)
			}
			st.backup[w] = append(st.backup[w], t.View(vec)...)
		}
		// Check the optimizer state now, so restore cannot fail half-way.
		probe, _ := optim.New(s.cfg.Optimizer, ch.r.Len)
		if err := probe.Restore(ost); err != nil {
			return nil, fmt.Errorf("chunk %d: %w", c, err)
		}
		st.opt = append(st.opt, ost)
	}
	return st, nil
}

// restore installs a state loadCheckpoint checked.
func (s *Server) restore(st *ckptState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.chunks {
		s.ownLocked(&s.chunks[i])
		copy(s.chunks[i].buf.data, st.values[i])
		s.chunks[i].unbound()
		if err := s.chunks[i].opt.Restore(st.opt[i]); err != nil {
			panic(fmt.Sprintf("ps: restoring a checked checkpoint: %v", err))
		}
	}
	s.clock, s.lastStep, s.progress = st.clock, st.lastStep, st.progress
	if s.upd != nil {
		// Whatever the rule that wrote them: a rule that keeps no copies
		// drops them, and DC-ASGD without them applies a worker's pushes
		// uncorrected until it serves it.
		s.upd.served = st.served
		if s.upd.served == nil {
			s.upd.served = map[int64]int64{}
		}
		clear(s.upd.backup)
		if s.upd.cfg.Rule == UpdateDCASGD {
			maps.Copy(s.upd.backup, st.backup)
		}
	}
	s.ckpt.last = st.clock
}

func crcFloats(v []float32) uint32 {
	tab := crc32.MakeTable(crc32.Castagnoli)
	var crc uint32
	buf := make([]byte, 0, 64<<10)
	for len(v) > 0 {
		n := min(len(v), cap(buf)/4)
		buf = buf[:4*n]
		for i, f := range v[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(f))
		}
		crc = crc32.Update(crc, tab, buf)
		v = v[n:]
	}
	return crc
}
