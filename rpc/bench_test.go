package rpc_test

import (
	"context"
	"testing"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/internal/testcluster"
)

// BenchmarkPullPush is one async worker step's traffic for the default MLP
// (235,146 floats) against one shard over bufconn: a pull and a push.
func BenchmarkPullPush(b *testing.B) {
	const n = 235_146
	c := testcluster.Start(b, testcluster.Cores(b, n, 1, 1<<18, 1e-6)...)
	ctx := context.Background()
	cl, err := client.Dial(ctx, c.Addrs(), client.WithDialOptions(c.DialOption()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	params, grads := make([]float32, n), make([]float32, n)
	b.SetBytes(2 * 4 * n)
	b.ReportAllocs()
	step := int64(0)
	for b.Loop() {
		clocks, err := cl.Pull(ctx, params)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cl.Push(ctx, client.PushArgs{WorkerID: 1, Step: step, Clocks: clocks, Grads: grads}); err != nil {
			b.Fatal(err)
		}
		step++
	}
}
