package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/optim"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
)

// MaxMessageBytes is the largest message a Shoal server accepts: one piece
// of MaxPieceBytes plus room for the header.
const MaxMessageBytes = pb.MaxPieceBytes + 64<<10

// NewGRPCServer returns a gRPC server with Shoal's message limits, the
// health service (reporting SERVING for "" and every registered service)
// and server reflection. It returns the health server so callers can mark
// the server NOT_SERVING while draining.
func NewGRPCServer(opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	opts = append([]grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageBytes)}, opts...)
	g := grpc.NewServer(opts...)
	h := health.NewServer()
	healthpb.RegisterHealthServer(g, h)
	reflection.Register(g)
	return g, h
}

// psService serves one ps.Server.
type psService struct {
	pb.UnimplementedParameterServerServer
	core *ps.Server
	log  *slog.Logger
	// floats and bytes recycle the per-call buffers of pulls (a snapshot
	// of the shard, the encoded piece) and pushes (the decoded gradient),
	// which would otherwise be about two shard-sizes of garbage per step.
	// gRPC has encoded a message when Send returns, so a piece's bytes
	// are reused for the next piece.
	floats sync.Pool // *[]float32
	bytes  sync.Pool // *[]byte
}

func (s *psService) getFloats(n int) *[]float32 {
	p, _ := s.floats.Get().(*[]float32)
	if p == nil || cap(*p) < n {
		b := make([]float32, n)
		return &b
	}
	*p = (*p)[:n]
	return p
}

func (s *psService) getBytes() *[]byte {
	p, _ := s.bytes.Get().(*[]byte)
	if p == nil {
		b := make([]byte, 0, pb.MaxPieceBytes)
		return &b
	}
	return p
}

var _ pb.ParameterServerServer = (*psService)(nil)

// RegisterPS registers the ParameterServer service for core on g and marks
// it SERVING in h (which may be nil).
func RegisterPS(g *grpc.Server, h *health.Server, core *ps.Server, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pb.RegisterParameterServerServer(g, &psService{core: core, log: log.With("component", "rpc")})
	if h != nil {
		h.SetServingStatus(pb.ParameterServer_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	}
}

// toStatus maps a core error to a gRPC status error.
func toStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ps.ErrInvalidArgument):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ps.ErrWrongPlan):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, ps.ErrStale):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, ps.ErrWaitTimeout):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func (s *psService) Info(ctx context.Context, _ *pb.InfoRequest) (*pb.InfoResponse, error) {
	cfg := s.core.Config()
	resp := &pb.InfoResponse{
		Plan: &pb.Plan{
			Version:      shard.Version,
			VectorLength: int64(cfg.Plan.VectorLen),
			Servers:      int32(cfg.Plan.Servers),
			ChunkFloats:  int64(cfg.Plan.ChunkFloats),
		},
		Shard:         int32(cfg.Shard),
		Clock:         s.core.Clock(),
		Mode:          cfg.Mode,
		Optimizer:     describeOptimizer(cfg.Optimizer),
		Workers:       int32(cfg.Workers),
		BackupWorkers: int32(cfg.BackupWorkers),
		Staleness:     cfg.Staleness,
	}
	st := s.core.Stats()
	resp.Stats = &pb.Stats{Pushes: st.Pushes, Duplicates: st.Duplicates, Dropped: st.Dropped, Rejected: st.Rejected, Pulls: st.Pulls}
	last := 0
	for i, n := range st.Staleness {
		if n > 0 {
			last = i + 1
		}
	}
	resp.Stats.StalenessHistogram = st.Staleness[:last]
	for _, t := range cfg.Layout.Tensors {
		ti := &pb.TensorInfo{Name: t.Name, Offset: int64(t.Offset)}
		for _, d := range t.Shape {
			ti.Shape = append(ti.Shape, int64(d))
		}
		resp.Layout = append(resp.Layout, ti)
	}
	for _, r := range s.core.Ranges() {
		resp.Ranges = append(resp.Ranges, &pb.Range{Offset: int64(r.Off), Length: int64(r.Len)})
	}
	return resp, nil
}

func describeOptimizer(c optim.Config) string {
	return fmt.Sprintf("%s lr=%g momentum=%g weight_decay=%g", c.Algorithm, c.LR, c.Momentum, c.WeightDecay)
}

// toRange converts a wire range, refusing values that do not fit an int.
func toRange(r *pb.Range) (shard.Range, error) {
	const maxInt = int64(^uint(0) >> 1)
	if r == nil || r.Offset < 0 || r.Length <= 0 || r.Offset > maxInt-r.Length {
		return shard.Range{}, fmt.Errorf("%w: range %v: want offset >= 0 and length > 0", ps.ErrInvalidArgument, r)
	}
	return shard.Range{Off: int(r.Offset), Len: int(r.Length)}, nil
}

// waitContext ends a little before the caller's deadline, so that a wait
// for other workers can still answer with an error that names them.
func waitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	margin := min(time.Until(d)/10, time.Second)
	return context.WithDeadline(ctx, d.Add(-margin))
}

