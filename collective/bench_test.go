package collective_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/shoalml/shoal/collective"
)

// BenchmarkAllreduce measures a float32 Sum Allreduce on the in-memory
// transport. ns/op and MB/s are per rank's buffer (algorithm bandwidth);
// busbw_GB/s is algbw·2(N−1)/N, the bytes each rank moves, comparable
// across N as in nccl-tests.
func BenchmarkAllreduce(b *testing.B) {
	for _, comp := range []collective.Compression{collective.None, collective.Float16} {
		for _, n := range []int{2, 4} {
			for _, mib := range []int{1, 16} {
				b.Run(fmt.Sprintf("comp=%v/N=%d/size=%dMiB", comp, n, mib), func(b *testing.B) {
					benchAllreduce(b, n, mib<<20, comp)
				})
			}
		}
	}
}

func benchAllreduce(b *testing.B, n, bytes int, comp collective.Compression) {
	cfg := collective.DefaultConfig()
	cfg.Compression = comp
	ts := collective.NewMemGroup(n)
	cs := make([]*collective.Communicator, n)
	bufs := make([][]float32, n)
	for r, tr := range ts {
		b.Cleanup(func() { _ = tr.Close() })
		c, err := collective.New(tr, cfg)
		if err != nil {
			b.Fatal(err)
		}
		cs[r] = c
		bufs[r] = make([]float32, bytes/4)
		for i := range bufs[r] {
			bufs[r][i] = float32(i%7) * 0.25
		}
	}
	ctx := context.Background()
	// Ranks 1..N−1 run on their own goroutines, stepping with rank 0.
	start := make([]chan bool, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for r := 1; r < n; r++ {
		start[r] = make(chan bool)
		wg.Go(func() {
			for range start[r] {
				errs <- cs[r].Allreduce(ctx, bufs[r], collective.Sum)
			}
		})
	}
	defer func() {
		for r := 1; r < n; r++ {
			close(start[r])
		}
		wg.Wait()
	}()
	step := func() {
		for r := 1; r < n; r++ {
			start[r] <- true
		}
		if err := cs[0].Allreduce(ctx, bufs[0], collective.Sum); err != nil {
			b.Fatal(err)
		}
		for r := 1; r < n; r++ {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	}
	step() // warm: grow the transport's and the Communicators' buffers
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
	algbw := float64(bytes) * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(algbw, "algbw_GB/s")
	b.ReportMetric(algbw*2*float64(n-1)/float64(n), "busbw_GB/s")
}
