// Package psclient lets the parameter-server strategies of package worker
// (worker.Async, worker.Sync) train through Shoal's client library: New
// turns a *client.Client into a worker.ParameterServers. It is the one
// place that knows both packages, so that worker does not depend on the
// client's types and client does not know worker.
//
// Concurrency and ownership are the Client's: calls may run concurrently,
// and buffers are the caller's once a call returns.
//
// ExampleNew (example_test.go) makes the Downpour strategy of a worker
// over a Client; worker's Example trains with it.
package psclient
