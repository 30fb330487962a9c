package freelist_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/internal/freelist"
)

func TestGetFromAnEmptyListIsNil(t *testing.T) {
	assert.Nil(t, freelist.New[float32](4).Get(8))
}

// What a List keeps survives garbage collections, unlike a sync.Pool's.
func TestKeepsBuffersAcrossCollections(t *testing.T) {
	l := freelist.New[float32](4)
	b := make([]float32, 1<<20)
	b[7] = 3
	require.True(t, l.Put(&b))
	runtime.GC()
	runtime.GC()
	got := l.Get(100)
	require.NotNil(t, got)
	assert.Same(t, &b, got)
	assert.Len(t, *got, 100)
	assert.Equal(t, float32(3), (*got)[7], "the contents are what the last user left")
	assert.Nil(t, l.Get(1), "taken")
}

func TestGetSkipsBuffersTooSmall(t *testing.T) {
	l := freelist.New[byte](4)
	small, large := make([]byte, 10), make([]byte, 100)
	l.Put(&large)
	l.Put(&small)
	got := l.Get(50)
	assert.Same(t, &large, got)
	assert.Nil(t, l.Get(50), "the small one does not do")
	assert.Same(t, &small, l.Get(10))
}

func TestKeepsAtMostMax(t *testing.T) {
	l := freelist.New[byte](2)
	var bufs [3]*[]byte
	for i := range bufs {
		b := make([]byte, 8)
		bufs[i] = &b
		assert.Equal(t, i < 2, l.Put(bufs[i]), "put %d", i)
	}
	assert.Same(t, bufs[1], l.Get(8))
	assert.Same(t, bufs[0], l.Get(8))
	assert.Nil(t, l.Get(8), "the third was not kept")
	assert.False(t, l.Put(nil))
	empty := []byte{}
	assert.False(t, l.Put(&empty))
}
