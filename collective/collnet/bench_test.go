package collnet

import (
	"context"
	"fmt"
	"testing"

	"github.com/shoalml/shoal/collective"
)

// BenchmarkSendRecv moves messages from rank 0 to rank 1, both in this
// process, over TCP on loopback and over shared memory (default ring).
// Each iteration is one message, received whole.
func BenchmarkSendRecv(b *testing.B) {
	for _, m := range modes {
		for _, size := range []int{4 << 20, 64} {
			b.Run(fmt.Sprintf("%s/%dB", m.name, size), func(b *testing.B) {
				ts := group(b, 2, m.shm, func(cfg *Config) { cfg.RingBytes = DefaultRingBytes; cfg.Logger = nil })
				benchSendRecv(b, ts, size)
			})
		}
	}
}

func benchSendRecv(b *testing.B, ts []collective.Transport, size int) {
	ctx := context.Background()
	src, dst := make([]byte, size), make([]byte, size)
	start, done := make(chan bool), make(chan error)
	go func() {
		for range start {
			done <- ts[1].Recv(ctx, 0, dst)
		}
	}()
	defer close(start)
	b.SetBytes(int64(size))
	for b.Loop() {
		start <- true
		if err := ts[0].Send(ctx, 1, src); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
