package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/internal/deadline"
	"github.com/shoalml/shoal/internal/freelist"
	"github.com/shoalml/shoal/optim"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/timeline"
	"github.com/shoalml/shoal/wire"
)

// maxPushBuffers is how many gradient vectors a shard keeps for the
// pushes to come: the most pushes it has received at once, up to this.
const maxPushBuffers = 16

// pieceFloats is how many float32 values one piece of a pull carries.
const pieceFloats = wire.MaxPieceBytes / 4

// NewGRPCServer returns a gRPC server with Shoal's message limits and
// transport settings (shoalpb.DefaultTransport; opts may override them),
// the health service (reporting SERVING for "" and every registered
// service) and server reflection. It returns the health server so callers
// can mark the server NOT_SERVING while draining.
func NewGRPCServer(opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	return NewGRPCServerWith(pb.DefaultTransport, opts...)
}

// NewGRPCServerWith is NewGRPCServer with transport settings t.
func NewGRPCServerWith(t pb.Transport, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	base := append([]grpc.ServerOption{grpc.MaxRecvMsgSize(wire.MaxMessageBytes)}, t.ServerOptions()...)
	opts = append(base, opts...)
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
	// floats recycles the gradient vectors pushes are decoded into,
	// across garbage collections (the pulls' snapshots and pieces come
	// from the tensor pool and return there once written).
	floats *freelist.List[float32]
	// pieces is how many pieces the shard's values take.
	pieces int
	// pos maps each owned chunk's offset to its place in the share.
	pos map[int]int
	// gmu guards gathers, the push-pulls split over lanes that are
	// arriving, one per worker at most, and their fields.
	gmu      sync.Mutex
	gathers  map[int64]*gather
	laneWait time.Duration
}

func (s *psService) getFloats(n int) *[]float32 {
	if p := s.floats.Get(n); p != nil {
		return p
	}
	b := make([]float32, n)
	return &b
}

var _ pb.ParameterServerServer = (*psService)(nil)

// RegisterPS registers the ParameterServer service for core on g and marks
// it SERVING in h (which may be nil).
func RegisterPS(g *grpc.Server, h *health.Server, core *ps.Server, log *slog.Logger, opts ...PSOption) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	svc := &psService{core: core, log: log.With("component", "rpc"), floats: freelist.New[float32](maxPushBuffers),
		laneWait: DefaultLaneWait, gathers: map[int64]*gather{}, pos: sharePositions(core)}
	for _, o := range opts {
		o(svc)
	}
	for _, r := range core.Ranges() {
		svc.pieces += (r.Len + pieceFloats - 1) / pieceFloats
	}
	pb.RegisterParameterServerServer(g, svc)
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
	case errors.Is(err, ps.ErrNotMember):
		return withReason(codes.FailedPrecondition, err, pb.ReasonNotMember)
	case errors.Is(err, ps.ErrNoSession):
		return withReason(codes.FailedPrecondition, err, pb.ReasonNoSession)
	case errors.Is(err, ps.ErrWrongSession):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, ps.ErrWrongPlan):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, ps.ErrStale):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, ps.ErrJournal): // the shard is stopping; its restart will take the push
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled): // also a wait the caller canceled
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, ps.ErrWaitTimeout), errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

// withReason is err as a status of code with Shoal's ErrorInfo reason,
// which a client acts on (pb.ReasonNotMember, …).
func withReason(code codes.Code, err error, reason string) error {
	st, derr := status.New(code, err.Error()).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: pb.ErrorDomain})
	if derr != nil {
		return status.Error(code, err.Error())
	}
	return st.Err()
}

