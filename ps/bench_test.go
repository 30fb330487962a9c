package ps

import (
	"context"
	"flag"
	"sync"
	"testing"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
)

// parallelStep is Config.ParallelStep for BenchmarkPush
// (scripts/ps-check.sh measures both).
var parallelStep = flag.Bool("parallel-step", false, "BenchmarkPush: the shard updates its chunks in parallel")

// benchShard is an async shard of n floats in chunks of 1 MiB with the
// default optimizer (momentum; the parallel step as -parallel-step says),
// and a gradient for it.
func benchShard(b *testing.B, n int) (*Server, []float32) {
	var l nn.Layout
	l.Add("w", n)
	plan, err := shard.New(n, 1, 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	initial := make([]float32, n)
	for i := range initial {
		initial[i] = float32(i%200-100) * 1e-3
	}
	srv, err := New(Config{Mode: consistency.Async, Plan: plan, Layout: l, Optimizer: optim.DefaultConfig(), ParallelStep: *parallelStep}, initial)
	if err != nil {
		b.Fatal(err)
	}
	grads := make([]float32, n)
	for i := range grads {
		grads[i] = float32(i%100-50) * 1e-4
	}
	return srv, grads
}

// BenchmarkPush is an async shard taking one push of the 784-512-512-10
// MLP's 669,706 floats with the default optimizer (momentum): the checks
// of the gradient (finite, its largest magnitude), of what the update can
// do to the weights, and the update; scan=caller is the same push scanned
// beforehand (Push.Scan, as rpc scans a push piece by piece while it
// arrives), so the difference is what the scan costs after the last byte.
func BenchmarkPush(b *testing.B) {
	const n = 669_706
	srv, grads := benchShard(b, n)
	var sc Scan
	sc.Add(grads)
	step := int64(0)
	for _, scanned := range []*Scan{nil, &sc} {
		b.Run(map[bool]string{false: "scan=shard", true: "scan=caller"}[scanned != nil], func(b *testing.B) {
			b.SetBytes(4 * n)
			ctx := context.Background()
			for b.Loop() {
				if _, err := srv.Push(ctx, signed(srv, Push{WorkerID: 0, Step: step, Clock: srv.Clock(), Ranges: srv.Ranges(), Grads: grads, Scan: scanned})); err != nil {
					b.Fatal(err)
				}
				step++
			}
		})
	}
}

// BenchmarkPushRead is BenchmarkPush with the async push-pull's read of
// every chunk under the shard's lock, three ways: reply=copy copies each
// chunk out (what rpc did before copy-on-write), reply=held holds it and
// lets go before the next push (a reply sent by then: the next update is
// in place), reply=held-across holds it until after the next push (a
// reply still in flight: that update goes into another buffer).
func BenchmarkPushRead(b *testing.B) {
	const n = 669_706
	for _, reply := range []string{"copy", "held", "held-across"} {
		b.Run("reply="+reply, func(b *testing.B) {
			srv, grads := benchShard(b, n)
			out := make([]float32, n)
			var held, prev []func()
			var mu sync.Mutex // with -parallel-step, chunks are read from several goroutines
			read := func(_ PushResult, c ChunkRead) {
				if reply == "copy" {
					copy(out[c.Range.Off:], c.Values)
					return
				}
				release := c.Hold()
				mu.Lock()
				held = append(held, release)
				mu.Unlock()
			}
			b.SetBytes(4 * n)
			ctx := context.Background()
			for step := int64(0); b.Loop(); step++ {
				if _, err := srv.PushRead(ctx, signed(srv, Push{WorkerID: 0, Step: step, Clock: srv.Clock(), Ranges: srv.Ranges(), Grads: grads}), read); err != nil {
					b.Fatal(err)
				}
				if reply == "held-across" { // let go of the push before's
					held, prev = prev, held
				}
				for _, release := range held {
					release()
				}
				held = held[:0]
			}
		})
	}
}
