package collective_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
)

// onHosts is a transport on fake hosts that counts the bytes it sends to
// ranks on other hosts.
type onHosts struct {
	collective.Transport
	hosts []string
	cross *atomic.Int64
}

func (h onHosts) HostOf(rank int) string { return h.hosts[rank] }

func (h onHosts) Send(ctx context.Context, peer int, buf []byte) error {
	if h.hosts[peer] != h.hosts[h.Rank()] {
		h.cross.Add(int64(len(buf)))
	}
	return h.Transport.Send(ctx, peer, buf)
}

// allreduceOnHosts runs one Allreduce of n floats, every rank's vector
// its rank+1, on ranks placed on hosts by host, and returns each rank's
// bytes sent to other hosts and its result.
func allreduceOnHosts(t *testing.T, alg collective.Algorithm, host func(r int) int, ranks, n int) ([]int64, [][]float32) {
	t.Helper()
	hosts := make([]string, ranks)
	for r := range hosts {
		hosts[r] = fmt.Sprint("h", host(r))
	}
	ts := collective.NewMemGroup(ranks)
	cross := make([]atomic.Int64, ranks)
	bufs := make([][]float32, ranks)
	cfg := collective.DefaultConfig()
	cfg.Algorithm = alg
	var wg sync.WaitGroup
	errs := make([]error, ranks)
	for r := range ranks {
		bufs[r] = make([]float32, n)
		for i := range bufs[r] {
			bufs[r][i] = float32(r + 1)
		}
		c, err := collective.New(onHosts{Transport: ts[r], hosts: hosts, cross: &cross[r]}, cfg)
		require.NoError(t, err)
		wg.Go(func() { errs[r] = c.Allreduce(t.Context(), bufs[r], collective.Sum) })
	}
	wg.Wait()
	out := make([]int64, ranks)
	for r := range ranks {
		require.NoError(t, errs[r], "rank %d", r)
		require.NoError(t, ts[r].Close())
		out[r] = cross[r].Load()
	}
	return out, bufs
}

// Hierarchical moves across hosts only each rank's block of the vector,
// over its cross-host ring: 2(H−1)/H of n/L floats a rank, the same for
// every rank, wherever the hosts' ranks sit; the flat ring on hosts of
// consecutive ranks sends all of its cross-host bytes from the hosts'
// last ranks. Hosts of different sizes run the flat ring.
func TestHierarchicalCrossesHostsWithItsBlocks(t *testing.T) {
	const n = 4800 // floats, divisible by every L and N below
	for _, tc := range []struct {
		name        string
		hosts, per  int
		host        func(r int) int
		flat        bool
		wantPerRank int64
	}{
		{name: "2x4", hosts: 2, per: 4, host: func(r int) int { return r / 4 }, wantPerRank: 4 * 2 * 1 * n / 4 / 2},
		{name: "4x2", hosts: 4, per: 2, host: func(r int) int { return r / 2 }, wantPerRank: 4 * 2 * 3 * n / 2 / 4},
		{name: "2x3 interleaved", hosts: 2, per: 3, host: func(r int) int { return r % 2 }, wantPerRank: 4 * 2 * 1 * n / 3 / 2},
		{name: "8x1", hosts: 8, per: 1, host: func(r int) int { return r }, wantPerRank: 4 * 2 * 7 * n / 8},
		{name: "1x4", hosts: 1, per: 4, host: func(int) int { return 0 }, wantPerRank: 0},
		{name: "3+3+2: flat ring", hosts: 3, per: 0, host: func(r int) int { return r / 3 }, flat: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ranks := tc.hosts * tc.per
			if tc.flat {
				ranks = 8
			}
			cross, bufs := allreduceOnHosts(t, collective.Hierarchical, tc.host, ranks, n)
			want := float32(ranks * (ranks + 1) / 2)
			for r := range ranks {
				for i, v := range bufs[r] {
					if v != want {
						t.Fatalf("rank %d: [%d] is %g, want %g", r, i, v, want)
					}
				}
			}
			if tc.flat {
				flat, _ := allreduceOnHosts(t, collective.Ring, tc.host, ranks, n)
				assert.Equal(t, flat, cross, "bytes to other hosts by rank: want the flat ring's")
				return
			}
			for r, b := range cross {
				assert.Equal(t, tc.wantPerRank, b, "rank %d: bytes sent to other hosts", r)
			}
		})
	}
}

// Auto takes Hierarchical on two or more hosts of two or more ranks
// each, alike, except where the tree's log2(N) rounds are cheaper still;
// elsewhere ChooseAlgorithm's choice.
func TestChooseAlgorithmOnHosts(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		bytes, size, perHost int
		want                 collective.Algorithm
	}{
		{"one host: the flat choice, small", 4 << 10, 8, 8, collective.Tree},
		{"one host: the flat choice, large", 64 << 20, 8, 8, collective.Ring},
		{"one rank a host: the flat choice", 64 << 20, 8, 1, collective.Ring},
		{"unlike hosts: the flat choice, large", 64 << 20, 8, 0, collective.Ring},
		{"unlike hosts: the flat choice, small", 4 << 10, 8, 0, collective.Tree},
		{"2x2, 4 KiB: the tree's 2 rounds beat 2+2", 4 << 10, 4, 2, collective.Tree},
		{"2x2, 64 MiB", 64 << 20, 4, 2, collective.Hierarchical},
		{"2x4, 64 MiB", 64 << 20, 8, 4, collective.Hierarchical},
		{"2x4, 4 KiB: 3 tree rounds of 4 KiB against 8 rounds", 4 << 10, 8, 4, collective.Tree},
		{"128x4, 16 MiB: 260 rounds against 9 of 16 MiB", 16 << 20, 512, 4, collective.Hierarchical},
		{"128x4, 256 KiB", 256 << 10, 512, 4, collective.Tree},
	} {
		assert.Equal(t, tc.want, collective.ChooseAlgorithmOnHosts(tc.bytes, tc.size, tc.perHost), tc.name)
	}
}
