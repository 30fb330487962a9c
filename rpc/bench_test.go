package rpc_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/metrics"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/rpc"
	"github.com/shoalml/shoal/secure"
	"github.com/shoalml/shoal/timeline"
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

// BenchmarkStreamIdleTimeout is the PushPull step over TCP with and
// without shoal ps's stream idle limit (an interceptor that runs each
// stream's handler in a goroutine of its own and watches its waits).
func BenchmarkStreamIdleTimeout(b *testing.B) {
	m := benchModels[1]
	for _, idle := range []bool{false, true} {
		b.Run(fmt.Sprintf("%s/idle-limit=%v", m.name, idle), func(b *testing.B) {
			var opts []grpc.ServerOption
			if idle {
				opts = append(opts, grpc.ChainStreamInterceptor(rpc.StreamIdleTimeout(rpc.DefaultStreamIdle)))
			}
			pushPullLoop(b, tcpShard(b, m.n, nil, opts...), m.n, nil)
		})
	}
}

// BenchmarkSecurity is the PushPull step over TCP in plaintext, over
// mutual TLS, and over mutual TLS with a bearer token on every call, for
// the MLP of the PyTorch comparison and the 25M model.
func BenchmarkSecurity(b *testing.B) {
	f, err := secure.WriteTestPKI(b.TempDir(), nil, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	tlsOnly := f
	tlsOnly.Token = ""
	for _, m := range []int{1, 2} {
		for _, tc := range []struct {
			name  string
			files secure.Files
		}{{"plaintext", secure.Files{}}, {"tls", tlsOnly}, {"tls+token", f}} {
			b.Run(benchModels[m].name+"/"+tc.name, func(b *testing.B) {
				creds, err := secure.Load(tc.files)
				if err != nil {
					b.Fatal(err)
				}
				pushPullLoop(b, tcpShard(b, benchModels[m].n, creds.DialOptions(), creds.ServerOptions(nil, nil)...), benchModels[m].n, nil)
			})
		}
	}
}

// BenchmarkObserved is the async PushPull step of the MLP of the PyTorch
// comparison with nothing observed, with shoal ps's Prometheus metrics
// (the shard's collector, the gRPC interceptors and byte counter, one
// scrape per 100 steps), with its timeline, and with both.
func BenchmarkObserved(b *testing.B) {
	m := benchModels[1]
	for _, tc := range []struct {
		name              string
		metrics, timeline bool
	}{{"off", false, false}, {"metrics", true, false}, {"timeline", false, true}, {"both", true, true}} {
		b.Run(m.name+"/"+tc.name, func(b *testing.B) {
			cfg := ps.DefaultConfig()
			cfg.Optimizer = optim.DefaultConfig()
			cfg.Optimizer.LR = 1e-6
			var opts []grpc.ServerOption
			var reg *prometheus.Registry
			var psm *metrics.PS
			if tc.metrics {
				reg = metrics.NewRegistry()
				psm = metrics.NewPS(reg, 0)
				gm := metrics.NewGRPC(reg)
				cfg.OnWait = psm.ObserveWait
				opts = gm.ServerOptions()
			}
			if tc.timeline {
				w, err := timeline.Create(filepath.Join(b.TempDir(), "ps.json"), "ps 0", 1)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { w.Close() })
				cfg.Timeline = w
			}
			var l nn.Layout
			l.Add("w", m.n)
			core := testcluster.CoresWith(b, cfg, l, make([]float32, m.n), 1, 1<<18)[0]
			if psm != nil {
				psm.Attach(core)
			}
			cl := serveShard(b, core, nil, opts...)
			if reg == nil {
				pushPullLoop(b, cl, m.n, nil)
				return
			}
			pushPullLoop(b, cl, m.n, func(step int64) {
				if step%100 == 0 {
					if _, err := reg.Gather(); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// tcpShard serves one async shard of n floats on 127.0.0.1 with gRPC
// server options opts and returns a client of it that dials with dial.
func tcpShard(b *testing.B, n int, dial []grpc.DialOption, opts ...grpc.ServerOption) *client.Client {
	return serveShard(b, testcluster.Cores(b, n, 1, 1<<18, 1e-6)[0], dial, opts...)
}

// serveShard serves core on 127.0.0.1 with gRPC server options opts and
// returns a client of it that dials with dial.
func serveShard(b *testing.B, core *ps.Server, dial []grpc.DialOption, opts ...grpc.ServerOption) *client.Client {
	g, h := rpc.NewGRPCServer(opts...)
	rpc.RegisterPS(g, h, core, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	b.Cleanup(func() { g.Stop(); <-served })
	cl, err := client.Dial(context.Background(), []string{lis.Addr().String()}, client.WithDialOptions(dial...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	return cl
}

// pushPullLoop times async PushPull steps of worker 1 against cl, calling
// after (if set) after each.
func pushPullLoop(b *testing.B, cl *client.Client, n int, after func(step int64)) {
	ctx := context.Background()
	params, grads := make([]float32, n), make([]float32, n)
	b.SetBytes(2 * 4 * int64(n))
	b.ReportAllocs()
	clocks, err := cl.Pull(ctx, params)
	if err != nil {
		b.Fatal(err)
	}
	for step := int64(0); b.Loop(); step++ {
		res, err := cl.PushPull(ctx, client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: 1, Step: step, Clocks: clocks, Grads: grads}, Pull: true, Dst: params})
		if err != nil {
			b.Fatal(err)
		}
		clocks = res.PullClocks
		if after != nil {
			after(step)
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
	if pushPull {
		pushPullLoop(b, cl, n, nil)
		return
	}
	params, grads := make([]float32, n), make([]float32, n)
	b.SetBytes(2 * 4 * int64(n))
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

// BenchmarkPushPullLanes is BenchmarkPushPull over TCP with the push-pull
// split over 1 to 4 lanes (connections) to the one shard, for the 670k
// MLP in chunks of 1 MiB (3 chunks: at most 3 lanes) and of 256 KiB, and
// for the 25.4M model, with the shard's serial step and with its parallel
// step (ps.Config.ParallelStep: the chunks updated and copied for the
// reply on up to GOMAXPROCS goroutines).
func BenchmarkPushPullLanes(b *testing.B) {
	for _, tc := range []struct {
		name     string
		n, chunk int
	}{
		{"mlp-670k/chunk=1MiB", 669_706, 1 << 18},
		{"mlp-670k/chunk=256KiB", 669_706, 1 << 16},
		{"big-25m/chunk=1MiB", 25_452_810, 1 << 18},
	} {
		for _, lanes := range []int{1, 2, 3, 4} {
			if lanes == 4 && tc.n/tc.chunk < 4 {
				continue
			}
			for _, par := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/lanes=%d/step=%s", tc.name, lanes, map[bool]string{false: "serial", true: "parallel"}[par]), func(b *testing.B) {
					cfg := ps.DefaultConfig()
					cfg.Optimizer = optim.DefaultConfig()
					cfg.Optimizer.LR = 1e-6
					cfg.ParallelStep = par
					var l nn.Layout
					l.Add("w", tc.n)
					c := testcluster.StartTCP(b, testcluster.CoresWith(b, cfg, l, make([]float32, tc.n), 1, tc.chunk)...)
					cl, err := client.Dial(context.Background(), c.Addrs(), client.WithLanes(lanes))
					if err != nil {
						b.Fatal(err)
					}
					defer cl.Close()
					pushPullLoop(b, cl, tc.n, nil)
				})
			}
		}
	}
}

// BenchmarkPushPullShards is BenchmarkPushPull's step of the 670k MLP over
// TCP against S shards (each with its own connections, handler and
// optimizer, in one process), with W workers stepping together: an op is
// one push-pull of every worker. It says what splitting one server's
// traffic over several connections would buy on a machine with the cores
// for it, and how much two workers meeting at one shard cost.
func BenchmarkPushPullShards(b *testing.B) {
	const n = 669_706
	for _, servers := range []int{1, 2, 4} {
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("mlp-670k/tcp/servers=%d/workers=%d", servers, workers), func(b *testing.B) {
				cores := testcluster.Cores(b, n, servers, min(1<<18, (n+servers-1)/servers), 1e-6)
				c := testcluster.StartTCP(b, cores...)
				ctx := context.Background()
				type w struct {
					cl            *client.Client
					params, grads []float32
					clocks        client.Clocks
				}
				ws := make([]*w, workers)
				for i := range ws {
					cl, err := client.Dial(ctx, c.Addrs(), client.WithDialOptions(c.DialOption()))
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { cl.Close() })
					ws[i] = &w{cl: cl, params: make([]float32, n), grads: make([]float32, n)}
					if ws[i].clocks, err = cl.Pull(ctx, ws[i].params); err != nil {
						b.Fatal(err)
					}
				}
				b.SetBytes(2 * 4 * int64(n) * int64(workers))
				b.ReportAllocs()
				errs := make([]error, workers)
				for step := int64(0); b.Loop(); step++ {
					var wg sync.WaitGroup
					for i, x := range ws {
						wg.Go(func() {
							res, err := x.cl.PushPull(ctx, client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: int64(i + 1), Step: step, Clocks: x.clocks, Grads: x.grads}, Pull: true, Dst: x.params})
							x.clocks, errs[i] = res.PullClocks, err
						})
					}
					wg.Wait()
					for _, err := range errs {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
