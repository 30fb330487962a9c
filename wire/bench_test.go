package wire

import "testing"

// BenchmarkEncoding measures the loops of every encoding on 1 MiB of
// float32 (MB/s counts the float32 bytes).
func BenchmarkEncoding(b *testing.B) {
	const n = 1 << 18
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i%1000-500) * 0.0123
	}
	w := make([]byte, 4*n)
	y := make([]float32, n)
	run := func(name string, f func()) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				f()
			}
			b.ReportMetric(4*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
	run("encode/float16", func() { Float16.Put(w, x) })
	run("decode/float16", func() { _ = Float16.Decode(y, w[:2*n]) })
	run("encode/bfloat16", func() { BFloat16.Put(w, x) })
	run("decode/bfloat16", func() { _ = BFloat16.Decode(y, w[:2*n]) })
	run("encode/float32", func() { Float32.Put(w, x) })
	run("decode/float32", func() { _ = Float32.Decode(y, w) })
	run("encode/float32-portable", func() { putFloat32Portable(w, x) })
	run("decode/float32-portable", func() { getFloat32Portable(y, w) })
	run("quantize/float16", func() { copy(y, x); Float16.Quantize(y) })
	run("quantize/bfloat16", func() { copy(y, x); BFloat16.Quantize(y) })
}
