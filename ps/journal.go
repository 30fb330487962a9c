package ps

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/shoalml/shoal/optim"
)

// The journal (Config.Journal) makes every acknowledged update survive the
// shard's process being killed: each update is appended to a file before
// it is applied, so before any caller hears of it, and a shard that starts
// replays, after its newest checkpoint, the updates the journal holds past
// that checkpoint's clock. A journal file starts at each checkpoint
// capture and is named by the clock it follows; files older than the
// oldest checkpoint kept are removed. Writes are not fsynced: they survive
// the process, not the machine.
//
// A journal file starts with the 8 bytes journalMagic. A record is:
// uint32 length of the body, uint32 CRC-32C of those 4 length bytes, the
// body, uint32 CRC-32C of the body, little-endian. The body: int64 clock
// after the update, uint32 n and n pairs (worker, step) of deduplication
// records, uint32 m and m pairs (worker, steps pushed) of SSP progress,
// uint32 k and k int64 workers the shard served the whole share right
// after the update, float64 the learning-rate scale of the update
// (Config.ScaleLR; 0 is 1), uint32 floats and the update's gradient (what the
// optimizer steps with, after the update rule). A record of no floats is
// a serve alone, at its clock: the update rules that depend on what each
// worker was served (update.go) need them replayed. Journals of version
// 2 (journalMagicV2) have no served workers and no serves alone; they are
// still read.
//
// A process that dies while writing leaves a prefix of its last record
// (the bytes of one Write reach the file in order), so a file that ends
// inside a record is torn: the replay ends there, and that update was
// never acknowledged. Anything else that does not check out — a length
// whose own checksum fails, a length no record of this shard can have, a
// body whose checksum fails, a body that does not parse — is damage done
// since, wherever it is: the length has its own checksum so that a
// damaged one is never taken for a tear, and a damaged record stops the
// shard's start (ErrCheckpoint), since the updates it and any after it
// hold were acknowledged.

// journalRecord is one update as the journal holds it.
type journalRecord struct {
	clock    int64
	steps    [][2]int64 // (worker, step)
	progress [][2]int64 // (worker, steps pushed)
	served   []int64    // workers served the whole share after the update
	lrScale  float64    // the optimizer's learning-rate scale (Config.ScaleLR); 0 is 1
	grads    []float32  // none: a serve alone
}

// journalMagic starts every journal file this Shoal writes; one with
// journalMagicV2 is read too. A file with neither was written by an
// earlier Shoal, whose framing could not tell damage from a tear.
const (
	journalMagic   = "SHJRNL03"
	journalMagicV2 = "SHJRNL02"
)

type journal struct {
	f   *os.File
	w   *bufio.Writer
	buf []byte
}

func (s *Server) journalName(after int64) string {
	return filepath.Join(s.ckpt.dir, fmt.Sprintf("shard-%d-of-%d-journal-after-%012d.log", s.cfg.Shard, s.cfg.Plan.Servers, after))
}

// startJournalLocked starts a new journal file for the updates after
// clock, closing the current one.
func (s *Server) startJournalLocked(after int64) error {
	if s.jour != nil {
		if err := s.closeJournalLocked(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(s.ckpt.dir, 0o755); err != nil {
		return err
	}
	// 0600, as the checkpoints: the journal holds the same weights' updates.
	f, err := os.OpenFile(s.journalName(after), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	j := &journal{f: f, w: bufio.NewWriterSize(f, 1<<20)}
	_, err = j.w.WriteString(journalMagic)
	if err == nil {
		err = j.w.Flush()
	}
	if err != nil {
		return errors.Join(fmt.Errorf("starting the journal %s: %w", f.Name(), err), f.Close())
	}
	s.jour = j
	return nil
}

func (s *Server) closeJournalLocked() error {
	if s.jour == nil {
		return nil
	}
	err := errors.Join(s.jour.w.Flush(), s.jour.f.Close())
	s.jour = nil
	return err
}

// journalLocked appends rec before the update is applied. A journal that
// cannot be written (a full disk, say) stops the shard from taking
// updates it could lose: it returns ErrJournal, and so does every push
// after it, nothing is applied, and Failed reports it so that the
// shard's owner stops it; the restarted shard replays what was written.
func (s *Server) journalLocked(rec journalRecord) error {
	if s.jour == nil {
		return nil
	}
	if s.jourErr != nil {
		return s.jourErr
	}
	j := s.jour
	j.buf = appendRecord(j.buf[:0], rec, false)
	_, err := j.w.Write(j.buf)
	if err == nil {
		err = j.w.Flush()
	}
	if err != nil {
		s.jourErr = fmt.Errorf("%w: shard %d: writing update %d to %s: %w; the shard takes no more updates (the journal would lose them)",
			ErrJournal, s.cfg.Shard, rec.clock, j.f.Name(), err)
		s.log.Error("journal failed", "clock", rec.clock, "err", err)
		select {
		case s.failed <- s.jourErr:
		default: // the first failure is reported
		}
		return s.jourErr
	}
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecord appends rec, framed, to b: as version 2 wrote it with v2
// (which drops rec.served).
func appendRecord(b []byte, rec journalRecord, v2 bool) []byte {
	start := len(b)
	b = append(b, make([]byte, 8)...) // the length and its checksum
	b = binary.LittleEndian.AppendUint64(b, uint64(rec.clock))
	for _, pairs := range [][][2]int64{rec.steps, rec.progress} {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(pairs)))
		for _, p := range pairs {
			b = binary.LittleEndian.AppendUint64(b, uint64(p[0]))
			b = binary.LittleEndian.AppendUint64(b, uint64(p[1]))
		}
	}
	if !v2 {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(rec.served)))
		for _, w := range rec.served {
			b = binary.LittleEndian.AppendUint64(b, uint64(w))
		}
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(rec.lrScale))
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rec.grads)))
	for _, g := range rec.grads {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(g))
	}
	head, body := b[start:start+8], b[start+8:]
	binary.LittleEndian.PutUint32(head[:4], uint32(len(body)))
	binary.LittleEndian.PutUint32(head[4:], crc32.Checksum(head[:4], castagnoli))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(body, castagnoli))
}

