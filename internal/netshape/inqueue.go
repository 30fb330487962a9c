package netshape

import (
	"net"
	"syscall"
)

// queued is implemented by conns that can say how many received bytes
// wait to be read; the tests' in-memory conns do.
type queued interface{ Queued() int }

// queueProbe says how many received bytes wait to be read on one conn.
// A conn makes one when it is wrapped, so that its Reads allocate nothing
// to ask; it is used under the conn's read lock.
type queueProbe struct {
	self queued          // the conn says itself
	rc   syscall.RawConn // else the kernel does; nil where neither can
	ask  func(fd uintptr)
	n    int
	err  error
}

func newQueueProbe(nc net.Conn) *queueProbe {
	p := &queueProbe{}
	if q, ok := nc.(queued); ok {
		p.self = q
		return p
	}
	p.rc = rawConn(nc)
	p.ask = func(fd uintptr) { p.n, p.err = kernelQueue(fd) }
	return p
}

// waiting returns how many received bytes wait to be read, and false where
// that cannot be known.
func (p *queueProbe) waiting() (int, bool) {
	if p.self != nil {
		return p.self.Queued(), true
	}
	if p.rc == nil {
		return 0, false
	}
	if err := p.rc.Control(p.ask); err != nil || p.err != nil {
		return 0, false
	}
	return p.n, true
}