// refuse counts a push this adapter refused before the shard saw it
// (ps.Server.CountRefused: Stats.RejectedBy, the
// shoal_ps_rejected_pushes_total metric) and returns err. Each refusal is
// counted where it is decided, once, however many lanes hear of it.
func (s *psService) refuse(reason string, err error) error {
	s.core.CountRefused(reason)
	return err
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
		Mode:          cfg.Mode.String(),
		Optimizer:     describeOptimizer(cfg.Optimizer),
		Workers:       int32(cfg.Workers),
		BackupWorkers: int32(cfg.BackupWorkers),
		Staleness:     cfg.Staleness,
		Floats:        int64(s.core.Floats()),
		LocalSteps:    int32(cfg.LocalSteps),
		Fragments:     int32(cfg.Fragments),
	}
	st := s.core.Stats()
	resp.Stats = &pb.Stats{Pushes: st.Pushes, Duplicates: st.Duplicates, Dropped: st.Dropped, Rejected: st.Rejected, Pulls: st.Pulls, ShortSteps: st.ShortSteps,
		RejectedBy: st.RejectedBy, RejectedPullsBy: st.RejectedPullsBy}
	resp.LiveWorkers = s.core.LiveWorkers()
	if stall, ok := s.core.Stall(); ok {
		resp.Stall = &pb.Stall{Step: stall.Step, Workers: stall.Workers, SinceUnixNanos: stall.Since.UnixNano(), Pulls: int32(stall.Pulls)}
	}
	resp.Stats.StalenessHistogram = make([]int64, st.Staleness.Worst()+1)
	for s, n := range st.Staleness.All() {
		resp.Stats.StalenessHistogram[s] = n
	}
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

