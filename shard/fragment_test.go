package shard

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFragmentsAreWholeRows: fragments are contiguous, cover the vector
// without overlap, and begin and end at row boundaries, so every server
// owns a piece of each; a fragment index out of range, and more
// fragments than rows, are refused.
func TestFragmentsAreWholeRows(t *testing.T) {
	cases := []struct {
		name           string
		n, servers, cb int
		f              int
	}{
		{"16 floats, 2 servers, 8 chunks, 2 fragments", 16, 2, 8, 2},
		{"4 fragments of one row", 16, 2, 8, 4},
		{"uneven rows", 100, 3, 40, 4},
		{"one", 10, 1, 4, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.n, tc.servers, tc.cb)
			require.NoError(t, err)
			require.NoError(t, p.CheckFragments(tc.f))
			at := 0
			for i := range tc.f {
				r, err := p.Fragment(tc.f, i)
				require.NoError(t, err)
				assert.Equal(t, at, r.Off, "fragment %d follows the last", i)
				lo, hi, err := p.FragmentChunks(tc.f, i)
				require.NoError(t, err)
				assert.Zero(t, lo%tc.servers, "whole rows")
				assert.Zero(t, hi%tc.servers, "whole rows")
				for s := range tc.servers {
					owns := false
					for _, c := range p.Ranges(s) {
						owns = owns || c.Off >= r.Off && c.End() <= r.End()
					}
					assert.True(t, owns, "server %d owns a piece of fragment %d", s, i)
				}
				at = r.End()
			}
			assert.Equal(t, tc.n, at, "the fragments cover the vector")
			for _, bad := range []int{-1, tc.f} {
				_, err := p.Fragment(tc.f, bad)
				assert.ErrorContains(t, err, "want 0..")
			}
		})
	}
	p, err := New(16, 2, 8)
	require.NoError(t, err)
	assert.ErrorContains(t, p.CheckFragments(5), "5 fragments: the plan gives each of 2 server(s) 4 chunk(s)")
	assert.ErrorContains(t, p.CheckFragments(0), "want 1..")
}

// TestFragmentChunkBytes: the chunk size it picks gives every server at
// least F chunks, and keeps a size that already does.
func TestFragmentChunkBytes(t *testing.T) {
	for _, tc := range []struct{ n, servers, f, cb int }{
		{235146, 1, 5, DefaultChunkBytes},
		{235146, 2, 2, DefaultChunkBytes},
		{235146, 3, 10, DefaultChunkBytes},
		{100, 4, 25, DefaultChunkBytes},
		{1 << 22, 2, 2, DefaultChunkBytes},
	} {
		cb := FragmentChunkBytes(tc.n, tc.servers, tc.f, tc.cb)
		assert.LessOrEqual(t, cb, tc.cb)
		p, err := New(tc.n, tc.servers, cb)
		require.NoError(t, err)
		assert.NoError(t, p.CheckFragments(tc.f), "%+v: chunks of %d bytes", tc, cb)
	}
	assert.Equal(t, DefaultChunkBytes, FragmentChunkBytes(1<<22, 2, 2, DefaultChunkBytes), "already 2 chunks a server")
	assert.Equal(t, 64, FragmentChunkBytes(1000, 1, 1, 64), "one fragment")
}
