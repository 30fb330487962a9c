package worker_test

import (
	"context"
	"testing"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/worker"
	"github.com/shoalml/shoal/worker/psclient"
)

// BenchmarkAsyncStep is the strategy's side of one async step against one
// shard over TCP on 127.0.0.1: Params and Apply, without the compute, for
// the 784-512-512-10 MLP's vector and the 25.4M-parameter model's, with
// the push and pull in one round trip and overlapped (push in the
// background while the next step's weights are pulled).
func BenchmarkAsyncStep(b *testing.B) {
	for _, m := range []struct {
		name string
		n    int
	}{{"mlp-670k", 669_706}, {"big-25m", 25_452_810}} {
		for _, overlap := range []bool{false, true} {
			name := m.name + "/pushpull"
			if overlap {
				name = m.name + "/overlap"
			}
			b.Run(name, func(b *testing.B) { benchAsyncStep(b, m.n, overlap) })
		}
	}
}

func benchAsyncStep(b *testing.B, n int, overlap bool) {
	c := testcluster.StartTCP(b, testcluster.Cores(b, n, 1, 1<<18, 1e-6)...)
	ctx := context.Background()
	cl, err := client.Dial(ctx, c.Addrs())
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	a, err := worker.NewAsync(psclient.New(cl), n, 1, worker.AsyncConfig{WorkerID: 1, Overlap: overlap})
	if err != nil {
		b.Fatal(err)
	}
	params, grads := make([]float32, n), make([]float32, n)
	b.SetBytes(2 * 4 * int64(n))
	b.ReportAllocs()
	step := int64(0)
	for b.Loop() {
		if err := a.Params(ctx, step, params); err != nil {
			b.Fatal(err)
		}
		if err := a.Apply(ctx, step, params, grads); err != nil {
			b.Fatal(err)
		}
		step++
	}
	if err := a.Finish(ctx); err != nil {
		b.Fatal(err)
	}
}
