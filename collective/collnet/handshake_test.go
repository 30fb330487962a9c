package collnet

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

func FuzzReadHello(f *testing.F) {
	f.Add(appendHello(nil, hello{From: 0, To: 1, Size: 2, JobID: "job"}))
	f.Add(appendHello(nil, hello{From: 3, To: 7, Size: 8}))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := readHello(bytes.NewReader(b))
		if err != nil {
			return
		}
		// What decodes encodes back to the bytes it came from.
		enc := appendHello(nil, h)
		if h.From >= 0 && h.To >= 0 && h.Size >= 0 {
			assert.Equal(t, b[:len(enc)], enc)
		}
		_ = h.check(h.To, h.Size, h.JobID)
	})
}

func FuzzReadVerdict(f *testing.F) {
	f.Add(appendVerdict(nil, ""))
	f.Add(appendVerdict(nil, "go away"))
	f.Add([]byte{1, 0, 3, 'a', 'b', 'c'})
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = readVerdict(bytes.NewReader(b))
	})
}
