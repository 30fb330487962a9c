package ps

import (
	"context"
	"flag"
	"testing"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/shard"
)

// parallelStep is Config.ParallelStep for BenchmarkPush
// (scripts/ps-check.sh measures both).
var parallelStep = flag.Bool("parallel-step", false, "BenchmarkPush: the shard updates its chunks in parallel")

// BenchmarkPush is an async shard taking one push of the 784-512-512-10
// MLP's 669,706 floats with the default optimizer (momentum): the checks
// of the gradient (finite, its largest magnitude), of what the update can
// do to the weights, and the update; scan=caller is the same push scanned
// beforehand (Push.Scanned, as rpc scans a push piece by piece while it
// arrives), so the difference is what the scan costs after the last byte.
func BenchmarkPush(b *testing.B) {
	const n = 669_706
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
	_, bound := ScanGradient(grads)
	step := int64(0)
	for _, scanned := range []float64{0, bound} {
		b.Run(map[bool]string{false: "scan=shard", true: "scan=caller"}[scanned > 0], func(b *testing.B) {
			b.SetBytes(4 * n)
			ctx := context.Background()
			for b.Loop() {
				if _, err := srv.Push(ctx, Push{WorkerID: 0, Step: step, Clock: srv.Clock(), Ranges: srv.Ranges(), Grads: grads, Scanned: scanned}); err != nil {
					b.Fatal(err)
				}
				step++
			}
		})
	}
}
