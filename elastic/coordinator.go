package elastic

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/shoalml/shoal/proto/shoalpb"
)

// Member is one live member of an elastic job as membership sees it.
type Member struct {
	// ID is the member's stable id, its launch rank.
	ID int
	// Addr is the host:port of its Elastic service.
	Addr string
}

// Roster tells who is alive (from gossip, in Shoal).
type Roster interface {
	// Live returns the live members, sorted by ID.
	Live() []Member
}

// CoordinatorConfig configures a member's Elastic service.
type CoordinatorConfig struct {
	// JobID names the job; requests for another are refused.
	JobID string
	// Self is this member's id.
	Self int
	// Initial is the size of the first generation: it forms once that many
	// members have come.
	Initial int
	// MinWorkers is the smallest generation after the first (≥ 1).
	MinWorkers int
	// RejoinTimeout is how long a round short of MinWorkers waits for more
	// members before it fails.
	RejoinTimeout time.Duration
	// Roster says who is alive.
	Roster Roster
	// Secret, when set (Secret(gossip key)), is the job's: a remote Reform
	// must be signed with it, so that only the job's members make the ring
	// re-form. Nil takes any request from a member's host.
	Secret []byte
	// Listen opens the listener on which this member, as a new
	// generation's rank 0, serves that generation's rendezvous.
	Listen func() (net.Listener, error)
	// Logger receives the rounds; nil discards.
	Logger *slog.Logger
}

// Coordinator is a member's Elastic service. Only the live member with
// the lowest id coordinates a round: it waits until every live member
// (and any member that asks, such as one that restarted) has asked for a
// new generation, then answers each with its rank in it.
type Coordinator struct {
	pb.UnimplementedElasticServer
	cfg CoordinatorConfig
	log *slog.Logger

	mu      sync.Mutex
	waiting map[int]*waiter // by member id
	changed chan struct{}   // closed and replaced when waiting or the roster changes
	short   time.Time       // when the round fell short of its minimum; zero when not
	last    []int           // the members of the latest generation formed here

	// refusals counts the refused Reforms by reason (Refusals), under
	// rmu; every limits their log lines.
	rmu      sync.Mutex
	refusals map[string]int64
	every    rate.Sometimes
}

// Reasons a Reform is refused for, as Refusals counts them.
const (
	RefusedSignature = "signature" // remote, and not signed with the job's secret
	RefusedHost      = "host"      // from a host other than the one membership holds for the member
	RefusedRequest   = "request"   // another job's, or an id, generation or step out of range
	RefusedMember    = "member"    // for a member the job's membership does not hold (yet): a joiner asks again
)

// waiter is one member's Reform call in progress.
type waiter struct {
	req  *pb.ReformRequest
	done chan result // buffered: the round's answer
}

type result struct {
	resp *pb.ReformResponse
	// lis is the listener of the generation's rendezvous, for rank 0 (this
	// member) only.
	lis net.Listener
	err error
}

var _ pb.ElasticServer = (*Coordinator)(nil)

// maxReason caps the reason a request carries, which goes to the log;
// maxGeneration keeps generation numbers far from overflowing.
const (
	maxReason     = 1 << 10
	maxGeneration = 1 << 62
)

// NewCoordinator returns a member's Elastic service.
func NewCoordinator(cfg CoordinatorConfig) (*Coordinator, error) {
	switch {
	case cfg.Initial < 1:
		return nil, fmt.Errorf("elastic: initial size %d: want >= 1", cfg.Initial)
	case cfg.MinWorkers < 1:
		return nil, fmt.Errorf("elastic: --min-workers %d: want >= 1", cfg.MinWorkers)
	case cfg.RejoinTimeout <= 0:
		return nil, fmt.Errorf("elastic: --rejoin-timeout %v: want > 0", cfg.RejoinTimeout)
	case cfg.Roster == nil || cfg.Listen == nil:
		return nil, fmt.Errorf("elastic: a coordinator needs a Roster and a Listen function")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Coordinator{cfg: cfg, log: log.With("component", "elastic", "member", cfg.Self), waiting: map[int]*waiter{}, changed: make(chan struct{}),
		refusals: map[string]int64{RefusedSignature: 0, RefusedHost: 0, RefusedRequest: 0, RefusedMember: 0}, every: rate.Sometimes{Interval: time.Second}}, nil
}

// Pending reports whether some member waits for a new generation: one
// that joins, or one that left the current generation after a failure.
func (c *Coordinator) Pending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting) > 0
}

