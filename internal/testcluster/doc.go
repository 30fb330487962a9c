// Package testcluster runs Shoal's servers in-process over bufconn for
// tests, with fault injection: a shard can be made to fail the next calls
// with a code, to fail after doing the work (a lost reply), to stall
// until the caller's deadline, or to lose one worker's push of one step
// before or after applying it (LosePush).
//
// A test calls Start(t, cores...) (StartTCP for real TCP), and the servers
// stop when the test ends; Serve and ServeTCP do the same for code
// without a testing.TB, such as examples, whose caller calls Close. The
// shards' cores come from Cores, CoresFor or CoresWith (NewCores,
// NewCoresFor and NewCoresWith without a testing.TB). Cluster.Await waits
// for a state of the cores without sleeping: it checks its condition
// again whenever a shard answers a call.
//
// A Scenario is a whole run in one process, for fault tests: shards in a
// mode, workers (worker.Worker over client.Client and psclient), and
// membership from an in-memory source (a cluster.Tracker whose views a
// cluster.FollowWorkers per shard applies). Kill(rank) cancels a worker
// and declares it dead; Restart(rank) starts it again where JoinWorker
// says; Stall(rank, step) holds a worker, still a member, before a push.
// Every injection returns once it has taken effect (Kill once every shard
// applied the death), and a Stall says when it is reached, so the tests
// synchronise on them with no sleeps: TestKill in scenario_test.go stalls
// worker 1 before step 3, kills it there and checks what the survivors
// and the shards did. A Scenario needs a testing.TB, so there is no
// Example of it.
//
// Concurrency: a Scenario's methods are called from the test's goroutine;
// a Shard's and a Cluster's from any.
//
// Example (example_test.go) makes a shard fail two calls, which the
// client retries.
package testcluster
