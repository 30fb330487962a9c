package shard

import "fmt"

// Fragments of a plan (Streaming DiLoCo, Douillard et al. 2025): the
// vector cut into F contiguous ranges that workers synchronise one at a
// time. A fragment is a run of whole rows of the plan, a row being
// Servers consecutive chunks (chunk i·Servers … i·Servers+Servers−1, one
// on each server): fragment f of F holds rows ⌊f·R/F⌋ to ⌊(f+1)·R/F⌋−1
// of the plan's R = NumChunks/Servers rows. So every server owns a piece
// of every fragment (its chunks in those rows, consecutive in its own
// share), an exchange of one fragment touches every server with about 1/F
// of its share, and fragments differ by at most one row.

// MaxFragments bounds the fragments a run cuts its vector into.
const MaxFragments = 1 << 10

// CheckFragments reports whether p can be cut into f fragments: it needs
// at least f rows, that is f chunks on each server.
func (p Plan) CheckFragments(f int) error {
	rows := p.NumChunks() / p.Servers
	switch {
	case f < 1 || f > MaxFragments:
		return fmt.Errorf("%d fragments: want 1..%d", f, MaxFragments)
	case rows < f:
		return fmt.Errorf("%d fragments: the plan gives each of %d server(s) %d chunk(s) of a vector of %d floats, and a fragment is whole rows of chunks (one on each server): want at least %d chunks per server, chunks of at most %d bytes (--chunk-bytes)",
			f, p.Servers, rows, p.VectorLen, f, 4*max(p.VectorLen/(p.Servers*f), 1))
	}
	return nil
}

// FragmentChunks returns the chunks [lo, hi) of fragment i of f; p must
// pass CheckFragments(f).
func (p Plan) FragmentChunks(f, i int) (lo, hi int, err error) {
	if err := p.CheckFragments(f); err != nil {
		return 0, 0, err
	}
	if i < 0 || i >= f {
		return 0, 0, fmt.Errorf("fragment %d: want 0..%d (%d fragments)", i, f-1, f)
	}
	rows := p.NumChunks() / p.Servers
	return i * rows / f * p.Servers, (i + 1) * rows / f * p.Servers, nil
}

// Fragment returns the range of the vector that fragment i of f covers.
func (p Plan) Fragment(f, i int) (Range, error) {
	lo, hi, err := p.FragmentChunks(f, i)
	if err != nil {
		return Range{}, err
	}
	first := p.Chunk(lo)
	last := p.Chunk(hi - 1)
	return Range{Off: first.Off, Len: last.End() - first.Off}, nil
}

// FragmentChunkBytes is the largest chunk, at most chunkBytes, with which
// a vector of n floats over servers servers has at least f chunks on each
// server (CheckFragments): chunkBytes itself when f ≤ 1 or it already
// does, else chunks of about n/(servers·f) floats, so that the f
// fragments are a row each, alike within a float.
func FragmentChunkBytes(n, servers, f, chunkBytes int) int {
	if f <= 1 || servers < 1 || chunkBytes < 4 || n < servers*f {
		return chunkBytes
	}
	rows := func(cf int) int { return Plan{VectorLen: n, Servers: servers, ChunkFloats: cf}.NumChunks() / servers }
	if rows(chunkBytes/4) >= f {
		return chunkBytes
	}
	m := servers * f
	cf := (n + m - 1) / m
	if rows(cf) < f {
		cf = n / m
	}
	return 4 * cf
}
