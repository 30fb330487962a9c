package collnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shoalml/shoal/internal/deadline"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/secure"
)

// rendezvous is rank 0's Rendezvous service for one group: it collects
// one JoinRequest per rank and answers every Join once all have come.
type rendezvous struct {
	pb.UnimplementedRendezvousServer
	jobID string
	size  int
	log   *slog.Logger

	mu      sync.Mutex
	members []*member     // by rank; nil until that rank joins
	seen    []bool        // by rank: whether it ever joined
	joined  int           // non-nil members
	done    chan struct{} // closed when all ranks have joined
	failed  chan struct{} // closed by fail
	failErr error         // set before failed is closed
	// first is the first failure a rank reported (Report); reporters are
	// the ranks that reported, and reported is closed and replaced at
	// each new one.
	first     *pb.FailureReport
	reporters map[int32]bool
	reported  chan struct{}
}

// member is one rank's registration.
type member struct {
	req     *pb.JoinRequest
	seenIP  string // the caller's IP as the server saw it; "" in process
	waiters int    // Joins of this rank in progress (a retry makes two)
}

var _ pb.RendezvousServer = (*rendezvous)(nil)

func newRendezvous(jobID string, size int, log *slog.Logger) *rendezvous {
	return &rendezvous{
		jobID:     jobID,
		size:      size,
		log:       log,
		members:   make([]*member, size),
		seen:      make([]bool, size),
		done:      make(chan struct{}),
		failed:    make(chan struct{}),
		reporters: map[int32]bool{},
		reported:  make(chan struct{}),
	}
}

// Join registers req's rank and waits until all ranks have joined, rank 0
// fails the rendezvous, or shortly before ctx's deadline.
func (r *rendezvous) Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	if err := r.check(req); err != nil {
		return nil, err
	}
	seenIP, localIP := callerIPs(ctx)
	rank := int(req.Rank)

	r.mu.Lock()
	m := r.members[rank]
	switch {
	case m == nil:
		if r.complete() {
			// Only possible after a member left, which cannot happen once
			// complete; kept for safety.
			r.mu.Unlock()
			return nil, status.Errorf(codes.InvalidArgument, "rendezvous of job %q: rank %d joins after the rendezvous completed", r.jobID, rank)
		}
		m = &member{req: proto.CloneOf(req), seenIP: seenIP}
		r.members[rank] = m
		r.seen[rank] = true
		r.joined++
		if r.joined == r.size {
			close(r.done)
		}
	case proto.Equal(m.req, req):
		// A retry of the same Join (say after a lost answer): wait with it.
	default:
		r.mu.Unlock()
		return nil, status.Errorf(codes.InvalidArgument,
			"rendezvous of job %q: rank %d already joined from %s (host %q), now again from %s (host %q): two processes were given rank %d",
			r.jobID, rank, m.req.DataAddress, m.req.HostId, req.DataAddress, req.HostId, rank)
	}
	m.waiters++
	r.mu.Unlock()

	wctx, cancel := deadline.Early(ctx)
	defer cancel()
	select {
	case <-r.done:
		return r.response(localIP), nil
	case <-r.failed:
		r.leave(rank)
		return nil, r.failErr
	case <-wctx.Done():
	}
	r.mu.Lock()
	if r.complete() {
		r.mu.Unlock()
		return r.response(localIP), nil
	}
	missing := r.missing()
	m.waiters--
	if m.waiters == 0 {
		r.members[rank] = nil
		r.joined--
	}
	r.mu.Unlock()
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil, status.Errorf(codes.Canceled, "rendezvous of job %q: rank %d canceled while %s", r.jobID, rank, missing)
	}
	return nil, status.Errorf(codes.DeadlineExceeded, "rendezvous of job %q: %s", r.jobID, missing)
}

// check validates req against rank 0's group.
func (r *rendezvous) check(req *pb.JoinRequest) error {
	switch {
	case req.JobId != r.jobID:
		return status.Errorf(codes.InvalidArgument, "rendezvous: rank %d joins job %q, but rank 0 runs job %q", req.Rank, req.JobId, r.jobID)
	case int(req.WorldSize) != r.size:
		return status.Errorf(codes.InvalidArgument, "rendezvous of job %q: rank %d has world size %d, rank 0 has %d", r.jobID, req.Rank, req.WorldSize, r.size)
	case req.Rank < 0 || int(req.Rank) >= r.size:
		return status.Errorf(codes.InvalidArgument, "rendezvous of job %q: rank %d not in [0, %d)", r.jobID, req.Rank, r.size)
	case req.DataAddress == "":
		return status.Errorf(codes.InvalidArgument, "rendezvous of job %q: rank %d gave no data address", r.jobID, req.Rank)
	}
	if _, _, err := net.SplitHostPort(req.DataAddress); err != nil {
		return status.Errorf(codes.InvalidArgument, "rendezvous of job %q: rank %d data address %q: %v", r.jobID, req.Rank, req.DataAddress, err)
	}
	return nil
}

// leave unregisters one Join of rank (after a failure).
func (r *rendezvous) leave(rank int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.members[rank]; m != nil && !r.complete() {
		m.waiters--
		if m.waiters == 0 {
			r.members[rank] = nil
			r.joined--
		}
	}
}

// fail ends every Join in progress, and every later one, with err (rank
// 0 gave up). It does nothing once the rendezvous completed.
func (r *rendezvous) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.complete() || r.failErr != nil {
		return
	}
	if _, ok := status.FromError(err); !ok {
		err = status.Errorf(codes.Unavailable, "rendezvous of job %q: rank 0 gave up: %v", r.jobID, err)
	}
	r.failErr = err
	close(r.failed)
}

