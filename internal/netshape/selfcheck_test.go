package netshape_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/internal/netshape"
)

func TestSelfCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  netshape.Config
	}{
		{"unlimited", netshape.Config{}},
		{"1 Gbps", netshape.Config{Gbps: 1}},
		{"1 Gbps with RTT", netshape.Config{Gbps: 1, RTT: 2 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := netshape.SelfCheck(t.Context(), tc.cfg, 1<<20)
			require.NoError(t, err)
			assert.Equal(t, int64(1<<20), c.Bytes)
			assert.Equal(t, tc.cfg.Gbps, c.ConfiguredGbps)
			assert.Greater(t, c.MeasuredGbps, 0.0)
			assert.Positive(t, c.Elapsed)
			if tc.cfg.Gbps == 0 {
				assert.Zero(t, c.Ratio)
			} else {
				assert.InDelta(t, c.MeasuredGbps/tc.cfg.Gbps, c.Ratio, 1e-12)
			}
		})
	}
}

func TestSelfCheckErrors(t *testing.T) {
	_, err := netshape.SelfCheck(t.Context(), netshape.Config{Gbps: -1}, 1<<20)
	assert.ErrorIs(t, err, netshape.ErrInvalidConfig)
	_, err = netshape.SelfCheck(t.Context(), netshape.Config{}, 0)
	assert.ErrorContains(t, err, "want > 0")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = netshape.SelfCheck(ctx, netshape.Config{Gbps: 1}, 1<<30)
	assert.ErrorIs(t, err, context.Canceled)
}

// TestSelfCheckCancelMidway cancels a self-check that would take minutes.
func TestSelfCheckCancelMidway(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := netshape.SelfCheck(ctx, netshape.Config{Gbps: 0.01}, 1<<30)
		done <- err
	}()
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

// BenchmarkSelfCheck measures one shaped stream at several line rates and
// reports the achieved fraction of the configured rate and the CPU it
// cost (cores busy on average, over the whole process).
func BenchmarkSelfCheck(b *testing.B) {
	for _, gbps := range []float64{0, 1, 10, 25} {
		for _, rtt := range []time.Duration{0, time.Millisecond} {
			for _, mib := range []int64{64, 256} {
				cfg := netshape.Config{Gbps: gbps, RTT: rtt}
				b.Run(fmt.Sprintf("gbps=%g/rtt=%v/mib=%d", gbps, rtt, mib), func(b *testing.B) {
					b.SetBytes(mib << 20)
					var ratio, measured float64
					cpu0 := cpuTime()
					start := time.Now()
					for b.Loop() {
						c, err := netshape.SelfCheck(b.Context(), cfg, mib<<20)
						require.NoError(b, err)
						ratio += c.Ratio
						measured += c.MeasuredGbps
					}
					wall := time.Since(start)
					cpu := cpuTime() - cpu0
					n := float64(b.N)
					b.ReportMetric(ratio/n, "ratio")
					b.ReportMetric(measured/n, "Gbps")
					if cpu > 0 {
						b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
					}
				})
			}
		}
	}
}
