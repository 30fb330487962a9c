// Package client is the Go client library of Shoal's parameter servers.
//
// A Client talks to every shard of a partition plan: Pull fans out to all
// shards at once and decodes each streamed piece straight into the caller's
// buffer; Push splits the caller's gradient by the plan and streams each
// shard its chunks; PushPull does a worker's whole step in one round trip
// per shard, the gradient up and the weights after it back (what the
// worker strategies use). Every call has a deadline (WithCallTimeout, unless the
// context has an earlier one) and calls that fail with Unavailable are
// retried with exponential backoff for WithRetryFor's time (60 s); pushes
// are safe to retry because a server applies (worker, step) at most once.
//
// JoinWorker binds a worker id to the Client on every shard: each returns
// a session, which the Client keeps and sends with that worker's pushes
// and pulls (session.go). Where a shard holds none (it restarted), the
// Client binds the worker there again and repeats the call; where it
// holds another client's, the call fails with PermissionDenied (NotYours).
//
// Files: client.go (Dial, the handshake, shard addresses), options.go,
// pull.go, push.go, pushpull.go (with the lanes of WithLanes), retry.go,
// members.go (JoinWorker), session.go, stall.go. The arguments and results of the
// calls are package pscall's, shared with package worker.
//
// A Client is safe for concurrent use by several goroutines. It does not
// retain the caller's buffers after a call returns.
//
// Example (example_test.go) pulls, pushes and push-pulls against two
// shards.
package client
