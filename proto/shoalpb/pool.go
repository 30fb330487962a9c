package shoalpb

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"

	"github.com/shoalml/shoal/internal/freelist"
)

// Pool is the buffer pool of tensor payloads: buffers in power-of-two
// classes, not zeroed on Get (gRPC's default pool clears every buffer it
// hands out; a payload is overwritten whole before it is sent). Buffers
// of retainClass and up (pieces of 1 MiB, a shard's snapshot for a pull)
// are kept across garbage collections (see package freelist), up to
// retainBytes in all; the smaller ones in sync.Pools.
var Pool mem.BufferPool = newTensorPool()

const (
	// retainClass is the smallest class kept across collections: 1 MiB.
	retainClass = 20
	// retainBytes bounds what the large classes keep together, so that no
	// pattern of requests can pin more: an async shard of the 25.4M model
	// serving 4 workers has about 200 pieces of 1 MiB in flight (it copies
	// a push-pull's reply out under its lock faster than the NIC takes
	// it), its receive buffers and 4 snapshots of 64 MiB, under half of it.
	retainBytes = 1 << 30
)

type tensorPool struct {
	classes [retainClass]sync.Pool // class c holds buffers of capacity 1<<c
	large   [48 - retainClass]*freelist.List[byte]
	kept    atomic.Int64 // bytes in large
}

func newTensorPool() *tensorPool {
	p := &tensorPool{}
	for i := range p.large {
		p.large[i] = freelist.New[byte](max(1, retainBytes>>(retainClass+i)))
	}
	return p
}

func class(n int) int { return bits.Len(uint(n - 1)) }

func (p *tensorPool) Get(n int) *[]byte {
	c := class(max(n, 1))
	if c >= retainClass {
		if b := p.large[c-retainClass].Get(n); b != nil {
			p.kept.Add(-int64(cap(*b)))
			return b
		}
	} else if b, ok := p.classes[c].Get().(*[]byte); ok {
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
	if k := class(c); k >= retainClass {
		if p.kept.Add(int64(c)) > retainBytes || !p.large[k-retainClass].Put(b) {
			p.kept.Add(-int64(c)) // left to the garbage collector
		}
	} else {
		p.classes[k].Put(b)
	}
}
