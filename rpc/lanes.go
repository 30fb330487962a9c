package rpc

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/internal/deadline"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/shard"
)

// MaxLanes bounds the streams one push-pull may be split over
// (PushHeader.lanes).
const MaxLanes = 16

// DefaultLaneWait is how long the lanes of a push-pull that have arrived
// wait for the others before the push fails, unapplied. The lanes of one
// push are sent together, so this only ends a push whose client died or
// lied between lanes; it bounds how long a gradient buffer is held for
// lanes that never come.
const DefaultLaneWait = DefaultStreamIdle

// PSOption configures RegisterPS.
type PSOption func(*psService)

// WithLaneWait sets how long arrived lanes of a push-pull wait for the
// others (DefaultLaneWait).
func WithLaneWait(d time.Duration) PSOption { return func(s *psService) { s.laneWait = d } }

// Gather states.
const (
	gathering  = iota // lanes are arriving
	committing        // every lane arrived; the push is being applied
	gathered          // applied, or failed (err)
)

// gather is a push-pull split over lanes, collected until every lane has
// arrived whole. Its fields are guarded by psService.gmu.
type gather struct {
	worker, step int64
	h            *pb.PushHeader // the first lane's: the others must agree
	lanes        int
	grads        *[]float32 // the whole share, each lane decoded into its part
	floats       int
	start, n     []int // per lane: where its floats begin in the share, how many
	joined       []bool
	outs         []chan *pb.TensorOut // per lane: the pieces of its reply
	arrived      int                  // lanes received whole
	scan         ps.Scan              // the lanes' scans, merged
	bytes        int64                // the lanes' payloads (pushReader.bytes), summed
	refs         int                  // lanes that joined and have not left
	state        int
	err          error
	timer        *time.Timer
}

// sharePositions maps the offset of each chunk the shard owns to where
// its floats begin in the shard's share (the owned chunks in vector order).
func sharePositions(core *ps.Server) map[int]int {
	pos := make(map[int]int, len(core.Ranges()))
	at := 0
	for _, r := range core.Ranges() {
		pos[r.Off] = at
		at += r.Len
	}
	return pos
}

// lanePosition checks that ranges (validated: whole owned chunks,
// increasing) are a consecutive run of the shard's owned chunks and
// returns where the run begins in the share.
func (s *psService) lanePosition(ranges []shard.Range) (int, error) {
	plan := s.core.Config().Plan
	start, at := -1, 0
	for _, r := range ranges {
		for c := plan.ChunkAt(r.Off); c <= plan.ChunkAt(r.End()-1); c++ {
			ch := plan.Chunk(c)
			p, ok := s.pos[ch.Off]
			if !ok { // ValidateRanges let through a chunk the shard does not own
				return 0, s.refuse(ps.RejectedShape, invalid("push-pull lane: chunk %d at %d is not this shard's", c, ch.Off))
			}
			if start < 0 {
				start, at = p, p
			}
			if p != at {
				return 0, s.refuse(ps.RejectedShape, invalid("push-pull lane: range %v skips owned chunks before chunk %d; a lane carries consecutive owned chunks", r, c))
			}
			at += ch.Len
		}
	}
	return start, nil
}