// listJournals returns this shard's journal files, oldest first; a
// file's clock is the one it follows.
func (s *Server) listJournals() ([]ckptFile, error) {
	files, err := listNumbered(s.ckpt.dir, fmt.Sprintf("shard-%d-of-%d-journal-after-", s.cfg.Shard, s.cfg.Plan.Servers), ".log")
	sort.Slice(files, func(i, j int) bool { return files[i].clock < files[j].clock })
	return files, err
}

// replayJournal applies, in order, the journaled updates past the shard's
// clock (the newest checkpoint's), stopping at a torn record (the process
// died writing it) or at a gap. A damaged record is an error
// (ErrCheckpoint). It returns how many it applied.
func (s *Server) replayJournal() (int, error) {
	files, err := s.listJournals()
	if err != nil {
		return 0, fmt.Errorf("journal in %s: %w", s.ckpt.dir, err)
	}
	n := 0
	for _, jf := range files {
		if jf.clock > s.clock {
			break // a gap: the updates between were never journaled here
		}
		applied, gap, err := s.replayFile(jf.path)
		n += applied
		if err != nil || gap {
			return n, err
		}
	}
	return n, nil
}

// replayFile applies the updates of one journal file past the shard's
// clock; gap says it found one it cannot apply next.
func (s *Server) replayFile(path string) (n int, gap bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	magic := make([]byte, len(journalMagic))
	k, err := io.ReadFull(r, magic)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) && string(magic[:k]) == journalMagic[:k]:
		return 0, false, nil // the process died starting it
	case err != nil:
		return 0, false, fmt.Errorf("journal %s: %w", path, err)
	case string(magic) != journalMagic && string(magic) != journalMagicV2:
		return 0, false, fmt.Errorf("%w: journal %s does not start with %q or %q: an earlier Shoal wrote it, whose framing cannot tell damage from a tear; finish the run with that Shoal, or move the journal away to start from clock %d",
			ErrCheckpoint, path, journalMagic, journalMagicV2, s.clock)
	}
	v2 := string(magic) == journalMagicV2
	for {
		rec, err := s.readRecord(r, v2)
		switch {
		case errors.Is(err, io.EOF):
			return n, false, nil
		case errors.Is(err, errTorn):
			s.log.Warn("journal ends in a torn record (the process died writing it)", "path", path, "err", err)
			return n, false, nil
		case err != nil:
			follow := ""
			if errors.Is(err, errRecordDamaged) { // its length held: the rest can be counted
				follow = fmt.Sprintf(" and %d intact record(s) follow it", s.countRecords(r, v2))
			}
			return n, false, fmt.Errorf("%w: journal %s: the record after clock %d is damaged (%v)%s: its update and those after it were acknowledged, so replaying past it is impossible and stopping there would lose them; move the journal away to start from clock %d",
				ErrCheckpoint, path, s.clock, err, follow, s.clock)
		}
		if len(rec.grads) == 0 { // a serve alone, at its clock
			switch {
			case rec.clock < s.clock:
				continue // in the checkpoint already
			case rec.clock > s.clock:
				return n, true, nil
			}
			// At the shard's clock: again if the checkpoint holds it,
			// to the same effect (the weights of one clock are one).
			for _, w := range rec.served {
				s.serveLocked(w, false)
			}
			continue
		}
		if rec.clock <= s.clock {
			continue // in the checkpoint already
		}
		if rec.clock != s.clock+1 {
			return n, true, nil
		}
		scale := rec.lrScale
		if scale == 0 { // version 2, or a shard that did not scale
			scale = 1
		}
		s.scaleLRLocked(scale)
		s.stepLocked(rec.grads, optim.MaxAbs(rec.grads), nil)
		for _, p := range rec.steps {
			s.lastStep[p[0]] = p[1]
		}
		for _, p := range rec.progress {
			s.progress[p[0]] = p[1]
		}
		s.clock = rec.clock
		for _, w := range rec.served {
			s.serveLocked(w, false)
		}
		n++
	}
}

