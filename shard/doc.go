// Package shard computes the partition plan of a flat parameter vector over
// parameter-server shards: which ranges of the vector each server owns.
//
// The plan is a pure function of (vector length, number of servers, chunk
// size) tagged with a Version, so every node computes the same plan without
// asking anyone. The vector is cut into chunks of ChunkFloats (the last one
// may be shorter) and chunk i belongs to server i mod Servers, so the bytes
// per server differ by at most one chunk and a large layer never lands on
// one server alone. The package does no I/O and holds no state; it is safe
// for concurrent use.
//
//	p, err := shard.New(n, 3, shard.DefaultChunkBytes)
//	for _, r := range p.Ranges(1) { … } // the chunks server 1 owns
package shard
