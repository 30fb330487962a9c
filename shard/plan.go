package shard

import "fmt"

// Version identifies the partition function below. Change it whenever the
// function changes, so nodes running different code refuse each other.
const Version uint32 = 1

// DefaultChunkBytes is the default chunk size: about 1 MiB of float32.
const DefaultChunkBytes = 1 << 20

// Range is the half-open range [Off, Off+Len) of the vector, in floats.
type Range struct {
	Off, Len int
}

// End is Off+Len.
func (r Range) End() int { return r.Off + r.Len }

func (r Range) String() string { return fmt.Sprintf("[%d,%d)", r.Off, r.End()) }

// Plan is the partition of a vector of VectorLen floats over Servers shards
// in chunks of ChunkFloats.
type Plan struct {
	VectorLen   int
	Servers     int
	ChunkFloats int
}

// New returns the plan for a vector of n floats over servers shards with
// chunks of about chunkBytes bytes (rounded down to whole floats, at least one).
func New(n, servers, chunkBytes int) (Plan, error) {
	switch {
	case n <= 0:
		return Plan{}, fmt.Errorf("shard plan: vector length %d, want > 0", n)
	case servers <= 0:
		return Plan{}, fmt.Errorf("shard plan: %d servers, want >= 1", servers)
	case chunkBytes < 4:
		return Plan{}, fmt.Errorf("shard plan: chunk of %d bytes, want >= 4 (one float32)", chunkBytes)
	}
	return Plan{VectorLen: n, Servers: servers, ChunkFloats: chunkBytes / 4}, nil
}

// Validate checks a plan received from elsewhere.
func (p Plan) Validate() error {
	_, err := New(p.VectorLen, p.Servers, p.ChunkFloats*4)
	return err
}

// NumChunks is the number of chunks the vector is cut into.
func (p Plan) NumChunks() int { return (p.VectorLen + p.ChunkFloats - 1) / p.ChunkFloats }

// Chunk returns the range of chunk i.
func (p Plan) Chunk(i int) Range {
	off := i * p.ChunkFloats
	return Range{Off: off, Len: min(p.ChunkFloats, p.VectorLen-off)}
}

// ChunkAt returns the index of the chunk holding float index off.
func (p Plan) ChunkAt(off int) int { return off / p.ChunkFloats }

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
