package lockedio

import (
	"bytes"
	"io"
	"sync"
)

// Writer writes to W one Write at a time.
type Writer struct {
	mu sync.Mutex
	W  io.Writer
}

func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.W.Write(p)
}

// Buffer is a bytes.Buffer that goroutines may write while another reads
// it with String. Make one with NewBuffer.
type Buffer struct {
	Writer
	b bytes.Buffer
}

// NewBuffer returns an empty Buffer.
func NewBuffer() *Buffer {
	b := new(Buffer)
	b.W = &b.b
	return b
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
