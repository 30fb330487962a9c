package shoalpb

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Pool is the buffer pool of tensor payloads: buffers in power-of-two
// classes, not zeroed on Get (gRPC's default pool clears every buffer it
// hands out; a payload is overwritten whole before it is sent).
var Pool mem.BufferPool = &tensorPool{}

type tensorPool struct {
	classes [48]sync.Pool // class c holds buffers of capacity 1<<c
}

func class(n int) int { return bits.Len(uint(n - 1)) }

func (p *tensorPool) Get(n int) *[]byte {
	c := class(max(n, 1))
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func (p *tensorPool) Put(b *[]byte) {
	c := cap(*b)
	if c == 0 || c&(c-1) != 0 {
		return // not one of ours
	}
	p.classes[class(c)].Put(b)
}