// RosterChanged tells the coordinator that the roster may have changed,
// so that a round waiting for a member that died can close.
func (c *Coordinator) RosterChanged() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wakeLocked()
}

// changes returns a channel that is closed at the next change of the
// roster or of the waiting members.
func (c *Coordinator) changes() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

func (c *Coordinator) wakeLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Reform is the RPC: it waits for the round that puts the caller into a
// new generation. A request must come from the host that membership
// holds for its member id, so that another member of the gossip cannot
// speak for a live rank.
func (c *Coordinator) Reform(ctx context.Context, req *pb.ReformRequest) (*pb.ReformResponse, error) {
	if _, remote := peer.FromContext(ctx); remote {
		if err := verify(c.cfg.Secret, req); err != nil {
			return nil, c.refuse(ctx, RefusedSignature, req, err)
		}
	}
	if err := c.checkCaller(ctx, int(req.Member)); err != nil {
		return nil, c.refuse(ctx, RefusedHost, req, err)
	}
	res := c.reform(ctx, req)
	if res.lis != nil {
		// Only this member is a generation's rank 0; a remote caller
		// never gets the listener.
		res.lis.Close()
		return nil, status.Errorf(codes.Internal, "elastic: member %d made rank 0 but asked remotely", req.Member)
	}
	return res.resp, res.err
}

// refuse counts a Reform refused for reason and returns err. It logs the
// refusal at most once a second, with the count of refusals so far, so
// that a flood of forged requests (a loopback process can send thousands
// a second) cannot fill the log; a member's own request for a membership
// that has not reached this one yet (RefusedMember) is counted only, as
// it asks again.
func (c *Coordinator) refuse(ctx context.Context, reason string, req *pb.ReformRequest, err error) error {
	c.rmu.Lock()
	c.refusals[reason]++
	var n int64
	for _, k := range c.refusals {
		n += k
	}
	c.rmu.Unlock()
	if reason == RefusedMember {
		return err
	}
	c.every.Do(func() {
		from := "in process"
		if p, ok := peer.FromContext(ctx); ok {
			from = p.Addr.String()
		}
		c.log.Warn("refused a Reform", "from", req.Member, "peer", from, "reason", reason, "refused", n, "err", err)
	})
	return err
}

// Refusals returns how many Reforms this service refused, by reason
// (every reason, RefusedSignature, …, zero or not): the
// shoal_elastic_refused_reforms_total metric.
// Safe from any goroutine.
func (c *Coordinator) Refusals() map[string]int64 {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return maps.Clone(c.refusals)
}

// checkCaller refuses a remote request for member id from a host other
// than the one membership holds for it.
func (c *Coordinator) checkCaller(ctx context.Context, id int) error {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil // in process
	}
	from, ok := p.Addr.(*net.TCPAddr)
	if !ok {
		return nil
	}
	for _, m := range c.cfg.Roster.Live() {
		if m.ID != id {
			continue
		}
		host, _, err := net.SplitHostPort(m.Addr)
		if err != nil {
			return nil
		}
		ip := net.ParseIP(host)
		if ip == nil || ip.Equal(from.IP) || (from.IP.IsLoopback() && localIP(ip)) {
			// From that host; or from this host over loopback to a
			// member that membership places on this host (it gossips on
			// one of this machine's addresses and dialed another).
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "elastic: member %d is at %s in the membership, but this request came from %s", id, host, from.IP)
	}
	return nil // not a member: reform says so
}

