package worker

import (
	"context"

	"github.com/shoalml/shoal/pscall"
)

// ParameterServers is what the parameter-server strategies (Async, Sync)
// need from the servers; package worker/psclient adapts Shoal's client to
// it. A strategy calls it from the worker's goroutine, except that with
// AsyncConfig.Overlap a Push runs on a goroutine of its own while Pull
// runs: an implementation must allow that. Every method may block on the
// network and returns ctx's error once ctx is done.
type ParameterServers interface {
	// Pull reads the weights args.WorkerID needs into dst (the whole
	// vector), waiting on each shard as args.Steps say, and returns each
	// shard's clock. It writes dst only until it returns.
	Pull(ctx context.Context, args PullArgs, dst []float32) (clocks []int64, err error)
	// Push sends each shard its part of args.Grads. It does not keep
	// args.Grads after it returns.
	Push(ctx context.Context, args PushArgs) (PushResult, error)
	// PushPull is a Push and then, in the same round trip, a Pull of the
	// weights after it into args.Dst, whether or not args.Pull is set.
	PushPull(ctx context.Context, args PushPullArgs) (PushPullResult, error)
}

// The arguments and results of ParameterServers' calls, defined once in
// package pscall for the strategies here and for the client library.
type (
	// PullArgs say whose pull it is and what it waits for.
	PullArgs = pscall.PullArgs
	// PushArgs is one gradient push.
	PushArgs = pscall.PushArgs
	// PushResult is what the shards did with a push.
	PushResult = pscall.PushResult
	// PushPullArgs is a push and the pull after it.
	PushPullArgs = pscall.PushPullArgs
	// PushPullResult is what the shards did with the push, and the clocks
	// of the values pulled into Dst.
	PushPullResult = pscall.PushPullResult
)
