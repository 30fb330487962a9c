package netshape

import "net"

// queued is implemented by conns that can say how many received bytes
// wait to be read; the tests' in-memory conns do.
type queued interface{ Queued() int }

// inQueue returns how many received bytes wait to be read on nc, and false
// where that cannot be known.
func inQueue(nc net.Conn) (int, bool) {
	if q, ok := nc.(queued); ok {
		return q.Queued(), true
	}
	return kernelQueue(nc)
}
