// Package shard computes the partition plan of a flat parameter vector over
// parameter-server shards: which ranges of the vector each server owns.
//
// The plan is a pure function of (vector length, number of servers, largest
// chunk) tagged with a Version, so every node computes the same plan without
// asking anyone. The vector is cut evenly into the fewest chunks of at most
// ChunkFloats, their number rounded up to a multiple of the server count
// (chunk lengths differ by at most one float), and chunk i belongs to server
// i mod Servers. So every shard owns a share whenever the vector has at least
// as many floats as there are servers (New refuses a plan where it has not),
// the floats per server differ by at most one chunk, and a large layer never
// lands on one server alone. The package does no I/O and holds no state; it
// is safe for concurrent use.
//
// Example (example_test.go) prints the plan of a small vector over three
// servers.
package shard
