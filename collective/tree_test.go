package collective_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
)

// Auto takes the tree for short messages on many ranks, where its
// log2(N) latencies beat the ring's 2(N−1), and the ring for long ones.
func TestChooseAlgorithm(t *testing.T) {
	for _, tc := range []struct {
		name        string
		bytes, size int
		want        collective.Algorithm
	}{
		{"two ranks cost the same: ring", 4, 2, collective.Ring},
		{"4 KiB on 8", 4 << 10, 8, collective.Tree},
		{"600 KB on 8", 600_000, 8, collective.Tree},
		{"800 KB on 8", 800_000, 8, collective.Ring},
		{"64 MiB on 8", 64 << 20, 8, collective.Ring},
		{"2 MB on 64", 2_000_000, 64, collective.Tree},
		{"3 MB on 64", 3_000_000, 64, collective.Ring},
		{"16 MiB on 1024", 16 << 20, 1024, collective.Tree},
		{"64 MiB on 1024", 64 << 20, 1024, collective.Ring},
		{"a fold costs two rounds: 100 KB on 3", 100_000, 3, collective.Ring},
	} {
		assert.Equal(t, tc.want, collective.ChooseAlgorithm(tc.bytes, tc.size), tc.name)
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range []collective.Algorithm{collective.Ring, collective.Tree, collective.Auto, collective.Hierarchical} {
		got, err := collective.ParseAlgorithm(strings.ToUpper(a.String()))
		require.NoError(t, err)
		assert.Equal(t, a, got)
	}
	_, err := collective.ParseAlgorithm("butterfly")
	assert.ErrorContains(t, err, `unknown allreduce algorithm "butterfly", want auto, ring, tree or hierarchical`)
	cfg := collective.DefaultConfig()
	cfg.Algorithm = collective.Hierarchical + 1
	_, err = collective.New(collective.NewMemGroup(1)[0], cfg)
	assert.ErrorContains(t, err, "Config.Algorithm")
}
