package data

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

const benchBatch = 256

// benchSets returns a float32 (synthetic) and a uint8 (Fashion-MNIST-like)
// dataset of 1×28×28 samples.
func benchSets(b *testing.B) map[string]Dataset {
	b.Helper()
	cfg := DefaultSyntheticConfig()
	cfg.Train, cfg.Test = 10000, 1
	synth, _, err := Synthetic(cfg)
	require.NoError(b, err)
	lut, err := NormalizeStandard.table()
	require.NoError(b, err)
	const n = 10000
	pix := make([]uint8, n*784)
	for i := range pix {
		pix[i] = uint8(i * 7)
	}
	u8 := &memDataset{name: "bytes", n: n, c: 1, h: 28, w: 28, size: 784, classes: 10, pix: pix, lut: lut, labels: make([]int32, n)}
	require.NoError(b, u8.check())
	return map[string]Dataset{"float32": synth, "uint8": u8}
}

func BenchmarkGather(b *testing.B) {
	for name, ds := range benchSets(b) {
		b.Run(name, func(b *testing.B) {
			s, err := NewSampler(ds.Len(), 0, 1, 1, true)
			require.NoError(b, err)
			order := s.Indices(0, nil)
			x := make([]float32, benchBatch*784)
			y := make([]int32, benchBatch)
			b.SetBytes(benchBatch * 784 * 4)
			k := 0
			for b.Loop() {
				lo := (k * benchBatch) % (len(order) - benchBatch)
				ds.Gather(order[lo:lo+benchBatch], x, y)
				k++
			}
			b.ReportMetric(float64(k*benchBatch)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

func BenchmarkLoader(b *testing.B) {
	for name, ds := range benchSets(b) {
		b.Run(name, func(b *testing.B) {
			s, err := NewSampler(ds.Len(), 0, 1, 1, true)
			require.NoError(b, err)
			l, err := NewLoader(LoaderConfig{Batch: benchBatch, Depth: 2}, ds, s)
			require.NoError(b, err)
			defer l.Close()
			ctx := b.Context()
			epoch := 0
			require.NoError(b, l.Start(ctx, epoch))
			b.SetBytes(benchBatch * 784 * 4)
			samples := 0
			for b.Loop() {
				batch, err := l.Next(ctx)
				if err == io.EOF {
					epoch++
					require.NoError(b, l.Start(ctx, epoch))
					batch, err = l.Next(ctx)
				}
				require.NoError(b, err)
				samples += batch.Len()
				l.Release(batch)
			}
			b.ReportMetric(float64(samples)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

func BenchmarkSamplerIndices(b *testing.B) {
	s, err := NewSampler(60000, 1, 4, 1, true)
	require.NoError(b, err)
	var dst []int
	epoch := 0
	for b.Loop() {
		dst = s.Indices(epoch, dst)
		epoch++
	}
	b.ReportMetric(float64(60000*b.N)/b.Elapsed().Seconds(), "samples/s")
}
