// Package testcluster runs Shoal's servers in-process over bufconn for
// tests, with fault injection: a shard can be made to fail the next calls
// with a code, to fail after doing the work (a lost reply), or to stall
// until the caller's deadline.
//
// A test calls Start(t, cores...) (StartTCP for real TCP), and the servers
// stop when the test ends; Serve and ServeTCP do the same for code
// without a testing.TB, such as examples, whose caller calls Close. The
// shards' cores come from Cores, CoresFor or CoresWith (NewCores,
// NewCoresFor and NewCoresWith without a testing.TB).
//
// Example (example_test.go) makes a shard fail two calls, which the
// client retries.
package testcluster
