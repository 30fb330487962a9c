package rpc_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/internal/testcluster"
	pb "github.com/shoalml/shoal/proto/shoalpb"
)

// benchModels are the vectors of Shoal's models whose step traffic the
// benchmarks move: the default MLP (784-256-128-10), the MLP of the PyTorch
// comparison (784-512-512-10) and the 25.4M-parameter `big` model.
var benchModels = []struct {
	name string
	n    int
}{
	{"mlp-235k", 235_146},
	{"mlp-670k", 669_706},
	{"big-25m", 25_452_810},
}

// BenchmarkPullPush is one async worker step's traffic against one shard:
// a pull and a push, over bufconn (the transport in-process) and over TCP
// on 127.0.0.1 (the real one), for each model's vector.
func BenchmarkPullPush(b *testing.B) {
	for _, m := range benchModels {
		for _, tcp := range []bool{false, true} {
			name := fmt.Sprintf("%s/bufconn", m.name)
			if tcp {
				name = fmt.Sprintf("%s/tcp", m.name)
			}
			b.Run(name, func(b *testing.B) { benchStep(b, m.n, tcp, false) })
		}
	}
}

// BenchmarkPushPull is the same step in one round trip: a PushPull that
// pushes the gradient and returns the weights after it.
func BenchmarkPushPull(b *testing.B) {
	for _, m := range benchModels {
		for _, tcp := range []bool{false, true} {
			name := fmt.Sprintf("%s/bufconn", m.name)
			if tcp {
				name = fmt.Sprintf("%s/tcp", m.name)
			}
			b.Run(name, func(b *testing.B) { benchStep(b, m.n, tcp, true) })
		}
	}
}

// BenchmarkTransport measures the transport settings one by one on the
// PushPull step over TCP: gRPC's defaults, each lever alone, and Shoal's
// default (all of them).
func BenchmarkTransport(b *testing.B) {
	def := pb.DefaultTransport
	for _, m := range benchModels[1:] {
		for _, tc := range []struct {
			name string
			tr   pb.Transport
		}{
			{"grpc-defaults", pb.Transport{}},
			{"windows", pb.Transport{StreamWindow: def.StreamWindow, ConnWindow: def.ConnWindow}},
			{"buffers", pb.Transport{Buffer: def.Buffer}},
			{"no-zero", pb.Transport{NoZero: true}},
			{"shoal", def},
		} {
			b.Run(m.name+"/"+tc.name, func(b *testing.B) { benchStepWith(b, m.n, true, true, &tc.tr) })
		}
	}
}

func benchStep(b *testing.B, n int, tcp, pushPull bool) { benchStepWith(b, n, tcp, pushPull, nil) }

func benchStepWith(b *testing.B, n int, tcp, pushPull bool, tr *pb.Transport) {
	cores := testcluster.Cores(b, n, 1, 1<<18, 1e-6)
	var c *testcluster.Cluster
	opts := []client.Option{}
	switch {
	case tr != nil:
		c = testcluster.StartTCPWith(b, *tr, cores...)
		opts = append(opts, client.WithTransport(*tr))
	case tcp:
		c = testcluster.StartTCP(b, cores...)
	default:
		c = testcluster.Start(b, cores...)
	}
	ctx := context.Background()
	cl, err := client.Dial(ctx, c.Addrs(), append(opts, client.WithDialOptions(c.DialOption()))...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	params, grads := make([]float32, n), make([]float32, n)
	b.SetBytes(2 * 4 * int64(n))
	b.ReportAllocs()
	step := int64(0)
	if pushPull {
		clocks, err := cl.Pull(ctx, params)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			res, err := cl.PushPull(ctx, client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: 1, Step: step, Clocks: clocks, Grads: grads}, Pull: true, Dst: params})
			if err != nil {
				b.Fatal(err)
			}
			clocks = res.PullClocks
			step++
		}
		return
	}
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
