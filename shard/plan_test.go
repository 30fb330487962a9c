package shard

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// planCase is a table row: the arguments of one call to New.
type planCase struct {
	name              string
	n, servers, chunk int
}

func TestPlanProperties(t *testing.T) {
	for _, tc := range []planCase{
		{"one server", 1000, 1, 400},
		{"exact chunks", 1024, 4, 64},
		{"ragged last chunk", 1001, 3, 40},
		{"more servers than chunks", 10, 8, 16},
		{"tiny chunks", 97, 5, 4},
		{"mlp default", 235146, 3, DefaultChunkBytes},
		{"mlp default, 8 servers", 235146, 8, DefaultChunkBytes},
		{"as many servers as floats", 7, 7, 1 << 20},
		{"one-float chunks", 10, 3, 4},
		{"big model, 4 servers", 25_400_000, 4, DefaultChunkBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.n, tc.servers, tc.chunk)
			require.NoError(t, err)
			owner := make([]int, tc.n)
			for i := range owner {
				owner[i] = -1
			}
			minF, maxF := tc.n, 0
			minC, maxC := tc.n, 0
			for i := range p.NumChunks() {
				r := p.Chunk(i)
				minC, maxC = min(minC, r.Len), max(maxC, r.Len)
				require.Equal(t, i, p.ChunkAt(r.Off), "chunk %d %v", i, r)
				require.Equal(t, i, p.ChunkAt(r.End()-1), "chunk %d %v", i, r)
				assert.True(t, p.IsBoundary(r.Off))
				assert.True(t, p.IsBoundary(r.End()))
				if r.Len > 1 {
					assert.False(t, p.IsBoundary(r.Off+1))
				}
			}
			assert.LessOrEqual(t, maxC, p.ChunkFloats, "a chunk is larger than the largest allowed")
			assert.LessOrEqual(t, maxC-minC, 1, "chunks are not cut evenly")
			for s := range tc.servers {
				assert.NotEmpty(t, p.Ranges(s), "shard %d owns nothing", s)
				for _, r := range p.Ranges(s) {
					for i := r.Off; i < r.End(); i++ {
						if owner[i] != -1 {
							t.Fatalf("index %d owned by shards %d and %d", i, owner[i], s)
						}
						owner[i] = s
					}
					assert.Equal(t, s, p.Owner(p.ChunkAt(r.Off)))
				}
				minF, maxF = min(minF, p.Floats(s)), max(maxF, p.Floats(s))
			}
			for i, o := range owner {
				if o == -1 {
					t.Fatalf("index %d owned by nobody", i)
				}
			}
			assert.LessOrEqual(t, maxF-minF, maxC, "floats per shard differ by more than one chunk")
			// The same inputs give the same plan on every node.
			q, _ := New(tc.n, tc.servers, tc.chunk)
			assert.Equal(t, p, q)
		})
	}
}

// TestTheSmallestChunkSuggestedIsTaken: the error for chunks too small
// for a shard's messages names a size, and that size is accepted.
func TestTheSmallestChunkSuggestedIsTaken(t *testing.T) {
	for _, servers := range []int{1, 2, 3, 7} {
		_, err := New(235146, servers, 4)
		require.ErrorContains(t, err, "more than the 4096 a shard's messages can list")
		var least int
		_, scanErr := fmt.Sscanf(err.Error()[strings.Index(err.Error(), "at least "):], "at least %d bytes", &least)
		require.NoError(t, scanErr, err.Error())
		p, err := New(235146, servers, least)
		require.NoError(t, err, "the %d bytes it suggested, %d servers", least, servers)
		assert.LessOrEqual(t, p.NumChunks()/servers, MaxChunksPerShard)
		_, err = New(235146, servers, least-4)
		assert.Error(t, err, "nothing smaller: %d bytes, %d servers", least-4, servers)
	}
}

func TestPlanErrors(t *testing.T) {
	for _, tc := range []planCase{
		{"empty vector", 0, 1, 64},
		{"no servers", 10, 0, 64},
		{"chunk under a float", 10, 1, 3},
		{"more servers than floats", 5, 6, 64},
		{"more chunks than MaxChunks", 1 << 40, 1, 4},
		{"more servers than MaxChunks", 1 << 40, MaxChunks + 1, 1 << 30},
		{"more chunks a shard than its messages can list", 235146, 1, 4},
		{"the same over two servers", 235146, 2, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.n, tc.servers, tc.chunk)
			assert.Error(t, err)
			assert.Error(t, Plan{VectorLen: tc.n, Servers: tc.servers, ChunkFloats: tc.chunk / 4}.Validate())
		})
	}
}
