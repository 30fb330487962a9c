package testcluster

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/shard"
)

// AsWorkers is a dial option for tests that call the shards through raw
// ParameterServer stubs as workers: a push whose header carries no
// session, and a pull as a worker (worker_id >= 0) that carries none, is
// sent with the session of its worker on the shard dialed, as a worker
// that joined sends it; the first such call of a worker binds it there
// (JoinWorker with rebind, which admits nothing). Calls that carry a
// session, and calls for a worker id the shard will not bind (another
// client joined as it, an id outside the job), go as they are. Every
// connection dialed with the same Cluster's AsWorkers shares the
// sessions. client.Client needs none of this: it keeps sessions itself.
func (c *Cluster) AsWorkers() grpc.DialOption {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.binder == nil {
		c.binder = &binder{sessions: map[string]map[int64][]byte{}}
	}
	return grpc.WithChainStreamInterceptor(c.binder.stream)
}

// AsWorkers is Cluster.AsWorkers for servers of the test's own: the
// connections dialed with the option returned share its sessions.
func AsWorkers() grpc.DialOption {
	b := &binder{sessions: map[string]map[int64][]byte{}}
	return grpc.WithChainStreamInterceptor(b.stream)
}

// binder holds the sessions of AsWorkers, per target and worker.
type binder struct {
	mu       sync.Mutex
	sessions map[string]map[int64][]byte
}

// session is worker's session at cc's shard, bound there the first time
// (nil where the shard will not bind it).
func (b *binder) session(ctx context.Context, cc *grpc.ClientConn, worker int64) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.sessions[cc.Target()][worker]; ok {
		return s
	}
	resp, err := pb.NewParameterServerClient(cc).JoinWorker(ctx, &pb.JoinWorkerRequest{WorkerId: worker, PlanVersion: shard.Version, Rebind: true})
	if err != nil {
		return nil
	}
	if b.sessions[cc.Target()] == nil {
		b.sessions[cc.Target()] = map[int64][]byte{}
	}
	b.sessions[cc.Target()][worker] = resp.Session
	return resp.Session
}

func (b *binder) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &bound{ClientStream: cs, b: b, cc: cc, ctx: ctx}, nil
}

// bound is a stream whose messages AsWorkers gives sessions.
type bound struct {
	grpc.ClientStream
	b   *binder
	cc  *grpc.ClientConn
	ctx context.Context
}

func (s *bound) SendMsg(m any) error {
	switch m := m.(type) {
	case *pb.PushPiece:
		if h := m.GetHeader(); h != nil && len(h.Session) == 0 {
			h = proto.Clone(h).(*pb.PushHeader)
			h.Session = s.b.session(s.ctx, s.cc, h.WorkerId)
			return s.ClientStream.SendMsg(&pb.PushPiece{Header: h, Grads: m.Grads, Scales: m.Scales})
		}
	case *pb.PullRequest:
		if m.WorkerId >= 0 && len(m.Session) == 0 {
			r := proto.Clone(m).(*pb.PullRequest)
			r.Session = s.b.session(s.ctx, s.cc, m.WorkerId)
			return s.ClientStream.SendMsg(r)
		}
	}
	return s.ClientStream.SendMsg(m)
}
