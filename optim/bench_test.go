package optim_test

import (
	"math/rand/v2"
	"testing"

	"github.com/shoalml/shoal/optim"
)

// BenchmarkStep measures one Step over a 1M-float vector per algorithm. SetBytes counts the
// parameter bytes updated (4 per float), so MB/s compares algorithms on the same footing; the
// memory actually touched is larger (grads and 0–2 state slots).
func BenchmarkStep(b *testing.B) {
	const n = 1 << 20
	for _, alg := range optim.Algorithms() {
		b.Run(alg, func(b *testing.B) {
			cfg := optim.DefaultConfig()
			cfg.Algorithm = alg
			cfg.WeightDecay = 1e-4
			o, err := optim.New(cfg, n)
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 1))
			p, g := randomVector(rng, n, 1), randomVector(rng, n, 1e-3)
			b.SetBytes(4 * n)
			b.ReportAllocs()
			for b.Loop() {
				if err := o.Step(p, g); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/float")
		})
	}
}
