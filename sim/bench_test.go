package sim_test

import (
	"testing"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/sim"
)

// BenchmarkThousandWorkers simulates 10 steps of 1,024 workers of the
// default MLP in each mode (64 shards for the parameter servers).
func BenchmarkThousandWorkers(b *testing.B) {
	layers := []int64{784 * 256 * 4, 256 * 4, 256 * 128 * 4, 128 * 4, 128 * 10 * 4, 10 * 4}
	for _, m := range []consistency.Mode{consistency.Async, consistency.Sync, consistency.SSP, consistency.Ring} {
		b.Run(m.String(), func(b *testing.B) {
			cfg := sim.Config{Mode: m, Workers: 1024, Servers: 64, Batch: 64, Steps: 10, Layers: layers, FusionBytes: 65536,
				Forward: 0.0003, Backward: 0.0006, Jitter: 0.1, NICGbps: 25, Latency: 25e-6, ApplyBytesPerSec: 4e9}
			if m == consistency.Ring {
				cfg.Servers = 0
			}
			for b.Loop() {
				if _, err := sim.Run(cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
