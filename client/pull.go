package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/wire"
)

// Pull reads the whole vector into dst (len Plan.VectorLen) as it is now
// and returns the clock of each shard.
func (c *Client) Pull(ctx context.Context, dst []float32) (Clocks, error) {
	return c.PullFor(ctx, PullArgs{WorkerID: -1}, dst)
}

// PullFor reads the weights args.WorkerID needs into dst (len
// Plan.VectorLen), waiting as args.Steps say, and returns each shard's
// clock. A pull as a worker (WorkerID >= 0) carries its session, as a
// push does (session.go).
func (c *Client) PullFor(ctx context.Context, args PullArgs, dst []float32) (Clocks, error) {
	if len(dst) != c.info.Plan.VectorLen {
		return nil, fmt.Errorf("client: pull into %d floats, the vector has %d", len(dst), c.info.Plan.VectorLen)
	}
	if args.Steps != nil && len(args.Steps) != len(c.stubs) {
		return nil, fmt.Errorf("client: pull with %d steps, want one per shard (%d)", len(args.Steps), len(c.stubs))
	}
	clocks := make(Clocks, len(c.stubs))
	held := make([]time.Duration, len(c.stubs))
	err := c.fanOut(func(s int) error {
		return c.asWorker(ctx, args.WorkerID, s, func(session []byte) error {
			req := &pb.PullRequest{PlanVersion: shard.Version, WorkerId: args.WorkerID, Session: session}
			if args.Steps != nil {
				req.Step = args.Steps[s]
			}
			return c.retry(ctx, "pull from "+c.addrs[s], func(ctx context.Context) error {
				var err error
				clocks[s], err = c.pullShard(ctx, s, req, dst, &held[s])
				return err
			})
		})
	})
	if err != nil {
		return nil, err
	}
	if args.Waited != nil {
		*args.Waited = 0
		for _, h := range held {
			*args.Waited = max(*args.Waited, h)
		}
	}
	return clocks, nil
}

func (c *Client) pullShard(ctx context.Context, s int, req *pb.PullRequest, dst []float32, held *time.Duration) (int64, error) {
	stream, err := c.stubs[s].Pull(ctx, req)
	if err != nil {
		return 0, err
	}
	clock, _, err := c.recvValues(stream, s, dst, held, false)
	return clock, err
}

// Field numbers of the tensor payloads (see ps.proto).
const (
	pullValuesField = 2 // PullPiece.values
	pushGradsField  = 2 // PushPiece.grads
)

// recvValues reads the pieces of a pull from shard s straight into dst,
// checking that they are the shard's whole share. It returns the clock of
// the values and, for a PushPull (pushed), the push's result that the
// first piece carries. dst nil: no values are expected.
func (c *Client) recvValues(stream grpc.ClientStream, s int, dst []float32, held *time.Duration, pushed bool) (int64, *pb.PushResponse, error) {
	return c.recvRanges(stream, s, nil, dst, held, pushed)
}

// recvRanges is recvValues for a lane of a push-pull: the values of
// ranges alone (nil: the shard's whole share). A reply must be one view:
// every piece at one clock, each inside one of the ranges (or one owned
// chunk), no float twice, every float once. A piece is checked before it
// is written, so a lying shard cannot write into another shard's part of
// dst; on an error, its own part is left partly written.
func (c *Client) recvRanges(stream grpc.ClientStream, s int, ranges []shard.Range, dst []float32, held *time.Duration, pushed bool) (int64, *pb.PushResponse, error) {
	plan := c.info.Plan
	want := 0
	if dst != nil {
		want = plan.Floats(s)
		if ranges != nil {
			want = 0
			for _, r := range ranges {
				want += r.Len
			}
		}
	}
	inRanges := func(off, k int) bool {
		if ranges == nil {
			// Chunks next to each other belong to different shards,
			// unless there is one.
			first, last := plan.ChunkAt(off), plan.ChunkAt(off+k-1)
			return plan.Owner(first) == s && (first == last || plan.Servers == 1)
		}
		for _, r := range ranges {
			if off >= r.Off && off+k <= r.End() {
				return true
			}
		}
		return false
	}
	// Where the values went: a piece per MaxPieceBytes of each owned chunk,
	// room for them all made once.
	pieces := make([]shard.Range, 0, plan.NumChunks()/plan.Servers+want/(wire.MaxPieceBytes/4)+1)
	var clock int64
	var res *pb.PushResponse
	for i := 0; ; i++ {
		p := &pb.PullPiece{}
		bad := ""
		in := &pb.TensorIn{Msg: p, Field: pullValuesField, Place: func(n int) pb.Sink {
			off, k := int(p.Offset), n/4
			switch {
			case n == 0:
				return pb.Sink{} // an empty piece (a push-pull's reply without values)
			case dst == nil:
				bad = fmt.Sprintf("server sent %d bytes of values; none were asked for", n)
			case n%4 != 0 || p.Offset < 0 || off > len(dst)-k || k == 0 || !inRanges(off, k):
				bad = fmt.Sprintf("server sent a piece at offset %d of %d bytes, outside its chunks of a vector of %d floats", p.Offset, n, len(dst))
			default:
				return pb.Sink{Floats: dst[off : off+k]}
			}
			return pb.Sink{}
		}}
		err := stream.RecvMsg(in)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, nil, err
		}
		if bad != "" {
			return 0, nil, status.Error(codes.Internal, bad)
		}
		if i == 0 {
			if held != nil {
				*held = time.Duration(p.HeldMicros) * time.Microsecond
			}
			res, clock = p.Push, p.Clock
		} else if p.Clock != clock {
			return 0, nil, status.Errorf(codes.Internal, "server sent values at clocks %d and %d in one reply; want one view of its share", clock, p.Clock)
		}
		if in.Len > 0 {
			pieces = append(pieces, shard.Range{Off: int(p.Offset), Len: in.Len / 4})
		}
	}
	if pushed && res == nil {
		return 0, nil, status.Error(codes.Internal, "server's reply to a push-pull carries no push result")
	}
	// Each piece lies in the share: with none twice, the share is whole
	// when their floats add up to it.
	slices.SortFunc(pieces, func(a, b shard.Range) int { return cmp.Compare(a.Off, b.Off) })
	got := 0
	for i, r := range pieces {
		if i > 0 && r.Off < pieces[i-1].End() {
			return 0, nil, status.Errorf(codes.Internal, "server sent floats [%d,%d) twice", r.Off, min(r.End(), pieces[i-1].End()))
		}
		got += r.Len
	}
	if got != want {
		return 0, nil, status.Errorf(codes.Internal, "server sent %d floats, it owns %d", got, want)
	}
	return clock, res, nil
}
