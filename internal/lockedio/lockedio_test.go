package lockedio

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestConcurrentWrites: whole writes from many goroutines arrive whole,
// under -race.
func TestConcurrentWrites(t *testing.T) {
	buf := NewBuffer()
	w := &Writer{W: buf}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				w.Write([]byte("line\n"))
			}
		})
	}
	wg.Wait()
	assert.Equal(t, strings.Repeat("line\n", 800), buf.String())
}
