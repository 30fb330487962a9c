// Package worker is Shoal's training loop. A worker takes a batch from its
// shard of the data, runs forward and backward into the gradient vector,
// and hands the step to its Strategy, which decides how workers agree on
// the weights: through parameter servers (Async: Downpour SGD and SSP;
// Sync), which it reaches through ParameterServers (package
// worker/psclient adapts Shoal's client to it), or by ring allreduce
// (Ring). Local wraps a parameter-server strategy for low-communication
// training (DiLoCo): H steps of an inner optimizer on the worker's own
// weights, then the pseudo-gradient through the wrapped strategy.
// Streaming is Local in fragments (Streaming DiLoCo): one fragment
// exchanged every H/F steps through FragmentServers, in flight while the
// worker trains on, then merged into its weights. HostGroup is
// per-host aggregation: the ParameterServers of every worker of a host,
// which average their gradients over a collective while the host's first
// alone talks to the servers (which count hosts). EarlyStop ends a run at a target test accuracy.
//
// Strategies (async.go, sync.go, allreduce.go, local.go) implement Strategy and, as
// they need, the optional capabilities a Worker looks for: WaitReporter,
// LastStepper, Starter, Reducer, Overlapper, HostSyncer (a Ring whose
// weights stay on the model's device: RingConfig.Resident). They are exported, so a
// strategy can be written outside this package.
//
// Concurrency: a Worker runs on the caller's goroutine, which also calls
// Progress, OnStep and Eval. Its goroutines all have an owner that waits
// for them: the data loader's prefetching goroutine (Close stops it), an
// Async strategy's overlapped push (its next call waits for it), a Ring's
// reducer of the step's buckets (Apply waits for it). Run calls the
// strategy's Finish on every return, also after an error, so nothing of
// the run is still under way when Run returns.
//
// Ownership: the Worker owns its parameter and gradient vectors; a
// Strategy must not keep the slices it is handed after a call returns (an
// overlapped push sends a copy). In a resident ring run the model keeps
// the parameter vector from the run's first Params to its Finish, to copy
// the device's weights into it.
//
// Example (example_test.go) trains through two parameter-server shards.
package worker
