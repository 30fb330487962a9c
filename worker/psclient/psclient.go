package psclient

import (
	"context"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/worker"
)

// Servers is a *client.Client as worker.ParameterServers. It is safe for
// concurrent use, as the Client is, and holds no buffer between calls.
type Servers struct{ c *client.Client }

var _ worker.ParameterServers = (*Servers)(nil)

// New returns c as worker.ParameterServers. It does not own c: the caller
// closes it.
func New(c *client.Client) *Servers { return &Servers{c: c} }

// Pull is c.PullFor.
func (s *Servers) Pull(ctx context.Context, args worker.PullArgs, dst []float32) ([]int64, error) {
	return s.c.PullFor(ctx, client.PullArgs{WorkerID: args.WorkerID, Steps: args.Steps, Waited: args.Waited}, dst)
}

// Push is c.Push.
func (s *Servers) Push(ctx context.Context, args worker.PushArgs) (worker.PushResult, error) {
	res, err := s.c.Push(ctx, pushArgs(args))
	return pushResult(res), err
}

// PushPull is c.PushPull with Pull set.
func (s *Servers) PushPull(ctx context.Context, args worker.PushPullArgs) (worker.PushPullResult, error) {
	res, err := s.c.PushPull(ctx, client.PushPullArgs{PushArgs: pushArgs(args.PushArgs), Pull: true, Steps: args.Steps, Dst: args.Dst, Waited: args.Waited})
	return worker.PushPullResult{PushResult: pushResult(res.PushResult), PullClocks: res.PullClocks}, err
}

func pushArgs(a worker.PushArgs) client.PushArgs {
	return client.PushArgs{WorkerID: a.WorkerID, Step: a.Step, Clocks: a.Clocks, Grads: a.Grads, Skip: a.Skip}
}

func pushResult(r client.PushResult) worker.PushResult {
	return worker.PushResult{Dropped: r.Dropped, Staleness: r.Staleness}
}