// complete reports whether every rank has joined. r.mu or r.done's
// closing orders it.
func (r *rendezvous) complete() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// missing says which ranks are missing: those that never joined, and
// those that joined but gave up before the others came; r.mu is held.
func (r *rendezvous) missing() string {
	var never, left []int
	for i, m := range r.members {
		switch {
		case m != nil:
		case r.seen[i]:
			left = append(left, i)
		default:
			never = append(never, i)
		}
	}
	var parts []string
	if len(never) > 0 {
		parts = append(parts, fmt.Sprintf("ranks %v of %d never joined", never, r.size))
	}
	if len(left) > 0 {
		parts = append(parts, fmt.Sprintf("ranks %v of %d joined but gave up", left, r.size))
	}
	return strings.Join(parts, "; ")
}

// response lists every rank for a caller that reached the server at
// localIP. Unspecified hosts in data addresses are filled in: rank 0's
// with localIP (how that caller reaches rank 0's machine), the others'
// with the IP the server saw them at.
func (r *rendezvous) response(localIP string) *pb.JoinResponse {
	// members is immutable once done is closed.
	out := &pb.JoinResponse{Ranks: make([]*pb.RankInfo, r.size)}
	for i, m := range r.members {
		ip := m.seenIP
		if i == 0 {
			ip = localIP
		}
		out.Ranks[i] = &pb.RankInfo{Rank: int32(i), DataAddress: fillHost(m.req.DataAddress, ip), HostId: m.req.HostId}
	}
	return out
}

// callerIPs returns the IP the caller's connection came from and the local
// IP it arrived at; both "" for an in-process call.
func callerIPs(ctx context.Context) (seen, local string) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", ""
	}
	return addrIP(p.Addr), addrIP(p.LocalAddr)
}

func addrIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok && ta.IP != nil {
		return ta.IP.String()
	}
	return ""
}

// fillHost replaces an unspecified host in addr (host:port) by ip, when ip
// is known.
func fillHost(addr, ip string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || ip == "" {
		return addr
	}
	if host != "" {
		if h := net.ParseIP(host); h == nil || !h.IsUnspecified() {
			return addr
		}
	}
	return net.JoinHostPort(ip, port)
}

// Report records the first failure of the job and returns it.
func (r *rendezvous) Report(_ context.Context, req *pb.FailureReport) (*pb.FailureReport, error) {
	if req.JobId != r.jobID {
		return nil, status.Errorf(codes.InvalidArgument, "failure report for job %q, this is job %q", req.JobId, r.jobID)
	}
	if req.Reporter < 0 || int(req.Reporter) >= r.size || req.FailedRank < 0 || int(req.FailedRank) >= r.size {
		return nil, status.Errorf(codes.InvalidArgument, "failure report from rank %d about rank %d: want ranks in [0,%d)", req.Reporter, req.FailedRank, r.size)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == nil {
		r.first = req
		r.log.Warn("first failure reported", "reporter", req.Reporter, "failed_rank", req.FailedRank, "message", req.Message)
	}
	if !r.reporters[req.Reporter] {
		r.reporters[req.Reporter] = true
		close(r.reported)
		r.reported = make(chan struct{})
	}
	return r.first, nil
}

// awaitReports, after a failure was reported, waits until every rank but
// the one that failed has reported too, or for at most d: rank 0 keeps
// the record up while the others, which may have seen only rank 0 leave,
// still ask for it.
func (r *rendezvous) awaitReports(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		r.mu.Lock()
		done := r.first == nil || len(r.reporters) >= r.size-1
		ch := r.reported
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-t.C:
			return
		}
	}
}

// serveRendezvous serves r on lis until the returned stop is called; stop
// waits for answers in flight (at most a second) and for the server's
// goroutine.
func serveRendezvous(r *rendezvous, lis net.Listener, sec *secure.Credentials) (stop func()) {
	g := grpc.NewServer(sec.ServerOptions(r.log, nil)...)
	pb.RegisterRendezvousServer(g, r)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := g.Serve(lis); err != nil {
			r.log.Warn("rendezvous server stopped", "err", err)
		}
	})
	return func() {
		stopped := make(chan struct{})
		wg.Go(func() {
			g.GracefulStop()
			close(stopped)
		})
		t := time.NewTimer(time.Second)
		select {
		case <-stopped:
		case <-t.C:
			g.Stop()
		}
		t.Stop()
		wg.Wait()
	}
}

// joinRemote joins the rendezvous served at master, waiting (within ctx)
// for the server to come up.
func joinRemote(ctx context.Context, master string, req *pb.JoinRequest, sec *secure.Credentials) (*pb.JoinResponse, error) {
	cc, err := grpc.NewClient(master, append(sec.DialOptions(),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  50 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   time.Second,
			},
			MinConnectTimeout: 5 * time.Second,
		}))...)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "master address %q: %v", master, err)
	}
	defer cc.Close()
	return pb.NewRendezvousClient(cc).Join(ctx, req, grpc.WaitForReady(true))
}

// checkResponse verifies that resp lists every rank of a group of size
// once, in order.
func checkResponse(resp *pb.JoinResponse, size int) error {
	if len(resp.Ranks) != size {
		return fmt.Errorf("rendezvous answered %d ranks, want %d", len(resp.Ranks), size)
	}
	for i, ri := range resp.Ranks {
		if int(ri.Rank) != i {
			return fmt.Errorf("rendezvous answered rank %d at position %d", ri.Rank, i)
		}
	}
	return nil
}
