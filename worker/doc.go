// Package worker is Shoal's training loop. A worker takes a batch from its
// shard of the data, runs forward and backward into the gradient vector,
// and hands the step to its Strategy, which decides how workers agree on
// the weights: through parameter servers (Async: Downpour SGD and SSP;
// Sync), which it reaches through ParameterServers (package
// worker/psclient adapts Shoal's client to it), or by ring allreduce
// (Ring).
//
// Concurrency: a Worker runs on the caller's goroutine (plus its data
// loader's prefetching goroutine, which Run stops before it returns). The
// Progress callback is called on that goroutine.
//
// Ownership: the Worker owns its parameter and gradient vectors; a
// Strategy must not keep the slices it is handed after a call returns.
//
//	cl, _ := client.Dial(ctx, addrs)
//	s, _ := worker.NewAsync(psclient.New(cl), n, cl.Info().Plan.Servers, worker.AsyncConfig{WorkerID: rank})
//	w, _ := worker.New(cfg, model, train, s)
//	res, err := w.Run(ctx)
package worker
