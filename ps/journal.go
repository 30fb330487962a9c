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
// A record is: uint32 length of the body, the body, uint32 CRC-32C of the
// body, little-endian. The body: int64 clock after the update, uint32 n
// and n pairs (worker, step) of deduplication records, uint32 m and m
// pairs (worker, steps pushed) of SSP progress, uint32 floats and the
// update's gradient (what the optimizer steps with). A torn or damaged
// record ends the replay there: the process died while writing it, before
// it was applied.

// journalRecord is one update as the journal holds it.
type journalRecord struct {
	clock    int64
	steps    [][2]int64 // (worker, step)
	progress [][2]int64 // (worker, steps pushed)
	grads    []float32
}

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
	f, err := os.OpenFile(s.journalName(after), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	s.jour = &journal{f: f, w: bufio.NewWriterSize(f, 1<<20)}
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
// cannot be written stops the shard from acknowledging updates it could
// lose: it panics, and the restarted shard replays what was written.
func (s *Server) journalLocked(rec journalRecord) {
	if s.jour == nil {
		return
	}
	j := s.jour
	b := j.buf[:0]
	b = binary.LittleEndian.AppendUint64(b, uint64(rec.clock))
	for _, pairs := range [][][2]int64{rec.steps, rec.progress} {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(pairs)))
		for _, p := range pairs {
			b = binary.LittleEndian.AppendUint64(b, uint64(p[0]))
			b = binary.LittleEndian.AppendUint64(b, uint64(p[1]))
		}
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(rec.grads)))
	for _, g := range rec.grads {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(g))
	}
	var frame [4]byte
	binary.LittleEndian.PutUint32(frame[:], uint32(len(b)))
	crc := binary.LittleEndian.AppendUint32(nil, crc32.Checksum(b, castagnoli))
	for _, part := range [][]byte{frame[:], b, crc} {
		if _, err := j.w.Write(part); err != nil {
			panic(fmt.Sprintf("ps: shard %d: writing the journal: %v", s.cfg.Shard, err))
		}
	}
	if err := j.w.Flush(); err != nil {
		panic(fmt.Sprintf("ps: shard %d: writing the journal: %v", s.cfg.Shard, err))
	}
	j.buf = b
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// listJournals returns this shard's journal files, oldest first; a
// file's clock is the one it follows.
func (s *Server) listJournals() ([]ckptFile, error) {
	files, err := listNumbered(s.ckpt.dir, fmt.Sprintf("shard-%d-of-%d-journal-after-", s.cfg.Shard, s.cfg.Plan.Servers), ".log")
	sort.Slice(files, func(i, j int) bool { return files[i].clock < files[j].clock })
	return files, err
}

// replayJournal applies, in order, the journaled updates past the shard's
// clock (the newest checkpoint's), stopping at the first torn or damaged
// record or at a gap. It returns how many it applied.
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
		f, err := os.Open(jf.path)
		if err != nil {
			return n, fmt.Errorf("journal: %w", err)
		}
		r := bufio.NewReaderSize(f, 1<<20)
		for {
			rec, err := s.readRecord(r)
			if err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				// A record the process died writing is the journal's
				// last; one with intact records after it was damaged
				// since, and the updates after it were acknowledged.
				if errors.Is(err, errRecordDamaged) {
					if after := s.countRecords(r); after > 0 {
						f.Close()
						return n, fmt.Errorf("%w: journal %s: the record after clock %d is damaged (%v) and %d intact record(s) follow it: replaying past it is impossible, and stopping there would lose updates that were acknowledged; move the journal away to start from clock %d",
							ErrCheckpoint, jf.path, s.clock, err, after, s.clock)
					}
				}
				s.log.Warn("journal ends in a torn or damaged record (the process died writing it)", "path", jf.path, "err", err)
				break
			}
			if rec.clock <= s.clock {
				continue // in the checkpoint already
			}
			if rec.clock != s.clock+1 {
				f.Close()
				return n, nil
			}
			s.stepLocked(rec.grads, optim.MaxAbs(rec.grads), nil)
			for _, p := range rec.steps {
				s.lastStep[p[0]] = p[1]
			}
			for _, p := range rec.progress {
				s.progress[p[0]] = p[1]
			}
			s.clock = rec.clock
			n++
		}
		f.Close()
	}
	return n, nil
}

// errRecordDamaged is a whole record whose checksum does not match.
var errRecordDamaged = errors.New("a record's checksum does not match")

// countRecords counts the intact records left in r, up to the first that
// is not.
func (s *Server) countRecords(r io.Reader) int {
	n := 0
	for {
		if _, err := s.readRecord(r); err != nil {
			return n
		}
		n++
	}
}

// readRecord reads one record, checking its frame and checksum.
func (s *Server) readRecord(r io.Reader) (journalRecord, error) {
	var frame [4]byte
	if _, err := io.ReadFull(r, frame[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return journalRecord{}, fmt.Errorf("a record's length is cut short")
		}
		return journalRecord{}, err // io.EOF: the end
	}
	size := binary.LittleEndian.Uint32(frame[:])
	if limit := 64 + 32*uint32(s.cfg.Workers+1) + 4*uint32(s.floats); size > limit {
		return journalRecord{}, fmt.Errorf("a record of %d bytes, more than the %d this shard can write", size, limit)
	}
	body := make([]byte, size+4)
	if _, err := io.ReadFull(r, body); err != nil {
		return journalRecord{}, fmt.Errorf("a record cut short: %w", err)
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
	nf := d.u32()
	if d.err != nil || int(nf) != s.floats || len(d.b) != 4*int(nf) {
		return journalRecord{}, fmt.Errorf("a record of %d floats for a shard of %d", nf, s.floats)
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
