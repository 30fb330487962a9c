package sim_test

import (
	"fmt"
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

// BenchmarkPlannerBigModel simulates what shoal bench plan --workers 1024
// --model big does for the parameter servers: the 25.4M-parameter MLP,
// 10 steps of 1,024 workers, the planner's fast path (DefaultPieces), at
// each of its default server counts, dedicated and colocated.
func BenchmarkPlannerBigModel(b *testing.B) {
	layers := []int64{784 * 16384 * 4, 16384 * 4, 16384 * 768 * 4, 768 * 4, 768 * 10 * 4, 10 * 4}
	for _, m := range []consistency.Mode{consistency.Async, consistency.Sync, consistency.SSP} {
		for _, s := range []int{1, 4, 16, 64, 256, 1024} {
			for _, colocated := range []bool{false, true} {
				if colocated && s != 1024 {
					continue
				}
				b.Run(fmt.Sprintf("%s/servers=%d/colocated=%v", m, s, colocated), func(b *testing.B) {
					cfg := sim.Config{Mode: m, Workers: 1024, Servers: s, Staleness: 1, Batch: 16, Steps: 10, Layers: layers, FusionBytes: 65536,
						Forward: 0.1, Backward: 0.2, Jitter: 0.1, Seed: 1, NICGbps: 25, Latency: 25e-6, ApplyBytesPerSec: 5e9,
						Pieces: sim.DefaultPieces, Colocated: colocated}
					for b.Loop() {
						if _, err := sim.Run(cfg); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
