package netshape

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTransmitQueueWhenShaped checks that a conn starts a goroutine (its
// transmit queue) only when the NIC has a rate or an RTT.
func TestTransmitQueueWhenShaped(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want bool
	}{
		{"unlimited", Config{}, false},
		{"rate", Config{Gbps: 1}, true},
		{"RTT", Config{RTT: time.Millisecond}, true},
		{"rate and RTT", Config{Gbps: 1, RTT: time.Millisecond}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := New(tc.cfg)
			require.NoError(t, err)
			defer n.Close()
			a, b := net.Pipe()
			defer b.Close()
			c := n.Conn(a).(*conn)
			assert.Equal(t, tc.want, c.dl != nil)
			assert.NoError(t, c.Close())
		})
	}
}

func TestChunk(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want int
	}{
		{"unlimited", Config{}, 256 << 10},
		{"1 Gbps", Config{Gbps: 1}, 64 << 10},
		{"10 Gbps", Config{Gbps: 10}, 256 << 10},
		{"4 Gbps", Config{Gbps: 4}, 1_000_000 / 8},
		{"25 Gbps", Config{Gbps: 25}, 256 << 10},
		{"burst below 64 KiB", Config{Gbps: 25, Burst: 1000}, 1000},
		{"large burst", Config{Gbps: 1, Burst: 1 << 30}, 256 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.cfg.chunk())
			if tc.cfg.Gbps > 0 {
				assert.LessOrEqual(t, tc.cfg.chunk(), tc.cfg.burst())
			}
		})
	}
}
