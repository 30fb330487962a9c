package nn

import (
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// benchBatch returns a reproducible batch of n random samples for m.
func benchBatch(m Model, n int) ([]float32, []int32) {
	return randBatch(rand.New(rand.NewPCG(1, 2)), n, m)
}

// BenchmarkForwardBackward measures one training step's model work (no
// optimizer) at batch 64 on the CPU backend.
func BenchmarkForwardBackward(b *testing.B) {
	for _, arch := range []string{"mlp", "cnn"} {
		b.Run(arch, func(b *testing.B) {
			m, params := model(b, Spec{Arch: arch})
			const batch = 64
			grads := make([]float32, len(params))
			x, labels := benchBatch(m, batch)
			m.ForwardBackward(params, grads, x, labels) // size the buffers
			for b.Loop() {
				m.ForwardBackward(params, grads, x, labels)
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// BenchmarkEvaluate measures forward-only evaluation at batch 256.
func BenchmarkEvaluate(b *testing.B) {
	for _, arch := range []string{"mlp", "cnn"} {
		b.Run(arch, func(b *testing.B) {
			m, params := model(b, Spec{Arch: arch})
			const batch = 256
			x, labels := benchBatch(m, batch)
			m.Evaluate(params, x, labels) // size the buffers
			for b.Loop() {
				m.Evaluate(params, x, labels)
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// BenchmarkCPUGemm compares the CPU backend's serial tiling with OpenBLAS
// on one thread and with calling gonum's Sgemm directly (which goes
// parallel on large products) on the products of the default models at
// batch 64.
func BenchmarkCPUGemm(b *testing.B) {
	type gemm struct {
		name    string
		tA, tB  bool
		m, n, k int
	}
	cases := []gemm{
		{"mlp-fc1-fwd", false, true, 64, 256, 784},
		{"mlp-fc1-dW", true, false, 256, 784, 64},
		{"mlp-fc2-dx", false, false, 64, 256, 128},
		{"mlp512-fc1-fwd", false, true, 64, 512, 784},
		{"mlp512-fc2-fwd", false, true, 64, 512, 512},
		{"cnn-conv1-fwd", false, false, cnnConv1, 28 * 28, 9},
		{"cnn-conv1-dW", false, true, cnnConv1, 9, 28 * 28},
		{"cnn-conv2-fwd", false, false, cnnConv2, 14 * 14, cnnConv1 * 9},
		{"cnn-conv2-dW", false, true, cnnConv2, cnnConv1 * 9, 14 * 14},
		{"cnn-conv2-dcol", true, false, cnnConv1 * 9, 14 * 14, cnnConv2},
		{"cnn-fc1-fwd", false, true, 64, cnnFC, cnnConv2 * 49},
		{"cnn-fc1-dW", true, false, cnnFC, cnnConv2 * 49, 64},
	}
	for _, c := range cases {
		lda, ldb := c.k, c.n
		if c.tA {
			lda = c.m
		}
		if c.tB {
			ldb = c.k
		}
		rng := rand.New(rand.NewPCG(3, 4))
		a := randVec(rng, c.m*c.k)
		bm := randVec(rng, c.k*c.n)
		cm := make([]float32, c.m*c.n)
		flops := 2 * float64(c.m*c.n*c.k)
		report := func(b *testing.B) {
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		}
		b.Run(c.name+"/nn", func(b *testing.B) {
			be := NewCPU()
			for b.Loop() {
				be.Gemm(c.tA, c.tB, c.m, c.n, c.k, 1, a, lda, bm, ldb, 0, cm, c.n)
			}
			report(b)
		})
		b.Run(c.name+"/openblas", func(b *testing.B) {
			be := openblasOrSkip(b)
			for b.Loop() {
				be.Gemm(c.tA, c.tB, c.m, c.n, c.k, 1, a, lda, bm, ldb, 0, cm, c.n)
			}
			report(b)
		})
		b.Run(c.name+"/gonum", func(b *testing.B) {
			ta, tb := blas.NoTrans, blas.NoTrans
			if c.tA {
				ta = blas.Trans
			}
			if c.tB {
				tb = blas.Trans
			}
			var impl gonum.Implementation
			for b.Loop() {
				impl.Sgemm(ta, tb, c.m, c.n, c.k, 1, a, lda, bm, ldb, 0, cm, c.n)
			}
			report(b)
		})
	}
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 2*rng.Float32() - 1
	}
	return v
}
