package collnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"
)

// A ring is a single-producer single-consumer byte queue in memory shared
// by two processes (or two mappings in one). Its file holds a header page
// then the data:
//
//	offset 0    magic       uint64 (written last by the creator)
//	offset 8    nonce       [16]byte, also sent over TCP: proves the file is the one meant
//	offset 24   size        uint64, bytes of data, a power of two
//	offset 128  head        uint64, bytes consumed so far (written by the consumer only)
//	offset 136  headWaiter  uint32, 1 while the producer sleeps for head to move
//	offset 256  tail        uint64, bytes produced so far (written by the producer only)
//	offset 264  tailWaiter  uint32, 1 while the consumer sleeps for tail to move
//	offset 4096 data        size bytes
//
// head and tail only grow; tail−head bytes are queued, at data[head mod
// size]. Each counter sits on its own pair of cache lines, so the two
// sides do not contend (adjacent-line prefetchers fetch lines in pairs).
// The producer copies bytes in and then stores tail atomically; the
// consumer loads tail atomically and then copies bytes out (and likewise
// for head the other way): sync/atomic's loads and stores are sequentially
// consistent, which orders the plain copies around them on every platform
// Go supports.
//
// Waiting. A side with nothing to do polls a while (see waiter), then
// sleeps in the kernel on a futex on the low 32 bits of the other side's
// counter, after raising its waiter flag; the other side, after storing
// its counter, wakes it if the flag is up. Flag-then-counter on one side
// and counter-then-flag on the other, all sequentially consistent, mean
// that either the sleeper sees the new counter or the waker sees the
// flag; and FUTEX_WAIT sleeps only while the word still holds the value
// the sleeper saw. The low 32 bits cannot come back to the same value
// while a side sleeps: the counter moves at most the ring's size (under 4
// GiB) before the sleeper's own side must move. Sleeps are bounded
// (maxSleep), so that a context's end is noticed.
type ring struct {
	mem        []byte // the whole mapping
	data       []byte
	mask       uint64
	head       *uint64
	tail       *uint64
	headWaiter *uint32
	tailWaiter *uint32
	headLow    *uint32 // the low 32 bits of *head: the futex word
	tailLow    *uint32
	pos        uint64 // this side's own counter: tail for a producer, head for a consumer
}

const (
	ringMagic         = 0x73686f616c726e67 // "shoalrng"
	ringOffMagic      = 0
	ringOffNonce      = 8
	ringOffSize       = 24
	ringOffHead       = 128
	ringOffHeadWaiter = 136
	ringOffTail       = 256
	ringOffTailWaiter = 264
	ringHeader        = 4096
	ringNonceSize     = 16
	maxRingBytes      = 1 << 30
)

// ringView lays a ring over a mapping of ringHeader+size bytes.
func ringView(mem []byte) *ring {
	low := 0 // where the low half of a uint64 lies
	if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 {
		low = 4
	}
	return &ring{
		mem:        mem,
		data:       mem[ringHeader:],
		mask:       uint64(len(mem) - ringHeader - 1),
		head:       (*uint64)(unsafe.Pointer(&mem[ringOffHead])),
		tail:       (*uint64)(unsafe.Pointer(&mem[ringOffTail])),
		headWaiter: (*uint32)(unsafe.Pointer(&mem[ringOffHeadWaiter])),
		tailWaiter: (*uint32)(unsafe.Pointer(&mem[ringOffTailWaiter])),
		headLow:    (*uint32)(unsafe.Pointer(&mem[ringOffHead+low])),
		tailLow:    (*uint32)(unsafe.Pointer(&mem[ringOffTail+low])),
	}
}

// initRing writes a new ring's header into mem (zeroed, as a fresh file
// is).
func initRing(mem []byte, nonce [ringNonceSize]byte) {
	copy(mem[ringOffNonce:], nonce[:])
	binary.LittleEndian.PutUint64(mem[ringOffSize:], uint64(len(mem)-ringHeader))
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&mem[ringOffMagic])), ringMagic)
}

// checkRing verifies that mem holds a ring made with nonce.
func checkRing(mem []byte, nonce [ringNonceSize]byte) error {
	if len(mem) <= ringHeader {
		return fmt.Errorf("ring mapping of %d bytes, want more than %d", len(mem), ringHeader)
	}
	if m := atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[ringOffMagic]))); m != ringMagic {
		return fmt.Errorf("ring magic %#x, want %#x", m, ringMagic)
	}
	if [ringNonceSize]byte(mem[ringOffNonce:]) != nonce {
		return errors.New("ring nonce differs from the one offered: not the file meant")
	}
	if n := binary.LittleEndian.Uint64(mem[ringOffSize:]); n != uint64(len(mem)-ringHeader) {
		return fmt.Errorf("ring of %d data bytes in a mapping of %d", n, len(mem))
	}
	return nil
}

// put copies p into the ring at the producer's position (the caller made
// sure len(p) bytes are free), publishes them, and wakes a sleeping
// consumer.
func (r *ring) put(p []byte) {
	off := r.pos & r.mask
	if n := copy(r.data[off:], p); n < len(p) {
		copy(r.data, p[n:])
	}
	r.pos += uint64(len(p))
	atomic.StoreUint64(r.tail, r.pos)
	if atomic.LoadUint32(r.tailWaiter) != 0 {
		futexWake(r.tailLow)
	}
}

// free returns how many bytes the producer may put now.
func (r *ring) free() int {
	return len(r.data) - int(r.pos-atomic.LoadUint64(r.head))
}

