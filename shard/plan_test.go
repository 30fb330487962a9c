package shard

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanProperties(t *testing.T) {
	for _, tc := range []struct {
		name              string
		n, servers, chunk int
	}{
		{"one server", 1000, 1, 400},
		{"exact chunks", 1024, 4, 64},
		{"ragged last chunk", 1001, 3, 40},
		{"more servers than chunks", 10, 8, 16},
		{"tiny chunks", 97, 5, 4},
		{"mlp default", 235146, 3, DefaultChunkBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.n, tc.servers, tc.chunk)
			require.NoError(t, err)
			owner := make([]int, tc.n)
			for i := range owner {
				owner[i] = -1
			}
			minF, maxF := tc.n, 0
			for s := range tc.servers {
				for _, r := range p.Ranges(s) {
					for i := r.Off; i < r.End(); i++ {
						require.Equal(t, -1, owner[i], "index %d owned twice", i)
						owner[i] = s
					}
					assert.Equal(t, s, p.Owner(p.ChunkAt(r.Off)))
				}
				minF, maxF = min(minF, p.Floats(s)), max(maxF, p.Floats(s))
			}
			for i, o := range owner {
				require.NotEqual(t, -1, o, "index %d owned by nobody", i)
			}
			assert.LessOrEqual(t, maxF-minF, p.ChunkFloats, "floats per shard differ by more than one chunk")
			// The same inputs give the same plan on every node.
			q, _ := New(tc.n, tc.servers, tc.chunk)
			assert.Equal(t, p, q)
		})
	}
}

func TestPlanErrors(t *testing.T) {
	for _, tc := range []struct {
		name              string
		n, servers, chunk int
	}{
		{"empty vector", 0, 1, 64},
		{"no servers", 10, 0, 64},
		{"chunk under a float", 10, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.n, tc.servers, tc.chunk)
			assert.Error(t, err)
		})
	}
}