func (s *psService) Pull(req *pb.PullRequest, stream grpc.ServerStreamingServer[pb.PullPiece]) error {
	if err := s.core.CheckPlan(req.PlanVersion); err != nil {
		return toStatus(err)
	}
	// Headers go out before any wait: the caller knows the shard has the
	// pull (a test orders a push after this; held_micros counts from here).
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	wctx, cancel := waitContext(stream.Context())
	start := time.Now()
	err := s.core.WaitToRead(wctx, req.WorkerId, req.Step)
	cancel()
	if err != nil {
		return toStatus(err)
	}
	held := time.Since(start).Microseconds() // told on the first piece
	const pieceFloats = pb.MaxPieceBytes / 4
	if len(req.Ranges) == 0 {
		// The whole shard, as one consistent snapshot.
		snap := s.getFloats(s.core.Floats())
		defer s.floats.Put(snap)
		enc := s.getBytes()
		defer s.bytes.Put(enc)
		vals := *snap
		clock, err := s.core.Snapshot(vals)
		if err != nil {
			return toStatus(err)
		}
		for _, r := range s.core.Ranges() {
			part := vals[:r.Len]
			vals = vals[r.Len:]
			for off := 0; off < r.Len; off += pieceFloats {
				end := min(off+pieceFloats, r.Len)
				*enc = pb.AppendFloats((*enc)[:0], part[off:end])
				if err := stream.Send(&pb.PullPiece{Offset: int64(r.Off + off), Values: *enc, Clock: clock, HeldMicros: held}); err != nil {
					return err
				}
				held = 0
			}
		}
		return nil
	}
	buf := make([]float32, 0, pieceFloats)
	enc := s.getBytes()
	defer s.bytes.Put(enc)
	for _, wr := range req.Ranges {
		r, err := toRange(wr)
		if err != nil {
			return toStatus(err)
		}
		for off := r.Off; off < r.End(); off += pieceFloats {
			piece := shard.Range{Off: off, Len: min(pieceFloats, r.End()-off)}
			buf = buf[:piece.Len]
			clock, err := s.core.Read(piece, buf)
			if err != nil {
				return toStatus(err)
			}
			*enc = pb.AppendFloats((*enc)[:0], buf)
			if err := stream.Send(&pb.PullPiece{Offset: int64(off), Values: *enc, Clock: clock, HeldMicros: held}); err != nil {
				return err
			}
			held = 0
		}
	}
	return nil
}

func (s *psService) Push(stream grpc.ClientStreamingServer[pb.PushPiece, pb.PushResponse]) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return invalid("push stream ended before its header: want a first message with a header")
	}
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return invalid("push: first message has no header")
	}
	if err := s.core.CheckPlan(h.PlanVersion); err != nil {
		return toStatus(err)
	}
	in := ps.Push{WorkerID: h.WorkerId, Step: h.Step, Clock: h.Clock, Ranges: make([]shard.Range, len(h.Ranges))}
	for i, r := range h.Ranges {
		if in.Ranges[i], err = toRange(r); err != nil {
			return toStatus(err)
		}
	}
	// Validate the header before allocating, so a lying header cannot make
	// the server allocate more than the vector it holds.
	total, err := s.core.ValidateRanges(in.Ranges)
	if err != nil {
		return toStatus(err)
	}
	decode, size := pb.DecodeFloats, 4
	switch h.Encoding {
	case pb.Encoding_FLOAT32:
	case pb.Encoding_FLOAT16:
		decode, size = collective.DecodeFloat16, 2
	case pb.Encoding_BFLOAT16:
		decode, size = collective.DecodeBFloat16, 2
	default:
		return invalid("push: unknown encoding %v (want FLOAT32, FLOAT16 or BFLOAT16)", h.Encoding)
	}
	grads := s.getFloats(total)
	defer s.floats.Put(grads)
	in.Grads = *grads
	n := 0
	msg := first
	for {
		if msg.Header != nil && msg != first {
			return invalid("push: a second header after %d floats; want one header per push", n)
		}
		if len(msg.Grads)%size != 0 {
			return invalid("push: piece of %d bytes is not a whole number of %s values", len(msg.Grads), h.Encoding)
		}
		k := len(msg.Grads) / size
		if n+k > total {
			return invalid("push: pieces carry more than the %d floats the header's ranges hold", total)
		}
		if err := decode(in.Grads[n:n+k], msg.Grads); err != nil {
			return invalid("push: %v", err)
		}
		n += k
		msg, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if n != total {
		return invalid("push: pieces carry %d floats, the header's ranges hold %d", n, total)
	}
	wctx, cancel := waitContext(stream.Context())
	res, err := s.core.Push(wctx, in)
	cancel()
	if err != nil {
		return toStatus(err)
	}
	return stream.SendAndClose(&pb.PushResponse{Clock: res.Clock, Duplicate: res.Duplicate, Dropped: res.Dropped, Staleness: res.Staleness})
}
