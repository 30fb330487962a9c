// Package psclient lets the parameter-server strategies of package worker
// (worker.Async, worker.Sync) train through Shoal's client library: New
// turns a *client.Client into a worker.ParameterServers. It is the one
// place that knows both packages, so that worker does not depend on the
// client's types and client does not know worker.
//
// Concurrency and ownership are the Client's: calls may run concurrently,
// and buffers are the caller's once a call returns.
//
//	cl, err := client.Dial(ctx, addrs)
//	if err != nil { ... }
//	defer cl.Close()
//	s, err := worker.NewAsync(psclient.New(cl), n, cl.Info().Plan.Servers, worker.AsyncConfig{WorkerID: rank})
package psclient
