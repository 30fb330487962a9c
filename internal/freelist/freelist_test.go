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
	assert.Zero(t, l.Len())
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
	for i := range 3 {
		b := make([]byte, 8)
		assert.Equal(t, i < 2, l.Put(&b), "put %d", i)
	}
	assert.Equal(t, 2, l.Len())
	assert.False(t, l.Put(nil))
	empty := []byte{}
	assert.False(t, l.Put(&empty))
}
