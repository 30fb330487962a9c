package netshape

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalidConfig is wrapped by every error New and SelfCheck return for a
// Config they cannot use.
var ErrInvalidConfig = errors.New("netshape: invalid config")

// Sizes that shape the model; see Config.Burst and the package doc.
const (
	// minBurst is the smallest default bucket depth, in bytes.
	minBurst = 64 << 10
	// burstTime is how much line-rate time the default bucket holds. Go's
	// timers wake up to about 1 ms late on Linux when the process is idle
	// (the netpoller sleeps in whole milliseconds), so a bucket shallower
	// than a couple of milliseconds loses tokens on every late wake-up and
	// the achieved rate falls below the configured one.
	burstTime = 2 * time.Millisecond
	// minChunk and maxChunk bound the pieces a Write is split into and the
	// Reads issued to the underlying conn: the granularity of pacing. The
	// piece is an eighth of the bucket within these bounds (and never more
	// than the bucket); loopback moves 256 KiB writes about a third faster
	// than 64 KiB ones, which matters above 10 Gbit/s.
	minChunk = 64 << 10
	maxChunk = 256 << 10
	// minQueue is the smallest default transmit queue per conn, in bytes.
	minQueue = 4 << 20
	// closeLinger bounds how long Close waits, after the last queued piece
	// is due, for the delay line to reach a peer that does not read.
	closeLinger = 5 * time.Second
)

// Config describes one NIC. The zero value is an unlimited NIC with no added
// latency that still counts bytes.
type Config struct {
	// Gbps is the line rate in gigabits (10⁹ bits) per second, applied to
	// each direction separately and shared by all connections of the NIC.
	// 0 means unlimited.
	Gbps float64
	// RTT is the round-trip time of a path between two NICs of this Config:
	// each NIC delays what it sends by RTT/2. 0 adds no latency and no
	// goroutine.
	RTT time.Duration
	// Burst is the depth of each direction's token bucket in bytes: how
	// much may pass at once after the link was idle. 0 picks
	// DefaultBurst(Gbps). Writes and Reads are paced in pieces of Burst/8
	// clamped to [64 KiB, 256 KiB], and never more than Burst. Unused when
	// Gbps is 0; pieces are then 256 KiB.
	Burst int
	// Queue is the depth of each conn's transmit queue in bytes, like a
	// socket's send buffer: a Write returns once its bytes are queued and
	// waits while the queue is full. 0 picks max(4 MiB, 2·rate·RTT/2 +
	// Burst). Unused when the NIC has neither a rate nor an RTT.
	Queue int
	// HostFile, when set (with Gbps), is a file that every NIC of one
	// host opens, in this process or another: they share its two lines
	// (the host's one NIC, as the processes of a fake host on one
	// machine do; a NIC of one process shares its lines among its conns
	// anyway). The file holds the lines' clocks, is created if missing,
	// and must be on a local file system (whose shared mappings are one
	// memory in every process); whoever made it removes it. Unix only.
	HostFile string
}

// DefaultConfig returns an unlimited NIC with no added latency.
func DefaultConfig() Config { return Config{} }

// DefaultBurst is the bucket depth used when Config.Burst is 0: 2 ms at the
// line rate, and at least 64 KiB. Shallower buckets lose throughput to
// timer wake-up latency (see the package doc).
func DefaultBurst(gbps float64) int {
	b := bytesPerSecond(gbps) * burstTime.Seconds()
	if !(b > minBurst) { // also catches gbps 0 and NaN
		return minBurst
	}
	if b > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(b)
}

// validate reports what is wrong with c, wrapping ErrInvalidConfig.
func (c Config) validate() error {
	switch {
	case math.IsNaN(c.Gbps) || math.IsInf(c.Gbps, 0):
		return fmt.Errorf("%w: Gbps is %v, want a finite number >= 0 (0 means unlimited)", ErrInvalidConfig, c.Gbps)
	case c.Gbps < 0:
		return fmt.Errorf("%w: Gbps is %v, want >= 0 (0 means unlimited)", ErrInvalidConfig, c.Gbps)
	case c.RTT < 0:
		return fmt.Errorf("%w: RTT is %v, want >= 0", ErrInvalidConfig, c.RTT)
	case c.Burst < 0:
		return fmt.Errorf("%w: Burst is %d bytes, want > 0, or 0 for the default", ErrInvalidConfig, c.Burst)
	case c.Queue < 0:
		return fmt.Errorf("%w: Queue is %d bytes, want > 0, or 0 for the default", ErrInvalidConfig, c.Queue)
	}
	return nil
}

// burst is the bucket depth in bytes.
func (c Config) burst() int {
	if c.Burst > 0 {
		return c.Burst
	}
	return DefaultBurst(c.Gbps)
}

// chunk is the pacing granularity in bytes: never more than the burst, so
// that every reservation can be granted.
func (c Config) chunk() int {
	if c.Gbps == 0 {
		return maxChunk
	}
	b := c.burst()
	return min(b, max(minChunk, min(b/8, maxChunk)))
}

// queueLimit is the per-conn transmit queue in bytes: Queue, or by default
// twice what is in flight during RTT/2 at line rate plus a bucket, so one
// conn can fill the link; minQueue when that is smaller or the rate is
// unlimited. The queue also holds the line while the process waits for a
// core: 4 MiB is 32 ms at 1 Gbit/s.
func (c Config) queueLimit() int {
	if c.Queue > 0 {
		return c.Queue
	}
	if c.Gbps == 0 {
		return minQueue
	}
	q := 2*bytesPerSecond(c.Gbps)*(c.RTT/2).Seconds() + float64(c.burst())
	if q < minQueue {
		return minQueue
	}
	if q > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(q)
}

func bytesPerSecond(gbps float64) float64 { return gbps * 1e9 / 8 }
