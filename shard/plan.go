package shard

import "fmt"

// Version identifies the partition function below. Change it whenever the
// function changes, so nodes running different code refuse each other.
//
// Version 2: chunks are cut evenly (their lengths differ by at most one
// float) and their number is a multiple of the server count, so every shard
// owns a share of the vector. Version 1 cut fixed-size chunks and left
// shards without any when the vector had fewer chunks than servers.
const Version uint32 = 2

// DefaultChunkBytes is the default largest chunk: about 1 MiB of float32.
const DefaultChunkBytes = 1 << 20

// MaxChunks bounds how many chunks a plan cuts the vector into: what every
// node keeps per chunk stays small, and a plan received from a lying peer
// cannot make a node walk 2⁴⁰ chunks.
const MaxChunks = 1 << 20

// MaxChunksPerShard bounds the chunks one shard owns: a shard's Info lists
// them, and a push's header lists its ranges beside a full piece of
// gradient (wire.MaxMessageBytes leaves 64 KiB for the fields around a
// piece), so a plan that cuts a shard's share finer than this would be
// accepted and then refused by every message that names its chunks
// (--chunk-bytes 4 on the default model: ResourceExhausted at the first
// call). A range is at most 16 bytes on the wire: 4,096 of them fit.
const MaxChunksPerShard = 4096

// Range is the half-open range [Off, Off+Len) of the vector, in floats.
type Range struct {
	Off, Len int
}

// End is Off+Len.
func (r Range) End() int { return r.Off + r.Len }

func (r Range) String() string { return fmt.Sprintf("[%d,%d)", r.Off, r.End()) }

// Plan is the partition of a vector of VectorLen floats over Servers shards
// in chunks of at most ChunkFloats.
type Plan struct {
	VectorLen int
	Servers   int
	// ChunkFloats is the largest chunk; the chunks themselves are cut
	// evenly (see NumChunks).
	ChunkFloats int
}

// New returns the plan for a vector of n floats over servers shards with
// chunks of at most chunkBytes bytes (rounded down to whole floats, at least
// one). Every shard owns a share, so n must be at least servers.
func New(n, servers, chunkBytes int) (Plan, error) {
	switch {
	case n <= 0:
		return Plan{}, fmt.Errorf("shard plan: vector length %d, want > 0", n)
	case servers <= 0:
		return Plan{}, fmt.Errorf("shard plan: %d servers, want >= 1", servers)
	case chunkBytes < 4:
		return Plan{}, fmt.Errorf("shard plan: chunk of %d bytes, want >= 4 (one float32)", chunkBytes)
	case n < servers:
		return Plan{}, fmt.Errorf("shard plan: a vector of %d floats cannot give each of %d servers a share; use at most %d servers", n, servers, n)
	case servers > MaxChunks:
		return Plan{}, fmt.Errorf("shard plan: %d servers, want at most %d", servers, MaxChunks)
	}
	p := Plan{VectorLen: n, Servers: servers, ChunkFloats: chunkBytes / 4}
	if k := p.NumChunks(); k > MaxChunks {
		return Plan{}, fmt.Errorf("shard plan: chunks of %d bytes cut a vector of %d floats into %d chunks, more than %d: use larger chunks (at least %d bytes)",
			chunkBytes, n, k, MaxChunks, 4*((n+MaxChunks-1)/MaxChunks))
	}
	if per := p.NumChunks() / servers; per > MaxChunksPerShard {
		most := servers * MaxChunksPerShard
		return Plan{}, fmt.Errorf("shard plan: chunks of %d bytes give each of %d server(s) %d chunks of a vector of %d floats, more than the %d a shard's messages can list: use larger chunks (at least %d bytes)",
			chunkBytes, servers, per, n, MaxChunksPerShard, 4*((n+most-1)/most))
	}
	return p, nil
}

// Validate checks a plan received from elsewhere.
func (p Plan) Validate() error {
	_, err := New(p.VectorLen, p.Servers, p.ChunkFloats*4)
	return err
}

// NumChunks is the number of chunks the vector is cut into: the fewest
// chunks of at most ChunkFloats, rounded up to a multiple of Servers so
// that every shard owns the same number, and never more than one chunk per
// float.
func (p Plan) NumChunks() int {
	k := max((p.VectorLen+p.ChunkFloats-1)/p.ChunkFloats, p.Servers)
	k = (k + p.Servers - 1) / p.Servers * p.Servers
	return min(k, p.VectorLen)
}

// split returns the short chunk length q and how many chunks, the first
// ones, are one float longer.
func (p Plan) split() (k, q, long int) {
	k = p.NumChunks()
	return k, p.VectorLen / k, p.VectorLen % k
}

// Chunk returns the range of chunk i.
func (p Plan) Chunk(i int) Range {
	_, q, long := p.split()
	if i < long {
		return Range{Off: i * (q + 1), Len: q + 1}
	}
	return Range{Off: long*(q+1) + (i-long)*q, Len: q}
}

// ChunkAt returns the index of the chunk holding float index off.
func (p Plan) ChunkAt(off int) int {
	_, q, long := p.split()
	if head := long * (q + 1); off >= head {
		return long + (off-head)/q
	}
	return off / (q + 1)
}

// IsBoundary reports whether off is where a chunk starts, or the end of
// the vector.
func (p Plan) IsBoundary(off int) bool {
	if off == p.VectorLen {
		return true
	}
	return off >= 0 && off < p.VectorLen && p.Chunk(p.ChunkAt(off)).Off == off
}

// Owner returns the shard that owns chunk i.
func (p Plan) Owner(i int) int { return i % p.Servers }

// Ranges returns the chunks shard s owns, in vector order.
func (p Plan) Ranges(s int) []Range {
	var rs []Range
	for i := s; i < p.NumChunks(); i += p.Servers {
		rs = append(rs, p.Chunk(i))
	}
	return rs
}

// Floats returns how many floats shard s owns.
func (p Plan) Floats(s int) int {
	n := 0
	for _, r := range p.Ranges(s) {
		n += r.Len
	}
	return n
}