// join adds the lane that h opens, with its checked ranges holding total
// floats, to the gather of its push, starting one if it is the first
// lane, and returns the gather and where in the share the lane's floats
// go.
func (s *psService) join(h *pb.PushHeader, ranges []shard.Range, total int) (*gather, []float32, error) {
	lanes, lane := int(h.Lanes), int(h.Lane)
	if lanes > MaxLanes || lane >= lanes {
		return nil, nil, s.refuse(ps.RejectedWire, invalid("push-pull: lane %d of %d: want lane < lanes <= %d", h.Lane, h.Lanes, MaxLanes))
	}
	if err := s.core.CheckWorker(h.WorkerId); err != nil {
		return nil, nil, toStatus(err)
	}
	at, err := s.lanePosition(ranges)
	if err != nil {
		return nil, nil, err
	}
	s.gmu.Lock()
	defer s.gmu.Unlock()
	g, err := s.gatherLocked(h)
	if err != nil {
		return nil, nil, err
	}
	if g.grads == nil {
		g.grads = s.getFloats(g.floats)
		g.timer = time.AfterFunc(s.laneWait, func() {
			s.gmu.Lock()
			defer s.gmu.Unlock()
			s.failLocked(g, status.Errorf(codes.DeadlineExceeded, "push-pull of worker %d, step %d: %d of its %d lanes arrived within %v (the lane wait); the push is not applied",
				g.worker, g.step, g.arrived, g.lanes, s.laneWait))
		})
	}
	if err := sameHeader(g.h, h); err != nil {
		s.refuse(ps.RejectedWire, err)
		s.failLocked(g, err)
		g.joined[lane] = true
		return nil, nil, err
	}
	for l := range g.lanes {
		if g.joined[l] && at < g.start[l]+g.n[l] && g.start[l] < at+total {
			err := s.refuse(ps.RejectedShape, invalid("push-pull: lane %d's floats %d..%d of the share overlap lane %d's %d..%d", lane, at, at+total, l, g.start[l], g.start[l]+g.n[l]))
			s.failLocked(g, err)
			g.joined[lane] = true
			return nil, nil, err
		}
	}
	g.joined[lane], g.start[lane], g.n[lane] = true, at, total
	// Room for every piece of the lane's reply, so that the shard never
	// waits on a lane's sender while it holds its lock.
	plan := s.core.Config().Plan
	pieces := 1
	for _, r := range ranges {
		pieces += r.Len/pieceFloats + 1 + plan.ChunkAt(r.End()-1) - plan.ChunkAt(r.Off)
	}
	g.outs[lane] = make(chan *pb.TensorOut, pieces)
	g.refs++
	return g, (*g.grads)[at : at+total], nil
}

// gatherLocked returns the gather that the lane h opens joins, starting
// one where the worker has none for h's step and attempt (a retry of a
// push-pull that broke, which cannot complete now). A lane of an attempt
// that already failed gets its error.
func (s *psService) gatherLocked(h *pb.PushHeader) (*gather, error) {
	lane := int(h.Lane)
	g := s.gathers[h.WorkerId]
	switch {
	case g == nil:
	case g.step != h.Step || g.h.Attempt != h.Attempt || g.lanes != int(h.Lanes):
		s.failLocked(g, status.Errorf(codes.Aborted, "push-pull of worker %d, step %d: replaced by lane %d of another attempt, for step %d, before every lane arrived",
			g.worker, g.step, lane, h.Step))
		g = nil
	case g.state != gathering:
		g.joined[lane] = true
		return nil, g.err
	case g.joined[lane]:
		err := s.refuse(ps.RejectedWire, invalid("push-pull of worker %d, step %d: lane %d arrived twice in one attempt", g.worker, g.step, lane))
		s.failLocked(g, err)
		return nil, err
	}
	if g == nil {
		lanes := int(h.Lanes)
		g = &gather{worker: h.WorkerId, step: h.Step, h: h, lanes: lanes, floats: s.core.Floats(),
			start: make([]int, lanes), n: make([]int, lanes), joined: make([]bool, lanes), outs: make([]chan *pb.TensorOut, lanes)}
		s.gathers[h.WorkerId] = g
	}
	return g, nil
}

