package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/shard"
)

// splitLanes splits a shard's chunks into at most k lanes of consecutive
// chunks (as many chunks each, give or take one), each lane's chunks
// merged where adjacent. Fewer than two lanes: nil.
func splitLanes(chunks []shard.Range, k int) [][]shard.Range {
	k = min(k, len(chunks))
	if k < 2 {
		return nil
	}
	lanes := make([][]shard.Range, k)
	at := 0
	for l := range k {
		n := len(chunks) / k
		if l < len(chunks)%k {
			n++
		}
		for _, r := range chunks[at : at+n] {
			if m := len(lanes[l]); m > 0 && lanes[l][m-1].End() == r.Off {
				lanes[l][m-1].Len += r.Len
				continue
			}
			lanes[l] = append(lanes[l], r)
		}
		at += n
	}
	return lanes
}

// PushPull sends each shard its part of args.Grads and, with args.Pull,
// reads the shard's values after the push into args.Dst, one round trip
// per shard. A call that fails with Unavailable is tried again; servers
// apply each (WorkerID, Step) at most once, so a retry after a lost reply
// only pulls.
func (c *Client) PushPull(ctx context.Context, args PushPullArgs) (PushPullResult, error) {
	if err := c.checkPush(args.PushArgs); err != nil {
		return PushPullResult{}, err
	}
	n := c.info.Plan.VectorLen
	switch {
	case args.Pull && len(args.Dst) != n:
		return PushPullResult{}, fmt.Errorf("client: pull into %d floats, the vector has %d", len(args.Dst), n)
	case args.Pull && args.Steps != nil && len(args.Steps) != len(c.stubs):
		return PushPullResult{}, fmt.Errorf("client: pull with %d steps, want one per shard (%d)", len(args.Steps), len(c.stubs))
	}
	var res PushPullResult
	if args.Pull {
		res.PullClocks = make(Clocks, len(c.stubs))
	}
	replies := make([]*pb.PushResponse, len(c.stubs))
	held := make([]time.Duration, len(c.stubs))
	err := c.fanOut(func(s int) error {
		ranges := c.spanRanges(s, args.Span)
		if args.Skips(s) || len(ranges) == 0 {
			return nil
		}
		var dst []float32
		if args.Pull {
			dst = args.Dst
		}
		// A span's push-pull reads back only its ranges, and goes over
		// one stream (lanes split the whole share).
		var only []shard.Range
		if args.Span != (Span{}) {
			only = ranges
		}
		return c.asWorker(ctx, args.WorkerID, s, func(session []byte) error {
			h := c.header(s, ranges, args.PushArgs, session)
			h.Pull = args.Pull
			if args.Pull && args.Steps != nil {
				h.PullStep = args.Steps[s]
			}
			return c.retry(ctx, "push-pull with "+c.addrs[s], func(ctx context.Context) error {
				var clock int64
				var err error
				if c.lanes[s] != nil && only == nil {
					clock, replies[s], err = c.pushPullLanes(ctx, s, h, args.Grads, dst, &held[s])
				} else {
					clock, replies[s], err = c.pushPullStream(ctx, c.pushStubs[s], s, only, h, args.Grads, dst, &held[s])
				}
				if err == nil && args.Pull {
					res.PullClocks[s] = clock
				}
				return err
			})
		})
	})
	if err != nil {
		return PushPullResult{}, err
	}
	res.PushResult = pushResult(replies)
	if args.Waited != nil {
		*args.Waited = 0
		for _, h := range held {
			*args.Waited = max(*args.Waited, h)
		}
	}
	return res, nil
}

// pushPullStream is one attempt at a push-pull of shard s's ranges (nil:
// its whole share) over one stream of stub, with header h.
func (c *Client) pushPullStream(ctx context.Context, stub pb.ParameterServerClient, s int, ranges []shard.Range, h *pb.PushHeader, grads, dst []float32, held *time.Duration) (int64, *pb.PushResponse, error) {
	stream, err := stub.PushPull(ctx)
	if err != nil {
		return 0, nil, err
	}
	send := ranges
	if send == nil {
		send = c.push[s]
	}
	if err := c.sendGrads(stream, send, h, grads); err != nil {
		return 0, nil, err
	}
	if err := stream.CloseSend(); err != nil {
		return 0, nil, err
	}
	return c.recvRanges(stream, s, ranges, dst, held, true)
}

// pushPullLanes is one attempt at shard s's part of a PushPull over its
// lanes, all at once, each on its own connection. The first lane to fail
// ends the others; the shard applies the push only if every lane arrives.
func (c *Client) pushPullLanes(ctx context.Context, s int, h *pb.PushHeader, grads, dst []float32, held *time.Duration) (int64, *pb.PushResponse, error) {
	lanes := c.lanes[s]
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	attempt := rand.Uint64()
	errs := make([]error, len(lanes))
	clocks := make([]int64, len(lanes))
	replies := make([]*pb.PushResponse, len(lanes))
	helds := make([]time.Duration, len(lanes))
	var wg sync.WaitGroup
	for l, ranges := range lanes {
		wg.Go(func() {
			hl := &pb.PushHeader{WorkerId: h.WorkerId, Step: h.Step, Clock: h.Clock, PlanVersion: h.PlanVersion, Encoding: h.Encoding,
				Pull: h.Pull, PullStep: h.PullStep, Lane: uint32(l), Lanes: uint32(len(lanes)), Attempt: attempt, Session: h.Session}
			for _, r := range ranges {
				hl.Ranges = append(hl.Ranges, &pb.Range{Offset: int64(r.Off), Length: int64(r.Len)})
			}
			stub := c.pushStubs[s]
			if l > 0 {
				stub = c.laneStubs[s][l-1]
			}
			clocks[l], replies[l], errs[l] = c.pushPullStream(ctx, stub, s, ranges, hl, grads, dst, &helds[l])
			if errs[l] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	// The error that says why: a lane's own before one that only
	// reports being ended with the others.
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if first == nil || status.Code(first) == codes.Canceled && status.Code(err) != codes.Canceled {
			first = err
		}
	}
	if first != nil {
		return 0, nil, first
	}
	for l := range lanes {
		*held = max(*held, helds[l])
		if clocks[l] != clocks[0] {
			return 0, nil, status.Errorf(codes.Internal, "server %s sent lane 0 values at clock %d and lane %d at clock %d: want one view", c.addrs[s], clocks[0], l, clocks[l])
		}
	}
	return clocks[0], replies[0], nil
}
