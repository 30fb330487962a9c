package cluster_test

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/secure"
)

// movesRecorder records the shard moves followShards makes.
type movesRecorder map[int]string

func (m movesRecorder) SetShardAddr(shard int, addr string) error {
	m[shard] = addr
	return nil
}

// TestFollowShardsKeepsTheTokenOffTheNetwork: a worker with a token and
// no TLS follows a shard that gossips a new loopback address, but not one
// beyond loopback: it would send the token there in the clear, which it
// refuses to do for --servers (before, any gossiped address was dialed,
// and with no gossip key anyone can gossip one).
func TestFollowShardsKeepsTheTokenOffTheNetwork(t *testing.T) {
	f, err := secure.WriteTestPKI(filepath.Join(t.TempDir(), "certs"), nil, time.Hour)
	require.NoError(t, err)
	tokenOnly, err := secure.Load(secure.Files{Token: f.Token})
	require.NoError(t, err)
	withTLS, err := secure.Load(f)
	require.NoError(t, err)
	const fp = 42
	view := func(addr string) cluster.View {
		return cluster.View{Members: []cluster.Member{{Name: "ps-0", Meta: cluster.Meta{Role: cluster.RolePS, Rank: 0, GRPCAddr: addr, ModelFingerprint: fp}}}}
	}
	for _, tc := range []struct {
		name  string
		creds *secure.Credentials
		to    string
		moved bool
	}{
		{"token, loopback", tokenOnly, "127.0.0.1:7001", true},
		{"token, beyond loopback", tokenOnly, "192.0.2.7:7000", false},
		{"token and TLS, beyond loopback", withTLS, "192.0.2.7:7000", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			moves := movesRecorder{}
			seen := make([]string, 1)
			log := slog.New(slog.DiscardHandler)
			cluster.FollowShards(view("127.0.0.1:7000"), fp, seen, moves, tc.creds.CheckDial, log) // its first address: recorded
			cluster.FollowShards(view(tc.to), fp, seen, moves, tc.creds.CheckDial, log)
			if tc.moved {
				assert.Equal(t, movesRecorder{0: tc.to}, moves)
			} else {
				assert.Empty(t, moves)
			}
		})
	}
}
