//go:build linux

package collnet

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// shmSupported reports whether this system has the shared-memory
// transport.
const shmSupported = true

// createRing creates a ring file of size data bytes in dir, maps it and
// returns the ring with the offer that lets the other side map it too.
// Its space is allocated now (fallocate), so that a full tmpfs fails here,
// not with SIGBUS in the middle of a Send. The caller removes the file.
func createRing(dir string, size int) (*ring, shmOffer, error) {
	var o shmOffer
	rand.Read(o.Nonce[:])
	f, err := os.CreateTemp(dir, ringFilePrefix+"*"+ringFileSuffix)
	if err != nil {
		return nil, o, err
	}
	defer f.Close()
	o.Path = f.Name()
	total := ringHeader + size
	if err := roomForRing(total); err != nil {
		os.Remove(o.Path)
		return nil, o, err
	}
	if err := fallocate(f, total); err != nil {
		os.Remove(o.Path)
		return nil, o, fmt.Errorf("allocating %d bytes for %s: %w", total, o.Path, err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, total, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		os.Remove(o.Path)
		return nil, o, fmt.Errorf("mapping %s: %w", o.Path, err)
	}
	initRing(mem, o.Nonce)
	return ringView(mem), o, nil
}

// meminfo returns /proc/meminfo's MemTotal and MemAvailable in bytes; a
// variable so tests can set what the machine has.
var meminfo = func() (total, available int64, err error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(b)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || name != "MemTotal" && name != "MemAvailable" {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/meminfo: %s: %w", name, err)
		}
		if name == "MemTotal" {
			total = kb << 10
		} else {
			available = kb << 10
		}
	}
	if total == 0 || available == 0 {
		return 0, 0, errors.New("/proc/meminfo: no MemTotal or MemAvailable")
	}
	return total, available, nil
}

// roomForRing refuses a ring of n bytes that would leave less than a
// quarter of the machine's memory available. A tmpfs's pages are memory,
// and /dev/shm may be as large as all of it: 1,000 ranks of bench
// allreduce on one host, each reserving two rings per peer, took the last
// of it, the kernel killed ranks, and the rings of the killed ranks (not
// yet mapped by their peers, so not yet unlinked) held 24 GB until removed
// by hand. A pair refused here talks over TCP. Where meminfo cannot be
// read, fallocate's own ENOSPC is the only limit.
func roomForRing(n int) error {
	total, available, err := meminfo()
	if err != nil {
		return nil
	}
	if available-int64(n) < total/4 {
		return fmt.Errorf("a ring of %d bytes would leave %d of the machine's %d bytes of memory available, want at least a quarter left", n, available-int64(n), total)
	}
	return nil
}

// fallocate gives f n bytes of allocated space, or, where the file system
// cannot allocate ahead, at least the size.
func fallocate(f *os.File, n int) error {
	err := syscall.Fallocate(int(f.Fd()), 0, 0, int64(n))
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		err = f.Truncate(int64(n))
	}
	return err
}

// openRing maps the ring the other side offered and unlinks its file:
// from then on the ring lives only as long as its mappings.
func openRing(o shmOffer) (*ring, error) {
	if err := checkRingPath(o.Path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(o.Path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	total := int(fi.Size())
	if n := total - ringHeader; n < minRingBytes || n > maxRingBytes || n&(n-1) != 0 {
		return nil, fmt.Errorf("ring file %s of %d bytes, want %d plus a power of two in [%d, %d]", o.Path, total, ringHeader, minRingBytes, maxRingBytes)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, total, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", o.Path, err)
	}
	if err := checkRing(mem, o.Nonce); err != nil {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("ring file %s: %w", o.Path, err)
	}
	os.Remove(o.Path)
	return ringView(mem), nil
}

// unmap releases the ring's mapping; the ring must not be used after.
func (r *ring) unmap() error {
	if r == nil || r.mem == nil {
		return nil
	}
	err := syscall.Munmap(r.mem)
	r.mem, r.data = nil, nil
	return err
}

const (
	futexWaitOp = 0 // FUTEX_WAIT, shared: the word is in memory mapped by two processes
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *addr == val, for at most d, or until woken. A
// spurious return (the word changed, a signal, the timeout) is fine: the
// caller checks again.
func futexWait(addr *uint32, val uint32, d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes the sleepers on addr.
func futexWake(addr *uint32) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, math.MaxInt32, 0, 0, 0)
}