// JoinWorker admits a worker that starts or starts again and binds its
// id to the caller with a new session (ps.Server.Join); with rebind, it
// only binds an id the shard holds no session for (ps.Server.Rebind).
func (s *psService) JoinWorker(ctx context.Context, req *pb.JoinWorkerRequest) (*pb.JoinWorkerResponse, error) {
	if err := s.core.CheckPlan(req.PlanVersion); err != nil {
		return nil, toStatus(err)
	}
	if req.Rebind {
		sess, err := s.core.Rebind(req.WorkerId)
		if err != nil {
			return nil, toStatus(err)
		}
		return &pb.JoinWorkerResponse{Step: s.core.StepsPushed(req.WorkerId), Clock: s.core.Clock(), Session: sess[:]}, nil
	}
	j, err := s.core.Join(req.WorkerId, req.NotBefore, req.PushEvery)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.JoinWorkerResponse{Step: j.Step, Clock: s.core.Clock(), Session: j.Session[:]}, nil
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

// pullRanges converts the ranges a pull names, which must be increasing
// and must not overlap: a reply then holds each float at most once and is
// never larger than the shard, however the request is written (a request
// naming the whole vector 2,000 times would otherwise make the shard send
// it 2,000 times). Each must lie in chunks the shard owns, checked here so
// that a bad range is refused before the pull waits or sends anything.
func (s *psService) pullRanges(ranges []*pb.Range) ([]shard.Range, error) {
	rs := make([]shard.Range, len(ranges))
	prevEnd := 0
	for i, wr := range ranges {
		r, err := toRange(wr)
		if err != nil {
			return nil, err
		}
		if i > 0 && r.Off < prevEnd {
			return nil, fmt.Errorf("%w: pull range %v overlaps or precedes the previous one, which ends at %d: name each float at most once, in increasing order",
				ps.ErrInvalidArgument, r, prevEnd)
		}
		if err := s.core.CheckRange(r); err != nil {
			return nil, err
		}
		rs[i], prevEnd = r, r.End()
	}
	return rs, nil
}

func (s *psService) Pull(req *pb.PullRequest, stream grpc.ServerStreamingServer[pb.PullPiece]) error {
	if err := s.core.CheckPlan(req.PlanVersion); err != nil {
		// Counted like CheckPull's refusals (shoal_ps_rejected_pulls_total).
		s.core.CountRefusedPull(ps.RejectedPlan)
		return toStatus(err)
	}
	// A pull as a worker is waited for and served as that worker: only
	// with its session (a reader that is no worker, -1, needs none).
	sess, err := ps.SessionOf(req.Session)
	if err == nil {
		err = s.core.CheckPull(req.WorkerId, sess)
	}
	if err != nil {
		return toStatus(fmt.Errorf("pull for worker %d: %w", req.WorkerId, err))
	}
	// Headers go out before any wait: the caller knows the shard has the
	// pull (a test orders a push after this; held_micros counts from here).
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	defer s.core.Config().Timeline.Since(int(req.WorkerId)+1, "pull", time.Now(), timeline.Arg{Key: "step", Val: req.Step})
	return s.pull(stream, req.WorkerId, req.Step, req.Ranges)
}

// pull waits until worker may read the values for step, then streams the
// ranges (every owned range when none are named) in pieces of at most
// wire.MaxPieceBytes. The first piece carries how long the wait took.
func (s *psService) pull(stream grpc.ServerStream, worker, step int64, ranges []*pb.Range) error {
	rs, err := s.pullRanges(ranges)
	if err != nil {
		return toStatus(err)
	}
	wctx, cancel := deadline.Early(stream.Context())
	start := time.Now()
	err = s.core.WaitToRead(wctx, worker, step)
	cancel()
	if err != nil {
		return toStatus(err)
	}
	first := &pb.PullPiece{HeldMicros: time.Since(start).Microseconds()}
	send := func(off int, clock int64, payload mem.Buffer) error {
		p := &pb.PullPiece{Offset: int64(off), Clock: clock}
		if first != nil {
			p.HeldMicros, first = first.HeldMicros, nil
		}
		return stream.SendMsg(&pb.TensorOut{Msg: p, Field: pullValuesField, Payload: payload})
	}
	if len(ranges) == 0 {
		// The whole shard, as one consistent view, sent from the chunks'
		// own memory, held until the transport has written the last
		// piece of each (the shard copies-on-write meanwhile).
		clock, chunks := s.view(worker)
		defer func() {
			for _, b := range chunks {
				b.Free()
			}
		}()
		for i, r := range s.core.Ranges() {
			for off := 0; off < r.Len; off += pieceFloats {
				k := min(pieceFloats, r.Len-off)
				if err := send(r.Off+off, clock, chunks[i].Slice(4*off, 4*(off+k))); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, r := range rs {
		for off := r.Off; off < r.End(); off += pieceFloats {
			piece := shard.Range{Off: off, Len: min(pieceFloats, r.End()-off)}
			var clock int64
			buf, err := pb.NewFloatBuffer(piece.Len, func(dst []float32) (err error) {
				clock, err = s.core.Read(piece, dst)
				return err
			})
			if err != nil {
				return toStatus(err)
			}
			if err := send(off, clock, buf); err != nil {
				return err
			}
		}
	}
	return nil
}

// Field numbers of the tensor payloads (see ps.proto).
const (
	pullValuesField = 2 // PullPiece.values
	pushGradsField  = 2 // PushPiece.grads
)

func (s *psService) Push(stream grpc.ClientStreamingServer[pb.PushPiece, pb.PushResponse]) error {
	start := time.Now()
	res, h, err := s.push(stream)
	if err != nil {
		return err
	}
	s.core.Config().Timeline.Since(int(h.WorkerId)+1, "push", start, timeline.Arg{Key: "step", Val: h.Step})
	return stream.SendAndClose(res)
}

// PushPull is a push, then (when the header asks) a pull of every owned
// range for the header's pull step, in one call.
func (s *psService) PushPull(stream grpc.BidiStreamingServer[pb.PushPiece, pb.PullPiece]) error {
	start := time.Now()
	pr := &pushReader{s: s, lanesOK: true}
	defer pr.release()
	err := pr.recv(stream)
	if pr.g != nil {
		if pr.h.Lane == 0 {
			defer s.core.Config().Timeline.Since(int(pr.h.WorkerId)+1, "push-pull", start, timeline.Arg{Key: "step", Val: pr.h.Step})
		}
		return s.pushPullLane(stream, pr, err)
	}
	if err != nil {
		return err
	}
	h := pr.h
	defer s.core.Config().Timeline.Since(int(h.WorkerId)+1, "push-pull", start, timeline.Arg{Key: "step", Val: h.Step})
	if h.Pull {
		return s.pushPull(stream, pr)
	}
	res, err := s.apply(stream, pr)
	if err != nil {
		return err
	}
	return stream.SendMsg(&pb.TensorOut{Msg: &pb.PullPiece{Push: res}, Field: pullValuesField})
}

// pushPull applies a push and streams the values of the pull that goes
// with it (ps.Server.PushPull: when they are read is the mode's), each
// piece as soon as the shard hands its chunk over: a goroutine sends
// while the shard updates the next chunk (the shard's lock is never held
// across a send, so a client that reads slowly cannot stall the shard).
func (s *psService) pushPull(stream grpc.ServerStream, pr *pushReader) error {
	pieces := make(chan *pb.TensorOut, s.pieces)
	sent := make(chan error, 1)
	go func() {
		var err error
		for out := range pieces {
			if err == nil {
				err = stream.SendMsg(out)
			} else {
				out.Payload.Free()
			}
		}
		sent <- err
	}()
	q := &replyQueue{out: pieces}
	// As for a Pull: headers go out before a wait, so the caller knows
	// the push is applied and the shard has the pull.
	var headerErr error
	waiting := func() error {
		headerErr = stream.SendHeader(nil)
		return headerErr
	}
	wctx, cancel := deadline.Early(stream.Context())
	_, err := s.core.PushPull(wctx, pr.pushed(), pr.h.PullStep, func(res ps.PushResult, c ps.ChunkRead) {
		queueRead(q, c, replyHead(res))
	}, waiting)
	cancel()
	close(pieces)
	if serr := <-sent; err == nil {
		err = serr
	}
	if headerErr != nil {
		return headerErr
	}
	return toStatus(err)
}

// replyHead fills in what the first piece of a push-pull's reply
// carries: the push's result and how long the pull waited.
func replyHead(res ps.PushResult) func(*pb.PullPiece) {
	return func(p *pb.PullPiece) { p.Push, p.HeldMicros = toPushResponse(res), res.Waited.Microseconds() }
}

// replyQueue holds the pieces of one reply stream until its sender takes
// them. Chunks may be queued from several goroutines at once (a parallel
// step reads each chunk from the goroutine that updated it), so the
// pieces go out in no set order (each says where it belongs); the first
// piece queued, whichever chunk it is from, carries the reply's head.
type replyQueue struct {
	out     chan<- *pb.TensorOut // room for every piece: a put never waits
	mu      sync.Mutex
	started bool // a piece is queued: the head went out
}

// put queues piece p with payload, calling head on it first if it is the
// reply's first piece.
func (q *replyQueue) put(p *pb.PullPiece, payload mem.Buffer, head func(*pb.PullPiece)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.started {
		head(p)
		q.started = true
	}
	q.out <- &pb.TensorOut{Msg: p, Field: pullValuesField, Payload: payload}
}

// chunkBuffer is chunk c's values as one buffer, made while the shard's
// lock is held: the values themselves, held until the buffer's last
// reference is freed (the shard copies-on-write meanwhile), where that can
// be (see shoalpb.HeldFloatBuffer), else a copy. The caller frees it.
func chunkBuffer(c ps.ChunkRead) mem.Buffer {
	if b, ok := pb.HeldFloatBuffer(c.Values, c.Hold); ok {
		return b
	}
	b, _ := pb.NewFloatBuffer(len(c.Values), func(dst []float32) error { copy(dst, c.Values); return nil })
	return b
}

// view is one consistent view of the whole shard, served to worker (see
// ps.Server.ViewFor), each chunk as chunkBuffer makes it, with its clock;
// the caller frees the buffers.
func (s *psService) view(worker int64) (int64, []mem.Buffer) {
	var chunks []mem.Buffer
	clock := s.core.ViewFor(worker, func(c ps.ChunkRead) { chunks = append(chunks, chunkBuffer(c)) })
	return clock, chunks
}

// queueRead queues chunk c, read under the shard's lock, on q.
func queueRead(q *replyQueue, c ps.ChunkRead, head func(*pb.PullPiece)) {
	buf := chunkBuffer(c)
	queueChunk(q, c.Range, c.Clock, buf, head)
	buf.Free()
}

// queueChunk queues the values of chunk r, at clock, on q as pieces of at
// most pieceFloats, slices of buf (the chunk's floats, see chunkBuffer;
// each slice holds its own reference, so the caller frees buf once it is
// queued). head fills in what the first piece of the reply carries.
func queueChunk(q *replyQueue, r shard.Range, clock int64, buf mem.Buffer, head func(*pb.PullPiece)) {
	for off := 0; off < r.Len; off += pieceFloats {
		end := min(off+pieceFloats, r.Len)
		q.put(&pb.PullPiece{Offset: int64(r.Off + off), Clock: clock}, buf.Slice(4*off, 4*end), head)
	}
}

func toPushResponse(res ps.PushResult) *pb.PushResponse {
	return &pb.PushResponse{Clock: res.Clock, Duplicate: res.Duplicate, Dropped: res.Dropped, Staleness: res.Staleness}
}

// push reads a push stream to its end and applies it. Nothing changes
// unless every piece arrived and checked out.
func (s *psService) push(stream grpc.ServerStream) (*pb.PushResponse, *pb.PushHeader, error) {
	pr := &pushReader{s: s}
	defer pr.release()
	if err := pr.recv(stream); err != nil {
		return nil, nil, err
	}
	res, err := s.apply(stream, pr)
	return res, pr.h, err
}

// apply applies a push that was read whole.
func (s *psService) apply(stream grpc.ServerStream, pr *pushReader) (*pb.PushResponse, error) {
	wctx, cancel := deadline.Early(stream.Context())
	res, err := s.core.Push(wctx, pr.pushed())
	cancel()
	if err != nil {
		return nil, toStatus(err)
	}
	return toPushResponse(res), nil
}

// pushed is the push that was read, with the scan of its pieces.
func (pr *pushReader) pushed() ps.Push {
	pr.in.Grads = pr.dst
	pr.in.Scan = &pr.scan
	pr.in.Bytes = pr.bytes
	return pr.in
}

// recv reads a push stream to its end, checking and decoding every piece.
func (pr *pushReader) recv(stream grpc.ServerStream) error {
	for i := 0; ; i++ {
		msg := &pb.PushPiece{}
		in := &pb.TensorIn{Msg: msg, Field: pushGradsField, Place: func(n int) pb.Sink { return pr.place(msg, n) }}
		err := stream.RecvMsg(in)
		if errors.Is(err, io.EOF) {
			if i == 0 {
				return pr.s.refuse(ps.RejectedWire, invalid("push stream ended before its header: want a first message with a header"))
			}
			break
		}
		if err != nil {
			return err
		}
		if pr.h == nil && pr.err == nil { // a first piece without payload
			pr.err = pr.start(msg)
		}
		if i == 0 && pr.err != nil && pr.lanesOK && pr.g == nil {
			pr.s.refuseLane(msg.GetHeader(), pr.err)
		}
		if pr.err == nil && msg.Header != nil && msg.Header != pr.h && i > 0 {
			pr.err = pr.s.refuse(ps.RejectedWire, invalid("push: a second header after %d floats; want one header per push", pr.n))
		}
		if pr.err != nil {
			return pr.err
		}
		if err := pr.finish(in); err != nil {
			return err
		}
		if i == 0 && pr.g != nil {
			// Headers go out once the shard holds the lane, so that its
			// client knows (a test orders the next lane after this).
			if err := stream.SendHeader(nil); err != nil {
				return err
			}
		}
	}
	if pr.n != pr.total {
		return pr.s.refuse(ps.RejectedShape, invalid("push: pieces carry %d floats, the header's ranges hold %d", pr.n, pr.total))
	}
	return nil
}

// pushReader decodes the pieces of one push straight into a pooled
// gradient vector.
type pushReader struct {
	s     *psService
	h     *pb.PushHeader
	in    ps.Push
	total int   // floats the header's ranges hold
	n     int   // floats received
	bytes int64 // payload received: values in their encoding, int8's scales
	enc   wire.Encoding
	grads *[]float32 // the pooled buffer dst is in (nil for a lane)
	dst   []float32  // where the floats go
	half  []byte     // a piece in float16 or bfloat16
	err   error      // the first problem, a gRPC status
	// scan is the shard's scan of the pieces so far (ps.Scan), done here
	// as each arrives.
	scan ps.Scan
	// lanesOK: the stream may be one lane of a push-pull (PushHeader.lanes),
	// whose floats go into g's share.
	lanesOK bool
	g       *gather
}

// start checks the first piece's header and makes room for the gradient.
func (pr *pushReader) start(first *pb.PushPiece) error {
	h := first.GetHeader()
	if h == nil {
		return pr.s.refuse(ps.RejectedWire, invalid("push: first message has no header"))
	}
	if err := pr.s.core.CheckPlan(h.PlanVersion); err != nil {
		// Each stream that carries it is refused and counted, as a
		// session's refusal is: a lane of a push-pull on its own.
		return pr.s.refuse(ps.RejectedPlan, toStatus(err))
	}
	// Only the worker's session pushes for it: checked before anything
	// is allocated or any lane joins, so that a caller without it cannot
	// make the shard hold a gradient, nor fail the worker's own lanes.
	if err := pr.s.core.CheckWorker(h.WorkerId); err != nil {
		return pr.s.refuse(ps.RejectedWorker, toStatus(err))
	}
	sess, err := ps.SessionOf(h.Session)
	if err == nil {
		err = pr.s.core.CheckSession(h.WorkerId, sess)
	}
	if err != nil {
		return pr.s.refuse(ps.RejectedSession, toStatus(fmt.Errorf("push for worker %d, step %d: %w", h.WorkerId, h.Step, err)))
	}
	in := ps.Push{WorkerID: h.WorkerId, Session: sess, Step: h.Step, Clock: h.Clock, Ranges: make([]shard.Range, len(h.Ranges))}
	for i, r := range h.Ranges {
		if in.Ranges[i], err = toRange(r); err != nil {
			return pr.s.refuse(ps.RejectedShape, toStatus(err))
		}
	}
	// Validate the header before allocating, so a lying header cannot make
	// the server allocate more than the vector it holds.
	total, err := pr.s.core.ValidateRanges(in.Ranges)
	if err != nil {
		return pr.s.refuse(ps.RejectedShape, toStatus(err))
	}
	enc, ok := h.Encoding.Wire()
	if !ok {
		return pr.s.refuse(ps.RejectedWire, invalid("push: unknown encoding %v (want FLOAT32, FLOAT16, BFLOAT16, or INT8 for pseudo-gradients)", h.Encoding))
	}
	if enc == wire.Int8 && pr.s.core.Config().LocalSteps == 0 {
		// Int8 rounds every value to 1/254 of its block's largest: fine
		// for the sum of H local steps, too coarse for a step's gradient
		// (the small components of every step would round to zero).
		return pr.s.refuse(ps.RejectedWire, invalid("push: INT8 is for the pseudo-gradients of local steps, and this shard applies gradients (it runs without local steps): want FLOAT32, FLOAT16 or BFLOAT16"))
	}
	pr.h, pr.in, pr.total, pr.enc = h, in, total, enc
	switch {
	case h.Lanes > 1 && !pr.lanesOK:
		return pr.s.refuse(ps.RejectedWire, invalid("push: header for lane %d of %d; a Push is one stream (lanes are for PushPull)", h.Lane, h.Lanes))
	case h.Lanes > 1:
		g, dst, err := pr.s.join(h, in.Ranges, total)
		if err != nil {
			return err
		}
		pr.g, pr.dst = g, dst
	case h.Lane != 0:
		return pr.s.refuse(ps.RejectedWire, invalid("push: header for lane %d of %d: want lane 0 of 0 or 1 for a push in one stream", h.Lane, h.Lanes))
	default:
		pr.grads = pr.s.getFloats(total)
		pr.dst = (*pr.grads)[:total]
	}
	return nil
}

// place says where a piece's n payload bytes go: straight into the
// gradient for float32, into a scratch buffer for the 16-bit encodings
// and int8.
func (pr *pushReader) place(msg *pb.PushPiece, n int) pb.Sink {
	if pr.err != nil {
		return pb.Sink{}
	}
	if pr.h == nil {
		if pr.err = pr.start(msg); pr.err != nil {
			return pb.Sink{}
		}
	} else if msg.Header != nil {
		pr.err = pr.s.refuse(ps.RejectedWire, invalid("push: a second header after %d floats; want one header per push", pr.n))
		return pb.Sink{}
	}
	if n%pr.enc.Size() != 0 {
		pr.err = pr.s.refuse(ps.RejectedShape, invalid("push: piece of %d bytes is not a whole number of %s values", n, pr.h.Encoding))
		return pb.Sink{}
	}
	k := n / pr.enc.Size()
	if pr.n+k > pr.total {
		pr.err = pr.s.refuse(ps.RejectedShape, invalid("push: pieces carry more than the %d floats the header's ranges hold", pr.total))
		return pb.Sink{}
	}
	if pr.enc == wire.Float32 {
		return pb.Sink{Floats: pr.dst[pr.n : pr.n+k]}
	}
	if cap(pr.half) < n {
		pr.half = make([]byte, n)
	}
	return pb.Sink{Bytes: pr.half[:n]}
}

// finish accounts for a piece once it has been received.
func (pr *pushReader) finish(in *pb.TensorIn) error {
	scales := in.Msg.(*pb.PushPiece).GetScales()
	if err := pr.checkScales(in.Len, scales); err != nil {
		return err
	}
	if in.Len == 0 {
		return nil
	}
	if !in.Placed {
		return status.Errorf(codes.Internal, "push: a piece of %d bytes was not stored", in.Len)
	}
	k := in.Len / pr.enc.Size()
	piece := pr.dst[pr.n : pr.n+k]
	var err error
	switch pr.enc {
	case wire.Float32:
	case wire.Int8:
		err = wire.DecodeInt8(piece, pr.half[:in.Len], scales)
	default:
		err = pr.enc.Decode(piece, pr.half[:in.Len])
	}
	if err != nil {
		return pr.s.refuse(ps.RejectedShape, invalid("push: %v", err))
	}
	// The shard's finiteness and magnitude scan, here while the piece is
	// in the cache (ps.Scan).
	pr.scan.Add(piece)
	pr.n += k
	pr.bytes += int64(in.Len + 4*len(scales))
	return nil
}

// checkScales checks a piece's scales (PushPiece.scales) against its n
// payload bytes: one per wire.Int8Block values, each finite (else refused
// as non-finite, as a NaN value would be) and > 0, for INT8; none for
// the other encodings.
func (pr *pushReader) checkScales(n int, scales []float32) error {
	if pr.enc != wire.Int8 {
		if len(scales) > 0 {
			return pr.s.refuse(ps.RejectedWire, invalid("push: a %s piece with %d scales; scales are for INT8 pieces only", pr.h.Encoding, len(scales)))
		}
		return nil
	}
	if want := wire.Int8Scales(n); len(scales) != want {
		return pr.s.refuse(ps.RejectedShape, invalid("push: an INT8 piece of %d values with %d scales, want %d (one per %d values)", n, len(scales), want, wire.Int8Block))
	}
	i, err := wire.CheckInt8Scales(scales)
	switch {
	case errors.Is(err, wire.ErrScaleNonFinite):
		return pr.s.refuse(ps.RejectedNonFinite, invalid("push: INT8 scale %d of the piece after %d floats: %v", i, pr.n, err))
	case err != nil:
		return pr.s.refuse(ps.RejectedWire, invalid("push: INT8 scale %d of the piece after %d floats: %v", i, pr.n, err))
	}
	return nil
}

func (pr *pushReader) release() {
	if pr.grads != nil {
		pr.s.floats.Put(pr.grads)
	}
}
