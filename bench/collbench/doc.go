// Package collbench measures Shoal's collectives the way nccl-tests does:
// per message size, the time of one call (the slowest rank's), algbw =
// bytes/time, busbw = algbw × BusFactor, and whether the result of a call
// on known inputs was right on every rank. `shoal bench allreduce` runs it
// in one process per rank; its tests run it over an in-memory group.
//
// Concurrency: Measure runs on one Communicator, which serves one call at
// a time; every rank of the group calls it with the same arguments. Case's
// buffers belong to the closures it returns.
//
// TestMeasure (collbench_test.go) runs every collective over three
// in-memory ranks.
package collbench
