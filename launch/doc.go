// Package launch starts, watches and stops the child processes of a
// training run (`shoal train`, `shoal bench train`, `shoal bench
// allreduce`, `shoal run`): parameter-server shards, workers and ranks,
// each a process of the shoal binary, or under shoal run a program of the
// user's.
//
// Children speak one protocol: JSON Events, one a line, on their stdout
// (Emit writes one), and control lines (Stop) on their stdin (Tell sends
// one, WatchControl reads them in the child). A
// Launcher turns their events and their exits into Messages that wait in a
// mailbox, in order, until its owner takes them (Next, or WaitFor during
// start-up); no message is lost, and every death of a child nobody asked
// to stop is reported once, by name, with the end of its stderr.
//
// A Tally folds a run's worker events into its Result, the one type that
// `shoal train --json` prints and the benchmark harness turns into a
// bench.Record (bench.Record.Fill; what both carry is package record's Run,
// embedded in each, and its types, so launch needs nothing of the
// harness). RunJSON runs
// one command to its end and returns its last JSON line (the harness's
// runs and peers).
//
// RunJob runs a whole local job from a JobConfig, as `shoal train` does:
// servers started one after the other, then workers (a ring's rank 0
// first, at its rendezvous), their progress on a Board, their events in a
// Tally, a server killed from outside restarted on its address within
// JobConfig.MaxRestarts, a worker killed from outside a membership change
// the others finish after, every child stopped before it returns. What
// each child runs is the caller's (JobConfig.ServerArgs, WorkerArgs), so
// the same job runs any program that speaks the events protocol.
//
// RunProgram runs `shoal run`, Shoal's horovodrun: N copies of any
// program (a Python script) as ranks of one host, after the
// parameter-server shards of its mode, each rank with the environment of
// the contract (EnvRank, EnvMaster, EnvServers, ...). Such a program need
// not speak the protocol: JobConfig.WorkerExe starts it with
// Launcher.StartProgram, which passes its output through prefixed with
// its rank ("[1]<stderr>:"), as horovodrun does, and signals its whole
// process group to stop it. The first rank to fail stops the others
// (JobConfig.FailFast) and its RankError carries the status to exit with.
//
// Concurrency: a Launcher's methods are called by one goroutine, its
// owner (for a job, RunJob's goroutine, which also calls JobConfig's
// hooks); the goroutines that read the children only post to the
// mailbox, and Shutdown waits for them. A Control's goroutine reads until
// Close, which interrupts it and waits for it. Tally and Board are plain
// values with no goroutines.
//
// Example_child (example_test.go) speaks a child's side of the protocol.
package launch