// refuseLane fails the push that the lane h opens, which its header
// made the shard refuse before it joined: the other lanes learn at once.
// A header that names no lane of a worker of this job, or that does not
// carry the worker's session (it is not the worker's lane), changes
// nothing.
func (s *psService) refuseLane(h *pb.PushHeader, err error) {
	if h == nil || h.Lanes < 2 || h.Lanes > MaxLanes || h.Lane >= h.Lanes || s.core.CheckWorker(h.WorkerId) != nil {
		return
	}
	if sess, serr := ps.SessionOf(h.Session); serr != nil || s.core.CheckSession(h.WorkerId, sess) != nil {
		return
	}
	s.gmu.Lock()
	defer s.gmu.Unlock()
	g, gerr := s.gatherLocked(h)
	if gerr != nil {
		return
	}
	st := status.Convert(err)
	s.failLocked(g, status.Errorf(st.Code(), "push-pull of worker %d, step %d: lane %d of %d: %s", g.worker, g.step, h.Lane, h.Lanes, st.Message()))
	g.joined[h.Lane] = true
}

// sameHeader checks that a lane's header agrees with the first lane's.
func sameHeader(first, h *pb.PushHeader) error {
	if !bytes.Equal(first.Session, h.Session) {
		return invalid("push-pull of worker %d, step %d: lane %d carries another session than lane %d: want the same header on every lane but for ranges and lane (the worker joined again between its lanes?)",
			h.WorkerId, h.Step, h.Lane, first.Lane)
	}
	if first.Lanes != h.Lanes || first.Clock != h.Clock || first.Pull != h.Pull || first.PullStep != h.PullStep || first.PlanVersion != h.PlanVersion {
		return invalid("push-pull of worker %d, step %d: lane %d says lanes %d, clock %d, pull %v for step %d; lane %d said lanes %d, clock %d, pull %v for step %d: want the same header on every lane but for ranges and lane",
			h.WorkerId, h.Step, h.Lane, h.Lanes, h.Clock, h.Pull, h.PullStep, first.Lane, first.Lanes, first.Clock, first.Pull, first.PullStep)
	}
	return nil
}

// failLocked ends g unapplied with err, waking the lanes waiting on it.
func (s *psService) failLocked(g *gather, err error) {
	if g.state != gathering {
		return
	}
	// A failed push stays the worker's until it pushes again, so that
	// its lanes still to come get its error instead of waiting.
	g.state, g.err = gathered, err
	if g.timer != nil {
		g.timer.Stop()
	}
	for _, ch := range g.outs {
		if ch != nil {
			close(ch)
		}
	}
	if g.refs == 0 && g.grads != nil {
		s.floats.Put(g.grads)
		g.grads = nil
	}
}

// arrive marks one lane of g received whole, its pieces scanned as pr
// says; the lane that completes g gets commit true and must apply it.
func (s *psService) arrive(g *gather, pr *pushReader) (commit bool, err error) {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	if g.state != gathering {
		return false, g.err
	}
	g.scan.Merge(g.start[pr.h.Lane], pr.scan)
	g.bytes += pr.bytes
	g.arrived++
	if g.arrived < g.lanes {
		return false, nil
	}
	n := 0
	for _, k := range g.n {
		n += k
	}
	if n != g.floats { // disjoint (join checks) and complete
		err := s.refuse(ps.RejectedShape, invalid("push-pull of worker %d, step %d: its %d lanes carry %d floats, the shard owns %d: want every owned chunk in exactly one lane",
			g.worker, g.step, g.lanes, n, g.floats))
		s.failLocked(g, err)
		return false, err
	}
	g.state = committing
	g.timer.Stop()
	delete(s.gathers, g.worker)
	return true, nil
}

// leave is a lane's end: one that ends with err before g is applied fails
// it. The last lane to leave returns the gradient buffer.
func (s *psService) leave(g *gather, lane int, err error) {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	if err != nil {
		st := status.Convert(err)
		s.failLocked(g, status.Errorf(st.Code(), "push-pull of worker %d, step %d: lane %d of %d: %s", g.worker, g.step, lane, g.lanes, st.Message()))
	}
	if g.refs--; g.refs == 0 && g.state != committing && g.grads != nil {
		s.floats.Put(g.grads)
		g.grads = nil
	}
}

