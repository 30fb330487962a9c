package netshape

import (
	"sync"
	"sync/atomic"
	"time"
)

// line is one direction of a NIC: a token bucket of depth burst filled at
// the line rate, kept as the time at which the line has sent (or received)
// everything reserved on it so far. It is shared by every conn of the NIC.
//
// Unlike a limiter asked at the moment a process gets round to it, a line
// is told when bytes reached it (at), which may be in the past: bytes a
// process queued before it lost its core, or bytes that waited in the
// kernel while it had none, are paced from when they were there, as a real
// NIC keeps sending and receiving while the process waits for a core.
type line struct {
	mu      sync.Mutex
	perByte float64       // nanoseconds a byte takes at line rate
	burst   time.Duration // the bucket's depth, in line-rate time
	free    time.Time     // when everything reserved so far has passed
	// shared, when set, holds free instead (Unix nanoseconds) in memory
	// that other processes' NICs of the same host map (Config.HostFile):
	// they reserve on one line, first come first served.
	shared *atomic.Int64
}

func newLine(bytesPerSec float64, burst int) *line {
	perByte := 1e9 / bytesPerSec
	return &line{perByte: perByte, burst: time.Duration(float64(burst) * perByte)}
}

// reserve books k bytes that reached the line at time at and returns when
// they may pass: at once while the bucket holds k tokens, else when it has
// refilled that far. Reservations are first come, first served.
func (l *line) reserve(at time.Time, k int) time.Time {
	if l.shared != nil {
		took, burst, from := int64(float64(k)*l.perByte), l.burst.Nanoseconds(), at.UnixNano()
		for {
			old := l.shared.Load()
			free := max(old, from) + took // an idle line's bucket is full
			if l.shared.CompareAndSwap(old, free) {
				if due := free - burst; due > from {
					return at.Add(time.Duration(due - from))
				}
				return at
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	start := l.free
	if start.Before(at) {
		start = at // the line was idle: the bucket is full
	}
	l.free = start.Add(time.Duration(float64(k) * l.perByte))
	if due := l.free.Add(-l.burst); due.After(at) {
		return due
	}
	return at
}

// took returns how long k bytes take at line rate.
func (l *line) took(k int) time.Duration { return time.Duration(float64(k) * l.perByte) }

// until returns how long until everything reserved so far has passed.
func (l *line) until() time.Duration {
	if l.shared != nil {
		return time.Duration(l.shared.Load() - time.Now().UnixNano())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Until(l.free)
}
