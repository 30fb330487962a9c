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

	small := p.Get(1000)
	assert.Equal(t, 1024, cap(*small))
	p.Put(small)
	odd := make([]byte, 1000)
	p.Put(&odd) // not a class's capacity: dropped
}