// laneOf returns the lane whose floats hold share position p.
func (g *gather) laneOf(p int) int {
	for l := range g.lanes {
		if p >= g.start[l] && p < g.start[l]+g.n[l] {
			return l
		}
	}
	panic(fmt.Sprintf("rpc: share position %d is in no lane of a complete push-pull", p))
}

// commit applies the gathered push (every lane has arrived) and queues
// each lane its part of the reply, the chunks as ps.Server.PushPull hands
// them over (when is the mode's), so that the lanes together are one
// consistent view in every mode.
func (s *psService) commit(ctx context.Context, g *gather) {
	h := g.h
	sess, _ := ps.SessionOf(h.Session) // checked as each lane's header arrived
	in := ps.Push{WorkerID: g.worker, Session: sess, Step: g.step, Clock: h.Clock, Ranges: s.core.Ranges(), Grads: (*g.grads)[:g.floats], Scan: &g.scan, Bytes: g.bytes}
	queues := make([]*replyQueue, g.lanes)
	for l := range queues {
		queues[l] = &replyQueue{out: g.outs[l]}
	}
	var read ps.ChunkReader
	if h.Pull {
		// Each chunk to the queue of the lane that carries it; the first
		// piece of each lane's reply carries the head.
		read = func(res ps.PushResult, c ps.ChunkRead) {
			queueRead(queues[g.laneOf(s.pos[c.Range.Off])], c, replyHead(res))
		}
	}
	wctx, cancel := deadline.Early(ctx)
	defer cancel()
	res, err := s.core.PushPull(wctx, in, h.PullStep, read, nil)
	s.gmu.Lock()
	defer s.gmu.Unlock()
	if err != nil {
		g.state = gathering // so that failLocked ends it
		s.failLocked(g, toStatus(err))
		return
	}
	if !h.Pull {
		for l := range g.lanes {
			g.outs[l] <- &pb.TensorOut{Msg: &pb.PullPiece{Push: toPushResponse(res)}, Field: pullValuesField}
		}
	}
	g.state = gathered
	for _, ch := range g.outs {
		close(ch)
	}
}

// sendLane streams a lane's part of the reply as the commit queues it,
// until the commit is done or has failed.
func sendLane(stream grpc.ServerStream, g *gather, lane int, gerr func() error) error {
	ch := g.outs[lane]
	ctx := stream.Context()
	for {
		select {
		case out, ok := <-ch:
			if !ok {
				return gerr()
			}
			if err := stream.SendMsg(out); err != nil {
				// SendMsg took out's payload whatever it returns (the
				// codec hands it to gRPC, which frees it): free only
				// what is still queued. Freeing it again panicked the
				// shard when a client went away mid-reply.
				drain(ch)
				return err
			}
		case <-ctx.Done():
			// What the commit queues from now on is freed as it comes
			// (a held chunk goes back to the shard); the commit closes
			// ch whatever happens.
			go drain(ch)
			return toStatus(ctx.Err())
		}
	}
}

// drain frees the payload of every piece left in ch, until it is closed.
func drain(ch <-chan *pb.TensorOut) {
	for out := range ch {
		if out.Payload != nil {
			out.Payload.Free()
		}
	}
}

// pushPullLane ends one lane of a push-pull whose pieces have been read
// (recvErr: they could not be): it waits for the other lanes, applies the
// push if it is the last to arrive, and sends the lane its values.
func (s *psService) pushPullLane(stream grpc.ServerStream, pr *pushReader, recvErr error) (err error) {
	g, lane := pr.g, int(pr.h.Lane)
	defer func() { s.leave(g, lane, err) }()
	if recvErr != nil {
		return recvErr
	}
	commit, err := s.arrive(g, pr)
	if err != nil {
		return err
	}
	if commit {
		s.commit(stream.Context(), g)
	}
	return sendLane(stream, g, lane, func() error {
		s.gmu.Lock()
		defer s.gmu.Unlock()
		return g.err
	})
}
