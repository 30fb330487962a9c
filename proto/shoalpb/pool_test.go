package shoalpb

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A payload buffer of 1 MiB or more comes back after garbage collections
// (a sync.Pool would have dropped it); smaller ones are pooled as before.
func TestPoolKeepsLargeBuffersAcrossCollections(t *testing.T) {
	p := newTensorPool()
	b := p.Get(3 << 20)
	assert.Equal(t, 4<<20, cap(*b), "a power-of-two class")
	p.Put(b)
	runtime.GC()
	runtime.GC()
	assert.Same(t, b, p.Get(4<<20))
	assert.Len(t, *b, 4<<20)

	assert.Zero(t, p.kept.Load())

	small := p.Get(1000)
	assert.Equal(t, 1024, cap(*small))
	p.Put(small)
	odd := make([]byte, 1000)
	p.Put(&odd) // not a class's capacity: dropped
}

// The large classes keep retainBytes in all, whatever the classes.
func TestPoolKeepsAtMostRetainBytes(t *testing.T) {
	p := newTensorPool()
	var bufs []*[]byte
	for range retainBytes / (64 << 20) {
		bufs = append(bufs, p.Get(64<<20))
	}
	one := p.Get(1 << 20)
	for _, b := range bufs {
		p.Put(b)
	}
	assert.Equal(t, int64(retainBytes), p.kept.Load(), "16 of 64 MiB fill it")
	p.Put(one)
	assert.Equal(t, int64(retainBytes), p.kept.Load(), "a 1 MiB piece beyond it is dropped")
	assert.NotSame(t, one, p.Get(1<<20))
	assert.Same(t, bufs[len(bufs)-1], p.Get(64<<20))
	assert.Equal(t, int64(retainBytes-64<<20), p.kept.Load())
}
