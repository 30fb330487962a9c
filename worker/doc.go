// Package worker is Shoal's training loop. A worker takes a batch from its
// shard of the data, runs forward and backward into the gradient vector,
// and hands the step to its Strategy, which decides how workers agree on
// the weights: through parameter servers (Async, Downpour SGD; sync and SSP
// come next) or, later, ring allreduce.
//
// Concurrency: a Worker runs on the caller's goroutine (plus its data
// loader's prefetching goroutine, which Run stops before it returns). The
// Progress callback is called on that goroutine.
//
// Ownership: the Worker owns its parameter and gradient vectors; a
// Strategy must not keep the slices it is handed after a call returns.
//
//	ps, _ := client.Dial(ctx, addrs)
//	s, _ := worker.NewAsync(ps, worker.AsyncConfig{WorkerID: rank, PushEvery: 1, FetchEvery: 1})
//	w, _ := worker.New(cfg, model, train, s)
//	res, err := w.Run(ctx)
package worker
