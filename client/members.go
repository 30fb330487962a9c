package client

import (
	"context"
	"fmt"
	"slices"

	pb "github.com/shoalml/shoal/proto/shoalpb"
)

// JoinWorker tells every shard that worker starts (or starts again after
// it died) and returns the step it begins at, the same on every shard
// (ps.Server.Join says how each mode chooses it). Shards may first name
// different steps (a push that reached one and not yet another): it asks
// again, not before the latest named, until they agree. In sync mode the
// worker's first pull then waits for that step. Each shard binds worker
// to this Client with a session, which the Client keeps and sends with
// the worker's pushes and pulls; a join elsewhere (a restarted worker,
// another client) ends it.
func (c *Client) JoinWorker(ctx context.Context, worker int64, opts ...JoinOption) (int64, error) {
	o := joinOptions{pushEvery: 1}
	for _, f := range opts {
		f(&o)
	}
	steps := make([]int64, len(c.stubs))
	var at int64
	for round := 1; ; round++ {
		err := c.fanOut(func(s int) error {
			var err error
			steps[s], err = c.joinShard(ctx, worker, s, at, o.pushEvery, false)
			return err
		})
		if err != nil {
			return 0, err
		}
		if slices.Min(steps) == slices.Max(steps) {
			return steps[0], nil
		}
		if round == maxJoinRounds {
			return 0, fmt.Errorf("client: join worker %d: after %d rounds the shards still name different steps %v", worker, round, steps)
		}
		at = slices.Max(steps)
	}
}

// NotMember reports whether err says that a shard took this worker out
// of its live set (sync and SSP): membership declared it dead, for example
// while it was cut off from the network, and the steps went on without
// it. Such a worker is alive, and joins again: JoinWorker, then on from
// the step it names. It looks through wrapped and joined errors, since
// any one shard's answer is enough.
func NotMember(err error) bool { return hasReason(err, pb.ReasonNotMember) }

// maxJoinRounds bounds JoinWorker's rounds: each moves the step forward,
// and shards move on only as steps complete, so two or three suffice.
const maxJoinRounds = 16
