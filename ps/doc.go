// Package ps is the core of a parameter-server shard: the values of the
// ranges of the flat parameter vector it owns, their optimizer state, the
// consistency mode, deduplication of pushes and the shard's clock. It does no
// network I/O; the gRPC adapter in package rpc drives it.
//
// Concurrency: a Server is safe for concurrent use. Pushes are applied one at
// a time (each is a short optimizer step over the shard's floats); pulls read
// under a shared lock and may run alongside each other.
//
// Ownership: Push does not retain the caller's slices; Read copies values
// into the caller's buffer.
//
//	s, err := ps.New(ps.Config{Plan: plan, Layout: layout, Optimizer: optim.DefaultConfig()}, initial)
//	clock, err := s.Read(shard.Range{Off: 0, Len: n}, dst)
//	res, err := s.Push(ps.Push{WorkerID: 1, Step: 1, Clock: clock, Ranges: rs, Grads: g})
package ps
