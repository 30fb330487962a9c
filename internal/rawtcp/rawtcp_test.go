package rawtcp_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/internal/rawtcp"
)

func TestMeasure(t *testing.T) {
	tests := []struct {
		name                 string
		bytes, iters, warmup int
	}{
		{name: "one byte", bytes: 1, iters: 3, warmup: 0},
		{name: "odd size", bytes: 1000003, iters: 4, warmup: 1},
		// Larger than the loopback socket buffers: the writes block until
		// the other side reads.
		{name: "a 512,512 MLP's vector", bytes: 669706 * 4, iters: 5, warmup: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := rawtcp.DefaultConfig()
			cfg.Bytes, cfg.Iters, cfg.Warmup = tt.bytes, tt.iters, tt.warmup
			r, err := rawtcp.Measure(t.Context(), cfg)
			require.NoError(t, err)

			trips := int64(tt.warmup + tt.iters + 1) // and the checked one
			assert.Equal(t, tt.bytes, r.Bytes)
			assert.Equal(t, tt.iters, r.Iters)
			assert.Equal(t, tt.warmup, r.Warmup)
			assert.Equal(t, trips*int64(tt.bytes), r.Sent, "client wrote")
			assert.Equal(t, trips*int64(tt.bytes), r.Received, "client read")
			assert.Equal(t, trips*int64(tt.bytes), r.Echoed, "server wrote back")
			assert.Positive(t, r.Min)
			assert.LessOrEqual(t, r.Min, r.P10)
			assert.LessOrEqual(t, r.P10, r.Median)
			assert.LessOrEqual(t, r.Median, r.P90)
			assert.LessOrEqual(t, r.P90, r.Max)
			assert.LessOrEqual(t, r.Min, r.Mean)
			assert.LessOrEqual(t, r.Mean, r.Max)
			assert.InEpsilon(t, 2*float64(tt.bytes)/r.Median.Seconds()/1e9, r.GBps, 1e-9)
		})
	}
}

func TestMeasureRefusesConfig(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*rawtcp.Config)
	}{
		{name: "no bytes", modify: func(c *rawtcp.Config) { c.Bytes = 0 }},
		{name: "too many bytes", modify: func(c *rawtcp.Config) { c.Bytes = rawtcp.MaxBytes + 1 }},
		{name: "no iterations", modify: func(c *rawtcp.Config) { c.Iters = 0 }},
		{name: "negative warm-up", modify: func(c *rawtcp.Config) { c.Warmup = -1 }},
		{name: "no address", modify: func(c *rawtcp.Config) { c.Addr = "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := rawtcp.DefaultConfig()
			tt.modify(&cfg)
			_, err := rawtcp.Measure(t.Context(), cfg)
			assert.ErrorIs(t, err, rawtcp.ErrInvalidConfig)
		})
	}
}

func TestMeasureEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := rawtcp.Measure(ctx, rawtcp.DefaultConfig())
	assert.ErrorIs(t, err, context.Canceled)
}

func TestResultRecordAndString(t *testing.T) {
	r := rawtcp.Result{Bytes: 8, Iters: 3, Warmup: 1, Sent: 32, Received: 32, Median: 2 * time.Millisecond, P10: time.Millisecond, P90: 3 * time.Millisecond,
		Mean: 2 * time.Millisecond, GBps: 8e-6}
	assert.Equal(t, rawtcp.Record{Bytes: 8, Iters: 3, Warmup: 1, Median: 0.002, P10: 0.001, P90: 0.003, Mean: 0.002, GBps: 8e-6, Sent: 32, Received: 32}, r.Record())
	assert.Equal(t, "tcp round trip, 8 bytes each way, one loopback connection: median 2ms (p10 1ms, p90 3ms), 0.00 GB/s; 3 round trips after 1 warm-up", r.String())
}
