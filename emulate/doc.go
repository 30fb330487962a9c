// Package emulate trains a model as N parameter-server workers would, in
// one process, to show what staleness does to accuracy at worker counts
// one machine cannot run: every gradient is computed on the weights the
// worker would have read, in the order a simulated job (package sim)
// says the shard applied the pushes and answered the reads.
//
// Nothing about training is imitated. The N workers are worker.Worker
// values with their real strategies (worker.Async for async and SSP,
// worker.Sync), each with its own shard of the data (rank w of N), and
// the shard is a real ps.Server holding the whole vector with the job's
// optimizer. Only the transport is replaced: each worker's
// ParameterServers waits for its turn in the schedule, then calls the
// server directly. A worker computes its gradient between its read and
// its push, concurrently with the others, so the order of every read
// and push, and with it each push's staleness, is the simulated one.
//
// The schedule is shard 0's (sim.Config.Trace): with several shards the
// emulation has all the vector follow shard 0's order. Sync with backup
// workers is not emulated: its late workers skip steps the schedule
// cannot know of.
//
// Config.Schedule replaces the simulated schedule with a real run's:
// Replay rebuilds shard 0's order of reads and pushes from the workers'
// recorded pushes (shoal train --record-pushes), and with one shard the
// emulation is then the recorded run, push for push.
//
// Config.LocalSteps emulates low-communication training (DiLoCo): each
// worker is a worker.Local over its strategy, taking H steps with an
// inner optimizer of its own, and the shard applies the pseudo-gradients
// with the outer optimizer; the schedule is the simulated job's with H
// local steps (one read and one push a round), a replay cannot give it.
//
// Run evaluates the server's weights on the test set every EvalEvery
// updates, giving accuracy against the samples trained on.
package emulate