// localIP says whether ip is loopback or an address of this machine.
func localIP(ip net.IP) bool {
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// reform registers req and waits for its round, ctx, or the round's
// failure. For this member itself, the result carries the listener of
// the generation's rendezvous.
func (c *Coordinator) reform(ctx context.Context, req *pb.ReformRequest) result {
	if req.JobId != c.cfg.JobID {
		return result{err: c.refuse(ctx, RefusedRequest, req, status.Errorf(codes.InvalidArgument, "elastic: job %q asks coordinator of job %q", req.JobId, c.cfg.JobID))}
	}
	if req.Member < 0 {
		return result{err: c.refuse(ctx, RefusedRequest, req, status.Errorf(codes.InvalidArgument, "elastic: member id %d: want >= 0", req.Member))}
	}
	if req.Generation > maxGeneration || req.Step < 0 {
		return result{err: c.refuse(ctx, RefusedRequest, req, status.Errorf(codes.InvalidArgument, "elastic: generation %d, step %d: want 0..%d and >= 0", req.Generation, req.Step, uint64(maxGeneration)))}
	}
	if len(req.Reason) > maxReason {
		req.Reason = req.Reason[:maxReason] + "…"
	}
	id := int(req.Member)
	w := &waiter{req: req, done: make(chan result, 1)}
	c.mu.Lock()
	if err := c.coordinatingLocked(); err != nil {
		c.mu.Unlock()
		return result{err: err}
	}
	if live := c.cfg.Roster.Live(); len(live) > 0 && !slices.ContainsFunc(live, func(m Member) bool { return m.ID == id }) {
		// Only members that gossip admitted (with the job's key, when
		// there is one) take part; a joiner asks again once its gossip
		// has spread.
		c.mu.Unlock()
		return result{err: c.refuse(ctx, RefusedMember, req, status.Errorf(codes.FailedPrecondition, "elastic: member %d is not in the job's membership (yet): join the gossip first", id))}
	}
	if old := c.waiting[id]; old != nil {
		old.done <- result{err: status.Errorf(codes.Aborted, "elastic: member %d asked again", id)}
	}
	c.waiting[id] = w
	c.log.Info("member waits for a new generation", "from", id, "generation", req.Generation, "reason", req.Reason)
	c.wakeLocked()
	c.mu.Unlock()

	timer := time.NewTimer(c.cfg.RejoinTimeout)
	defer timer.Stop()
	for {
		c.mu.Lock()
		c.closeLocked(time.Now())
		changed := c.changed
		c.mu.Unlock()
		select {
		case r := <-w.done:
			return r
		case <-changed:
		case <-timer.C:
			// Re-check the shortfall's clock; the loop fails the round
			// once RejoinTimeout has passed since it fell short.
			timer.Reset(c.cfg.RejoinTimeout / 4)
		case <-ctx.Done():
			c.mu.Lock()
			if c.waiting[id] == w {
				delete(c.waiting, id)
				c.wakeLocked()
			}
			c.mu.Unlock()
			select {
			case r := <-w.done: // answered meanwhile
				if r.lis != nil {
					r.lis.Close()
				}
			default:
			}
			return result{err: status.FromContextError(ctx.Err()).Err()}
		}
	}
}

// coordinatingLocked returns nil when this member is the lowest live one,
// else a FailedPrecondition naming the one that is.
func (c *Coordinator) coordinatingLocked() error {
	live := c.cfg.Roster.Live()
	if len(live) > 0 && live[0].ID < c.cfg.Self {
		return status.Errorf(codes.FailedPrecondition, "elastic: member %d does not coordinate: member %d at %s does", c.cfg.Self, live[0].ID, live[0].Addr)
	}
	if len(live) > 0 && !slices.ContainsFunc(live, func(m Member) bool { return m.ID == c.cfg.Self }) {
		// Membership counts this member out (declared dead, or leaving):
		// the others will find the next coordinator.
		return status.Errorf(codes.FailedPrecondition, "elastic: member %d does not coordinate: membership does not count it alive", c.cfg.Self)
	}
	return nil
}

// closeLocked closes the round when it can: every live member has asked,
// and there are enough of them. A round short of members fails once it
// has been short for RejoinTimeout.
func (c *Coordinator) closeLocked(now time.Time) {
	if len(c.waiting) == 0 {
		c.short = time.Time{}
		return
	}
	if err := c.coordinatingLocked(); err != nil {
		c.failLocked(err)
		return
	}
	if c.waiting[c.cfg.Self] == nil {
		return // this member still trains: it will ask at its next step
	}
	for _, m := range c.cfg.Roster.Live() {
		if c.waiting[m.ID] == nil {
			return // alive and not yet asking
		}
	}
	var gen uint64
	var step int64
	ids := make([]int, 0, len(c.waiting))
	for id, w := range c.waiting {
		ids = append(ids, id)
		gen = max(gen, w.req.Generation)
		step = max(step, w.req.Step)
	}
	slices.Sort(ids)
	need := c.cfg.MinWorkers
	if gen == 0 {
		need = c.cfg.Initial // the first generation: everyone launched
	}
	if err := quorum(c.waiting, gen); err != "" {
		// Maybe the others are alive beyond a network partition and
		// this side is the smaller: wait for them (or fail) rather than
		// train a second ring beside theirs.
		c.waitShortLocked(now, err+"; waited --rejoin-timeout %v for them")
		return
	}
	if len(ids) < need {
		c.waitShortLocked(now, c.shortfall(ids, need, gen, step)+"; waited --rejoin-timeout %v for more")
		return
	}
	c.short = time.Time{}
	lis, err := c.cfg.Listen()
	if err != nil {
		c.failLocked(status.Errorf(codes.Unavailable, "elastic: listening for the new generation's rendezvous: %v", err))
		return
	}
	resp := &pb.ReformResponse{Generation: gen + 1, Master: lis.Addr().String(), Root: -1}
	for rank, id := range ids {
		resp.Members = append(resp.Members, int32(id))
		if req := c.waiting[id].req; resp.Root < 0 && req.Generation == gen {
			resp.Root, resp.Step = int32(rank), req.Step
		}
	}
	for _, id := range c.last {
		if c.waiting[id] == nil {
			resp.Left = append(resp.Left, int32(id))
		}
	}
	c.last = ids
	c.log.Info("generation formed", "generation", resp.Generation, "members", ids, "left", resp.Left, "root", resp.Root, "step", resp.Step)
	for id, w := range c.waiting {
		r := result{resp: resp}
		if id == c.cfg.Self {
			r.lis = lis
		}
		w.done <- r
	}
	clear(c.waiting)
	c.wakeLocked()
}

// waitShortLocked keeps a round that cannot form waiting, and fails it
// with why (a format taking the timeout) once it has waited
// RejoinTimeout.
func (c *Coordinator) waitShortLocked(now time.Time, why string) {
	if c.short.IsZero() {
		c.short = now
	}
	if now.Sub(c.short) >= c.cfg.RejoinTimeout {
		c.failLocked(status.Errorf(codes.ResourceExhausted, "elastic: "+why, c.cfg.RejoinTimeout))
	}
}

// quorum says why the members waiting cannot form the generation after
// gen, or "" when they can: they must be at least half of the members of
// generation gen (as its survivors report them), and when exactly half,
// hold its lowest member. Two sides of a partition thus never both go on.
func quorum(waiting map[int]*waiter, gen uint64) string {
	var prev []int32
	for _, w := range waiting {
		if w.req.Generation == gen && len(w.req.Previous) > 0 {
			prev = w.req.Previous
			break
		}
	}
	if gen == 0 || len(prev) == 0 {
		return ""
	}
	kept := 0
	for _, id := range prev {
		if waiting[int(id)] != nil {
			kept++
		}
	}
	lowest := slices.Min(prev)
	if 2*kept > len(prev) || (2*kept == len(prev) && waiting[int(lowest)] != nil) {
		return ""
	}
	return fmt.Sprintf("only %d of the %d members %v of generation %d are here, not a quorum (more than half, or half with member %d): the others may be alive beyond a network partition",
		kept, len(prev), prev, gen, lowest)
}

// shortfall says who is missing from a round of ids that needs need.
func (c *Coordinator) shortfall(ids []int, need int, gen uint64, step int64) string {
	var gone []string
	for _, id := range c.last {
		if !slices.Contains(ids, id) {
			gone = append(gone, fmt.Sprint(id))
		}
	}
	what := fmt.Sprintf("%d member(s) %v of the %d that --min-workers needs", len(ids), ids, need)
	if gen == 0 {
		what = fmt.Sprintf("%d member(s) %v of the %d launched", len(ids), ids, need)
	}
	if len(gone) > 0 {
		what += fmt.Sprintf("; member(s) %s of generation %d left at step %d", strings.Join(gone, ", "), gen, step)
	}
	return "only " + what
}

// failLocked answers every waiting member with err.
func (c *Coordinator) failLocked(err error) {
	for _, w := range c.waiting {
		w.done <- result{err: err}
	}
	clear(c.waiting)
	c.short = time.Time{}
	c.wakeLocked()
}
