package collnet

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRing drives one ring through many wrap-arounds from one goroutine.
func TestRing(t *testing.T) {
	const size = 4096
	mem := make([]byte, ringHeader+size)
	var nonce [ringNonceSize]byte
	nonce[3] = 7
	initRing(mem, nonce)
	require.NoError(t, checkRing(mem, nonce))
	assert.ErrorContains(t, checkRing(mem, [ringNonceSize]byte{}), "nonce")

	prod, cons := ringView(mem), ringView(mem)
	var sent, got bytes.Buffer
	next := byte(0)
	for step := range 1000 {
		n := (step*37)%size + 1
		if f := prod.free(); n > f {
			n = f
		}
		p := make([]byte, n)
		for i := range p {
			p[i] = next
			next++
		}
		prod.put(p)
		sent.Write(p)
		assert.Equal(t, n, cons.queued())
		q := make([]byte, cons.queued())
		cons.take(q)
		got.Write(q)
		assert.Equal(t, size, prod.free())
	}
	assert.Equal(t, sent.Bytes(), got.Bytes())
	assert.Greater(t, sent.Len(), 100*size, "wrapped around many times")
}

func TestCheckRingPath(t *testing.T) {
	for _, ok := range []string{"/dev/shm/shoal-collnet-123.ring", "/tmp/x/shoal-collnet-a.ring"} {
		assert.NoError(t, checkRingPath(ok), ok)
	}
	for _, bad := range []string{"shoal-collnet-1.ring", "/dev/shm/../etc/shoal-collnet-1.ring", "/home/u/ckpt.safetensors", "/dev/shm/shoal-collnet-1"} {
		assert.Error(t, checkRingPath(bad), bad)
	}
}

func FuzzReadOffer(f *testing.F) {
	f.Add(appendOffer(nil, shmOffer{}))
	f.Add(appendOffer(nil, shmOffer{Path: "/dev/shm/shoal-collnet-1.ring", Nonce: [ringNonceSize]byte{1, 2}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := readOffer(bytes.NewReader(b))
		if err != nil {
			return
		}
		enc := appendOffer(nil, o)
		assert.Equal(t, b[:len(enc)], enc)
	})
}