// sleepFree sleeps, at most d, while the ring is full.
func (r *ring) sleepFree(d time.Duration) {
	atomic.StoreUint32(r.headWaiter, 1)
	if h := atomic.LoadUint64(r.head); r.pos-h == uint64(len(r.data)) {
		futexWait(r.headLow, uint32(h), d)
	}
	atomic.StoreUint32(r.headWaiter, 0)
}

// take copies len(p) queued bytes out of the ring at the consumer's
// position (the caller made sure they are there), frees their room, and
// wakes a sleeping producer.
func (r *ring) take(p []byte) {
	off := r.pos & r.mask
	if n := copy(p, r.data[off:]); n < len(p) {
		copy(p[n:], r.data)
	}
	r.pos += uint64(len(p))
	atomic.StoreUint64(r.head, r.pos)
	if atomic.LoadUint32(r.headWaiter) != 0 {
		futexWake(r.headLow)
	}
}

// queued returns how many bytes the consumer may take now.
func (r *ring) queued() int {
	return int(atomic.LoadUint64(r.tail) - r.pos)
}

// sleepQueued sleeps, at most d, while the ring is empty.
func (r *ring) sleepQueued(d time.Duration) {
	atomic.StoreUint32(r.tailWaiter, 1)
	if t := atomic.LoadUint64(r.tail); t == r.pos {
		futexWait(r.tailLow, uint32(t), d)
	}
	atomic.StoreUint32(r.tailWaiter, 0)
}

// wakeAll wakes whoever sleeps on the ring in this process (for Close,
// or when the peer is found dead).
func (r *ring) wakeAll() {
	futexWake(r.headLow)
	futexWake(r.tailLow)
}

// ringChunk is the most a Send puts (or a Recv takes) at once. Far smaller
// than the ring, so that the two sides copy at the same time, each in its
// own process, instead of taking turns at a full ring; and small enough
// that a chunk is still in cache when the other side copies it out.
// Measured on 4 MiB messages: 64 KiB chunks move about twice the bytes
// per second of 1 MiB ones.
func ringChunk(size int) int { return min(size/4, 64<<10) }

// A waiter paces a wait for the other side of a ring, which runs in
// another address space (usually another process) and cannot wake us
// through the Go runtime. It polls first: spinning (the other side is
// often about to publish: a chunk's copy takes microseconds), then
// yielding the processor; then it sleeps in the kernel until woken (see
// ring), for at most maxSleep at a time, so that the caller rechecks its
// context, Close and the peer's liveness. Go's time.Sleep is no substitute
// for that last phase: its sub-millisecond sleeps last far longer than a
// futex wake-up (measured: docs/BENCHMARKS.md, "Figures that lived in code comments").
type waiter struct{ n int }

const (
	spinPolls  = 200
	yieldPolls = 50
	maxSleep   = time.Millisecond
)

// poll reports whether to poll again (after spinning or yielding), or
// false when it is time to sleep.
func (w *waiter) poll() bool {
	w.n++
	switch {
	case w.n <= spinPolls:
		return true
	case w.n <= spinPolls+yieldPolls:
		runtime.Gosched()
		return true
	}
	return false
}

// reset starts over after progress.
func (w *waiter) reset() { w.n = 0 }

// The shared-memory setup runs over the pair's TCP connection once it is
// up. Each side of a pair on one host offers the ring it will produce
// into; each maps the other's, unlinks its file, and says whether that
// worked; the pair uses the rings only if both did:
//
//	offer:  kind uint8 (1 ring, 0 none) | nonce [16]byte | len(path) uint16 | path
//	result: ok uint8

const maxShmPath = 4096

// Ring files are named ringFilePrefix + random + ringFileSuffix; a peer's
// offer of any other path is refused, so that a peer cannot make this side
// map (and unlink) some other file.
const (
	ringFilePrefix = "shoal-collnet-"
	ringFileSuffix = ".ring"
)

func checkRingPath(path string) error {
	base := filepath.Base(path)
	if !filepath.IsAbs(path) || filepath.Clean(path) != path ||
		!strings.HasPrefix(base, ringFilePrefix) || !strings.HasSuffix(base, ringFileSuffix) {
		return fmt.Errorf("offered ring path %q is not an absolute, clean path to a %s*%s file", path, ringFilePrefix, ringFileSuffix)
	}
	return nil
}

// shmOffer is one side's ring, or none (Path "").
type shmOffer struct {
	Path  string
	Nonce [ringNonceSize]byte
}

func appendOffer(b []byte, o shmOffer) []byte {
	kind := byte(0)
	if o.Path != "" {
		kind = 1
	}
	b = append(b, kind)
	b = append(b, o.Nonce[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(o.Path)))
	return append(b, o.Path...)
}

func readOffer(r io.Reader) (shmOffer, error) {
	var fixed [1 + ringNonceSize + 2]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return shmOffer{}, fmt.Errorf("%w: reading the shared-memory offer: %w", errHandshake, err)
	}
	n := int(binary.BigEndian.Uint16(fixed[1+ringNonceSize:]))
	if n > maxShmPath || (fixed[0] == 1) != (n > 0) || fixed[0] > 1 {
		return shmOffer{}, fmt.Errorf("%w: malformed shared-memory offer (kind %d, path of %d bytes)", errHandshake, fixed[0], n)
	}
	path := make([]byte, n)
	if _, err := io.ReadFull(r, path); err != nil {
		return shmOffer{}, fmt.Errorf("%w: reading the shared-memory offer: %w", errHandshake, err)
	}
	return shmOffer{Path: string(path), Nonce: [ringNonceSize]byte(fixed[1:])}, nil
}
