package psclient

import (
	"context"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/worker"
)

// Servers is a *client.Client as worker.ParameterServers. It is safe for
// concurrent use, as the Client is, and holds no buffer between calls.
// The arguments and results are the same types on both sides (package
// pscall), so each call passes them through.
type Servers struct{ c *client.Client }

var _ worker.ParameterServers = (*Servers)(nil)

// New returns c as worker.ParameterServers. It does not own c: the caller
// closes it.
func New(c *client.Client) *Servers { return &Servers{c: c} }

// Pull is c.PullFor.
func (s *Servers) Pull(ctx context.Context, args worker.PullArgs, dst []float32) ([]int64, error) {
	return s.c.PullFor(ctx, args, dst)
}

// Push is c.Push.
func (s *Servers) Push(ctx context.Context, args worker.PushArgs) (worker.PushResult, error) {
	return s.c.Push(ctx, args)
}

// PushPull is c.PushPull with Pull set.
func (s *Servers) PushPull(ctx context.Context, args worker.PushPullArgs) (worker.PushPullResult, error) {
	args.Pull = true
	return s.c.PushPull(ctx, args)
}
