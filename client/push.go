package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/wire"
)

// Push sends each shard its part of args.Grads.
func (c *Client) Push(ctx context.Context, args PushArgs) (PushResult, error) {
	if err := c.checkPush(args); err != nil {
		return PushResult{}, err
	}
	replies := make([]*pb.PushResponse, len(c.stubs))
	err := c.fanOut(func(s int) error {
		ranges := c.spanRanges(s, args.Span)
		if args.Skips(s) || len(ranges) == 0 {
			return nil
		}
		return c.asWorker(ctx, args.WorkerID, s, func(session []byte) error {
			return c.retry(ctx, "push to "+c.addrs[s], func(ctx context.Context) error {
				var err error
				replies[s], err = c.pushShard(ctx, s, ranges, args, session)
				return err
			})
		})
	})
	return pushResult(replies), err
}

// checkPush checks a push's lengths against the plan.
func (c *Client) checkPush(args PushArgs) error {
	if len(args.Grads) != c.info.Plan.VectorLen {
		return fmt.Errorf("client: push of %d floats, the vector has %d", len(args.Grads), c.info.Plan.VectorLen)
	}
	if args.Clocks != nil && len(args.Clocks) != len(c.stubs) {
		return fmt.Errorf("client: push with %d clocks, want one per shard (%d)", len(args.Clocks), len(c.stubs))
	}
	if args.Skip != nil && len(args.Skip) != len(c.stubs) {
		return fmt.Errorf("client: push skipping %d shards' worth, want one flag per shard (%d)", len(args.Skip), len(c.stubs))
	}
	if sp := args.Span; sp != (Span{}) {
		p := c.info.Plan
		if sp.Off < 0 || sp.End > p.VectorLen || sp.End <= sp.Off || !p.IsBoundary(sp.Off) || !p.IsBoundary(sp.End) {
			return fmt.Errorf("client: push of the span [%d,%d): want a non-empty part of the vector's %d floats from one chunk boundary to another (chunk %d is %v)",
				sp.Off, sp.End, p.VectorLen, p.ChunkAt(min(max(sp.Off, 0), p.VectorLen-1)), p.Chunk(p.ChunkAt(min(max(sp.Off, 0), p.VectorLen-1))))
		}
	}
	return nil
}

// spanRanges is what a call covering sp sends shard s: its whole share
// for the zero Span, else its chunks inside sp, merged where adjacent
// (none: the call leaves s out).
func (c *Client) spanRanges(s int, sp Span) []shard.Range {
	if sp == (Span{}) {
		return c.push[s]
	}
	var rs []shard.Range
	for _, r := range c.info.Plan.Ranges(s) {
		if r.Off < sp.Off || r.End() > sp.End {
			continue
		}
		if n := len(rs); n > 0 && rs[n-1].End() == r.Off {
			rs[n-1].Len += r.Len
			continue
		}
		rs = append(rs, r)
	}
	return rs
}

// pushResult sums up the shards' replies to a push (nil: no reply).
func pushResult(replies []*pb.PushResponse) PushResult {
	res := PushResult{Clocks: make(Clocks, len(replies)), Staleness: make([]int64, len(replies))}
	for s, r := range replies {
		if r == nil {
			continue
		}
		res.Clocks[s], res.Staleness[s] = r.Clock, r.Staleness
		if r.Duplicate {
			res.Duplicates++
		}
		if r.Dropped {
			res.Dropped++
		}
	}
	return res
}

func (c *Client) pushShard(ctx context.Context, s int, ranges []shard.Range, args PushArgs, session []byte) (*pb.PushResponse, error) {
	stream, err := c.pushStubs[s].Push(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.sendGrads(stream, ranges, c.header(s, ranges, args, session), args.Grads); err != nil {
		return nil, err
	}
	return stream.CloseAndRecv()
}

// header opens shard s's part of a push, of ranges, carrying the
// worker's session there.
func (c *Client) header(s int, ranges []shard.Range, args PushArgs, session []byte) *pb.PushHeader {
	h := &pb.PushHeader{WorkerId: args.WorkerID, Step: args.Step, PlanVersion: shard.Version, Encoding: c.opts.encoding, Session: session}
	if args.Clocks != nil {
		h.Clock = args.Clocks[s]
	}
	for _, r := range ranges {
		h.Ranges = append(h.Ranges, &pb.Range{Offset: int64(r.Off), Length: int64(r.Len)})
	}
	return h
}

// sendGrads sends the ranges of the gradient grads in pieces, the first
// with h. Each piece is encoded once, into a pooled buffer that the
// transport frees once it has written it, so the caller may change grads
// as soon as this returns.
func (c *Client) sendGrads(stream grpc.ClientStream, ranges []shard.Range, h *pb.PushHeader, grads []float32) error {
	// An encoding this build does not know goes as float32 under its own
	// name, and the server refuses it (the server says which it knows).
	enc, _ := c.opts.encoding.Wire()
	size := enc.Size()
	pieceFloats := wire.MaxPieceBytes / size // Int8: a multiple of wire.Int8Block
	pool := pb.Pool
	msg := &pb.PushPiece{Header: h}
	for _, r := range ranges {
		for off := r.Off; off < r.End(); off += pieceFloats {
			end := min(off+pieceFloats, r.End())
			buf := pool.Get(size * (end - off))
			if enc == wire.Int8 {
				// Each piece's blocks start at its first value, so the
				// scales travel with the values they scale.
				msg.Scales = make([]float32, wire.Int8Scales(end-off))
				wire.PutInt8(*buf, msg.Scales, grads[off:end])
			} else {
				enc.Put(*buf, grads[off:end])
			}
			if err := stream.SendMsg(&pb.TensorOut{Msg: msg, Field: pushGradsField, Payload: mem.NewBuffer(buf, pool)}); err != nil {
				// The real error comes with the reply.
				if errors.Is(err, io.EOF) {
					if rerr := stream.RecvMsg(new(pb.PullPiece)); rerr != nil && !errors.Is(rerr, io.EOF) {
						return rerr
					}
					return status.Error(codes.Internal, "the server ended the push before it was sent, without an error")
				}
				return err
			}
			msg = &pb.PushPiece{}
		}
	}
	return nil
}