var (
	// errTorn is a record the file ends inside of: the process died
	// writing it.
	errTorn = errors.New("the journal ends inside a record")
	// errRecordDamaged is a whole record whose body's checksum does not
	// match.
	errRecordDamaged = errors.New("a record's checksum does not match")
)

// countRecords counts the intact records left in r, up to the first that
// is not.
func (s *Server) countRecords(r io.Reader, v2 bool) int {
	n := 0
	for {
		if _, err := s.readRecord(r, v2); err != nil {
			return n
		}
		n++
	}
}

// readRecord reads one record, checking its frame and checksums: io.EOF
// at the end, errTorn for a record cut short, any other error for damage.
// v2 reads a record of version 2, which has no served workers.
func (s *Server) readRecord(r io.Reader, v2 bool) (journalRecord, error) {
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return journalRecord{}, fmt.Errorf("%w: its length is cut short", errTorn)
		}
		return journalRecord{}, err // io.EOF: the end
	}
	size := binary.LittleEndian.Uint32(head[:4])
	if crc32.Checksum(head[:4], castagnoli) != binary.LittleEndian.Uint32(head[4:]) {
		return journalRecord{}, errors.New("a record's length does not match its checksum")
	}
	if limit := 64 + 40*uint32(s.cfg.Workers+1) + 4*uint32(s.floats); size > limit {
		return journalRecord{}, fmt.Errorf("a record of %d bytes, more than the %d this shard can write", size, limit)
	}
	body := make([]byte, size+4)
	if _, err := io.ReadFull(r, body); err != nil {
		return journalRecord{}, fmt.Errorf("%w: a record of %d bytes cut short", errTorn, size)
	}
	body, sum := body[:size], binary.LittleEndian.Uint32(body[size:])
	if crc32.Checksum(body, castagnoli) != sum {
		return journalRecord{}, errRecordDamaged
	}
	d := &bodyReader{b: body}
	rec := journalRecord{clock: int64(d.u64())}
	for _, pairs := range []*[][2]int64{&rec.steps, &rec.progress} {
		n := d.u32()
		if int(n) > len(d.b)/16 {
			return journalRecord{}, fmt.Errorf("a record that claims %d entries in %d bytes", n, len(d.b))
		}
		for range n {
			*pairs = append(*pairs, [2]int64{int64(d.u64()), int64(d.u64())})
		}
	}
	if !v2 {
		n := d.u32()
		if int(n) > len(d.b)/8 {
			return journalRecord{}, fmt.Errorf("a record that claims %d served workers in %d bytes", n, len(d.b))
		}
		for range n {
			rec.served = append(rec.served, int64(d.u64()))
		}
		rec.lrScale = math.Float64frombits(d.u64())
		if !(rec.lrScale >= 0) || math.IsInf(rec.lrScale, 0) {
			return journalRecord{}, fmt.Errorf("a record of learning-rate scale %v", rec.lrScale)
		}
	}
	nf := d.u32()
	if d.err != nil || int(nf) != s.floats && (nf != 0 || v2) || len(d.b) != 4*int(nf) {
		return journalRecord{}, fmt.Errorf("a record of %d floats for a shard of %d", nf, s.floats)
	}
	if nf == 0 {
		return rec, nil
	}
	rec.grads = make([]float32, nf)
	for i := range rec.grads {
		rec.grads[i] = math.Float32frombits(binary.LittleEndian.Uint32(d.b[4*i:]))
	}
	return rec, nil
}

// bodyReader reads a record body's little-endian integers, noting a short read.
type bodyReader struct {
	b   []byte
	err error
}

func (d *bodyReader) u64() uint64 { return binary.LittleEndian.Uint64(d.next(8)) }

func (d *bodyReader) u32() uint32 { return binary.LittleEndian.Uint32(d.next(4)) }

// next consumes n bytes. On a short read it notes the error, leaves d.b
// as it is and returns n zero bytes, so the value read is 0.
func (d *bodyReader) next(n int) []byte {
	if len(d.b) < n {
		d.err = io.ErrUnexpectedEOF
		return make([]byte, n)
	}
	b := d.b[:n]
	d.b = d.b[n:]
	return b
}

// removeOldJournals removes the journals that end before the oldest
// checkpoint kept (oldest is its clock).
func (s *Server) removeOldJournals(oldest int64) {
	files, _ := s.listJournals()
	for i, f := range files {
		if i+1 < len(files) && files[i+1].clock <= oldest {
			os.Remove(f.path)
		}
	}
}
