package cluster

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Detection holds memberlist's failure-detection and gossip timings.
//
// A node that stops answering is found by the next probe that picks it
// (nodes are probed round-robin, one every ProbeInterval, so within about
// (N-1)·ProbeInterval), suspected after ProbeTimeout plus the indirect
// probes, and declared dead SuspicionMult·max(1, log10 N)·ProbeInterval
// later unless it refutes. For fewer than ten nodes the time from a
// silent death to the dead event is therefore about
// (N-1)·ProbeInterval + ProbeInterval + SuspicionMult·ProbeInterval.
type Detection struct {
	// ProbeInterval is how often a node probes one random peer.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct probe waits for its ack before
	// asking IndirectChecks other nodes to probe; it must be below
	// ProbeInterval.
	ProbeTimeout   time.Duration
	IndirectChecks int
	// SuspicionMult scales the time a suspect has to refute before it is
	// declared dead; SuspicionMaxTimeoutMult caps how far that time
	// stretches when few peers confirm the suspicion.
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	// AwarenessMaxMultiplier bounds how much a node that sees itself
	// lagging (missed acks) slows its own probing to avoid false deaths.
	AwarenessMaxMultiplier int
	// GossipInterval, GossipNodes and RetransmitMult set how fast a state
	// change (suspect, dead, join) spreads.
	GossipInterval time.Duration
	GossipNodes    int
	RetransmitMult int
	// GossipToTheDeadTime is how long dead nodes are still gossiped to,
	// so that a partitioned node learns it was declared dead.
	GossipToTheDeadTime time.Duration
	// PushPullInterval is how often a node syncs its full state with a
	// random peer over TCP; it also bounds how long a rejoin that was
	// refused (see DeadNodeReclaimTime) waits for another chance.
	PushPullInterval time.Duration
	// TCPTimeout bounds a push/pull or a join's dial to one peer.
	TCPTimeout time.Duration
	// DeadNodeReclaimTime is how long a node must have been dead before
	// its name may come back from a different address (a restarted
	// process on a new port). A name whose old holder is still alive is
	// never taken over.
	DeadNodeReclaimTime time.Duration
	// ReconnectInterval is how often a node tries to reach one member it
	// saw die (not leave), and ReconnectTimeout how long after the death
	// it keeps trying: Serf's reconnect, which heals a partition that
	// outlasted GossipToTheDeadTime. Memberlist alone never contacts a
	// dead member again, so a node cut off for longer would stay alone
	// with every other node dead in its view, and they with it dead in
	// theirs, though both sides run on.
	ReconnectInterval time.Duration
	ReconnectTimeout  time.Duration
}

// LoopbackDetection is tuned for processes on one machine, which is often
// a busy one: a process that goes unscheduled for a second or two (a
// 2-core machine training a CNN beside other work) must not be declared
// dead, as it was with a 100 ms ack timeout and 800 ms of suspicion (live
// workers died and rejoined several times in one run, and a false death
// changed a sync run's result). Probes every 200 ms with a 100 ms ack
// timeout, as before, but suspicion lasts 15 probe intervals (3 s below
// ten nodes: twice the 1.5 s stall TestAStalledNodeIsNotDeclaredDead
// survives, where 4 intervals, 800 ms, did not); missed acks stretch the
// node's own timeouts up to 4×; gossip every 50 ms to 3 nodes, full sync
// every 2 s. A silent death among three nodes is then declared in about
// 3.5 to 4 s (TestMembershipLoopback logs it); a process that exits
// closes its connections, which the calls on them notice first.
func LoopbackDetection() Detection {
	return Detection{
		ProbeInterval:           200 * time.Millisecond,
		ProbeTimeout:            100 * time.Millisecond,
		IndirectChecks:          3,
		SuspicionMult:           15,
		SuspicionMaxTimeoutMult: 4,
		AwarenessMaxMultiplier:  4,
		GossipInterval:          50 * time.Millisecond,
		GossipNodes:             3,
		RetransmitMult:          4,
		GossipToTheDeadTime:     5 * time.Second,
		PushPullInterval:        2 * time.Second,
		TCPTimeout:              2 * time.Second,
		DeadNodeReclaimTime:     200 * time.Millisecond,
		ReconnectInterval:       500 * time.Millisecond,
		ReconnectTimeout:        time.Minute,
	}
}

// LANDetection is tuned for a data-centre network, aiming at a dead node
// declared within about 5 s for small jobs (memberlist's own LAN profile
// takes 5–10 s): probes every 500 ms with a 250 ms ack timeout,
// suspicion 4 probe intervals (2 s below ten nodes, scaled by log10 N
// above); gossip every 100 ms, full sync every 10 s, and room for a slow
// node (awareness ×8, 5 s TCP).
func LANDetection() Detection {
	d := LoopbackDetection()
	d.ProbeInterval = 500 * time.Millisecond
	d.ProbeTimeout = 250 * time.Millisecond
	d.SuspicionMult = 4
	d.AwarenessMaxMultiplier = 8
	d.GossipInterval = 100 * time.Millisecond
	d.GossipToTheDeadTime = 15 * time.Second
	d.PushPullInterval = 10 * time.Second
	d.TCPTimeout = 5 * time.Second
	d.DeadNodeReclaimTime = time.Second
	d.ReconnectInterval = 2 * time.Second
	d.ReconnectTimeout = 5 * time.Minute
	return d
}

func (d Detection) validate() error {
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"ProbeInterval", d.ProbeInterval}, {"ProbeTimeout", d.ProbeTimeout},
		{"GossipInterval", d.GossipInterval}, {"GossipToTheDeadTime", d.GossipToTheDeadTime},
		{"PushPullInterval", d.PushPullInterval}, {"TCPTimeout", d.TCPTimeout},
		{"DeadNodeReclaimTime", d.DeadNodeReclaimTime},
		{"ReconnectInterval", d.ReconnectInterval}, {"ReconnectTimeout", d.ReconnectTimeout},
	} {
		if f.v <= 0 {
			return fmt.Errorf("detection %s is %v, want > 0", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"IndirectChecks", d.IndirectChecks}, {"SuspicionMult", d.SuspicionMult},
		{"SuspicionMaxTimeoutMult", d.SuspicionMaxTimeoutMult}, {"AwarenessMaxMultiplier", d.AwarenessMaxMultiplier},
		{"GossipNodes", d.GossipNodes}, {"RetransmitMult", d.RetransmitMult},
	} {
		if f.v < 1 {
			return fmt.Errorf("detection %s is %d, want >= 1", f.name, f.v)
		}
	}
	if d.ProbeTimeout >= d.ProbeInterval {
		return fmt.Errorf("detection ProbeTimeout %v is not below ProbeInterval %v", d.ProbeTimeout, d.ProbeInterval)
	}
	return nil
}

// Config configures a Membership.
type Config struct {
	// Name identifies the node in the cluster and must be unique among
	// live nodes, e.g. "worker-3"; a restarted process reuses its name.
	Name string
	// BindAddr and BindPort are where gossip listens (UDP and TCP on the
	// same port); port 0 picks a free one. AdvertiseAddr and AdvertisePort,
	// when set, are what peers are told instead.
	BindAddr      string
	BindPort      int
	AdvertiseAddr string
	AdvertisePort int
	// Meta is what this node gossips about itself; it must encode
	// (Meta.Encode).
	Meta Meta
	// Detection sets the failure-detection timings.
	Detection Detection
	// KeyFile, when set, names a file holding exactly 32 raw bytes: the
	// AES-256 key that encrypts and authenticates all gossip. Every node
	// must use the same key; a node with another key (or none) is not
	// admitted. Make one with: (umask 077; head -c 32 /dev/urandom > gossip.key)
	KeyFile string
	// Logger receives memberlist's logs at their levels, with
	// component=membership; nil discards them.
	Logger *slog.Logger

	// transport, when set, replaces memberlist's own UDP/TCP transport
	// (tests cut a node off the network with it); BindPort must then be
	// the port it listens on.
	transport memberlist.Transport
}

// DefaultConfig gossips on an ephemeral loopback port with
// LoopbackDetection and no encryption. Name and Meta must be set.
func DefaultConfig() Config {
	return Config{BindAddr: "127.0.0.1", Detection: LoopbackDetection()}
}

// GossipKeySize is the size of a gossip key file: AES-256.
const GossipKeySize = 32

// WriteGossipKey writes a new random gossip key (GossipKeySize bytes) to
// path, readable by its owner only: a launcher that starts every member
// itself (shoal train) gives them a key of the run's own, so that no
// process outside the run can join its gossip, announce a member or move
// the workers to an address of its choosing.
func WriteGossipKey(path string) error {
	key := make([]byte, GossipKeySize)
	if _, err := crand.Read(key); err != nil {
		return fmt.Errorf("gossip key: %w", err)
	}
	if err := os.WriteFile(path, key, 0o600); err != nil {
		return fmt.Errorf("gossip key: %w", err)
	}
	return nil
}

// ReadGossipKey reads a gossip key file: exactly GossipKeySize raw bytes.
func ReadGossipKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gossip key file: %w", err)
	}
	if len(key) != GossipKeySize {
		return nil, fmt.Errorf("gossip key file %s: %d bytes, want exactly %d raw bytes (AES-256)", path, len(key), GossipKeySize)
	}
	return key, nil
}

// Membership is a node's place in the gossip cluster: it joins through
// hashicorp/memberlist and turns memberlist's events into Views through a
// Tracker.
//
// Its methods may be called concurrently. It owns memberlist's goroutines
// and one of its own that delivers views; Close stops them.
type Membership struct {
	ml *memberlist.Memberlist
	// addr is the local node's gossip address, read once at Create: the
	// node memberlist's LocalNode returns is its own state, which
	// SetMeta's UpdateNode rewrites, so reading it from another
	// goroutine races (the reconnect loop did, against Leave).
	addr   string
	name   string
	logger *slog.Logger
	views  chan View
	done   chan struct{}
	wake   chan struct{} // a view is pending; capacity 1
	wg     sync.WaitGroup

	mu      sync.Mutex
	tracker *Tracker
	pending []View // views not yet taken from the channel, oldest first
	meta    []byte // this node's encoded Meta
	closed  bool
	dead    map[string]deadPeer // members seen to die, by name, until they come back

	closeOnce sync.Once
	// stopping is set by Leave and Close: memberlist's errors from then
	// on (sends on the sockets it is closing) are expected, and logged at
	// debug level.
	stopping atomic.Bool
}

// New validates cfg, starts gossip on its address and returns the
// Membership, whose first view holds only this node. It does not contact
// anyone: call Join.
func New(cfg Config) (*Membership, error) {
	if cfg.Name == "" {
		return nil, errors.New("membership config: Name is empty, want a node name unique in the cluster")
	}
	if cfg.BindPort < 0 || cfg.BindPort > 65535 || cfg.AdvertisePort < 0 || cfg.AdvertisePort > 65535 {
		return nil, fmt.Errorf("membership config: BindPort %d, AdvertisePort %d: want 0 to 65535", cfg.BindPort, cfg.AdvertisePort)
	}
	meta, err := cfg.Meta.Encode()
	if err != nil {
		return nil, fmt.Errorf("membership config: Meta: %w", err)
	}
	if err := cfg.Detection.validate(); err != nil {
		return nil, fmt.Errorf("membership config: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "membership", "node", cfg.Name)

	m := &Membership{
		name:    cfg.Name,
		logger:  logger,
		views:   make(chan View),
		done:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
		tracker: NewTracker(),
		meta:    meta,
		dead:    map[string]deadPeer{},
	}

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = cfg.BindPort
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	mc.AdvertisePort = cfg.AdvertisePort
	d := cfg.Detection
	mc.ProbeInterval = d.ProbeInterval
	mc.ProbeTimeout = d.ProbeTimeout
	mc.IndirectChecks = d.IndirectChecks
	mc.SuspicionMult = d.SuspicionMult
	mc.SuspicionMaxTimeoutMult = d.SuspicionMaxTimeoutMult
	mc.AwarenessMaxMultiplier = d.AwarenessMaxMultiplier
	mc.GossipInterval = d.GossipInterval
	mc.GossipNodes = d.GossipNodes
	mc.RetransmitMult = d.RetransmitMult
	mc.GossipToTheDeadTime = d.GossipToTheDeadTime
	mc.PushPullInterval = d.PushPullInterval
	mc.TCPTimeout = d.TCPTimeout
	mc.DeadNodeReclaimTime = d.DeadNodeReclaimTime
	mc.Transport = cfg.transport
	mc.Delegate = (*metaDelegate)(m)
	mc.Events = (*eventDelegate)(m)
	mc.Logger = log.New(slogWriter{l: logger, stopping: &m.stopping, limit: &logLimit{now: time.Now}}, "", 0)
	if cfg.KeyFile != "" {
		if mc.SecretKey, err = ReadGossipKey(cfg.KeyFile); err != nil {
			return nil, fmt.Errorf("membership config: %w", err)
		}
		if fi, err := os.Stat(cfg.KeyFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
			logger.Warn("a secret file others can read", "component", "auth",
				"problem", fmt.Sprintf("--gossip-key-file %s can be read by other users (mode %04o): chmod 600 it", cfg.KeyFile, fi.Mode().Perm()))
		}
	}

	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("start gossip on %s: %w", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.BindPort)), err)
	}
	m.ml = ml
	m.addr = ml.LocalNode().Address()
	m.wg.Go(m.deliver)
	m.wg.Go(func() { m.reconnect(d.ReconnectInterval, d.ReconnectTimeout) })
	return m, nil
}

// Addr returns the address peers reach this node's gossip at, host:port.
func (m *Membership) Addr() string {
	return m.addr
}

// Join contacts peers (host:port each) and joins their cluster. It
// succeeds when at least one answered; otherwise the error names each
// failure. It blocks for up to the Detection's TCPTimeout per peer, or
// until ctx is done (the attempt then finishes in the background and Close
// waits for it).
func (m *Membership) Join(ctx context.Context, peers []string) error {
	if len(peers) == 0 {
		return errors.New("join gossip cluster: no peers given, want at least one host:port")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("join gossip cluster via %v: %w", peers, err)
	}
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	m.wg.Go(func() {
		n, err := m.ml.Join(peers)
		res <- result{n, err}
	})
	select {
	case r := <-res:
		if r.n == 0 {
			return &JoinError{Peers: peers, Errs: unwrapAll(r.err)}
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("join gossip cluster via %v: %w", peers, ctx.Err())
	}
}

// JoinError is Join's error when no peer could be joined.
type JoinError struct {
	Peers []string
	// Errs holds memberlist's error for each failed attempt.
	Errs []error
}

func (e *JoinError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "join gossip cluster: reached none of %v (a different gossip key is one cause)", e.Peers)
	for i, err := range e.Errs {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e *JoinError) Unwrap() []error { return e.Errs }

// unwrapAll flattens memberlist's multierror into its errors.
func unwrapAll(err error) []error {
	if err == nil {
		return nil
	}
	if m, ok := err.(interface{ Unwrap() []error }); ok {
		return m.Unwrap()
	}
	if m, ok := err.(interface{ WrappedErrors() []error }); ok {
		return m.WrappedErrors()
	}
	return []error{err}
}

// Views returns the channel of membership views, in version order; the
// first holds this node alone. Views are queued, not dropped, while the
// receiver is busy, so a consumer must keep reading. The channel is closed
// by Close.
func (m *Membership) Views() <-chan View {
	return m.views
}

// View returns the current membership, with no changes listed.
func (m *Membership) View() View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tracker.View()
}

// SetMeta changes what this node gossips (say, a new plan version) and
// waits up to timeout for the change to be sent to the cluster.
func (m *Membership) SetMeta(meta Meta, timeout time.Duration) error {
	b, err := meta.Encode()
	if err != nil {
		return fmt.Errorf("set node metadata: %w", err)
	}
	m.mu.Lock()
	m.meta = b
	m.mu.Unlock()
	if err := m.ml.UpdateNode(timeout); err != nil {
		return fmt.Errorf("set node metadata: %w", err)
	}
	return nil
}

// Leave tells the cluster this node is leaving, so that the others see a
// leave rather than a death: it first gossips its metadata with Leaving
// set, then memberlist's leave message, waiting up to timeout for each to
// go out. Call Close afterwards.
func (m *Membership) Leave(timeout time.Duration) error {
	m.stopping.Store(true)
	m.mu.Lock()
	meta, err := DecodeMeta(m.meta)
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("leave gossip cluster: own metadata: %w", err)
	}
	meta.Leaving = true
	if err := m.SetMeta(meta, timeout); err != nil {
		return fmt.Errorf("leave gossip cluster: %w", err)
	}
	if err := m.ml.Leave(timeout); err != nil {
		return fmt.Errorf("leave gossip cluster: %w", err)
	}
	return nil
}

// Close stops gossip without leaving (the others will declare this node
// dead unless Leave came first), stops the delivering goroutine, waits for
// every goroutine it started and closes the Views channel. It is safe to
// call more than once.
func (m *Membership) Close() error {
	m.stopping.Store(true)
	var err error
	m.closeOnce.Do(func() {
		err = m.ml.Shutdown()
		m.mu.Lock()
		m.closed = true
		m.pending = nil
		m.mu.Unlock()
		close(m.done)
		m.wg.Wait()
	})
	if err != nil {
		return fmt.Errorf("stop gossip: %w", err)
	}
	return nil
}

// deliver sends pending views to the Views channel until Close.
func (m *Membership) deliver() {
	defer close(m.views)
	for {
		m.mu.Lock()
		if len(m.pending) == 0 {
			m.mu.Unlock()
			select {
			case <-m.wake:
				continue
			case <-m.done:
				return
			}
		}
		v := m.pending[0]
		m.pending[0] = View{}
		m.pending = m.pending[1:]
		m.mu.Unlock()
		select {
		case m.views <- v:
		case <-m.done:
			return
		}
	}
}

// deadPeer is a member seen to die: where it was, and since when.
type deadPeer struct {
	addr  string
	since time.Time
}

// reconnect tries, every interval, to join one member seen to die within
// timeout, chosen at random. A member that really died costs a failed
// dial; one that was only cut off answers once the network is back, and
// the push/pull of the join tells each side that the other declared it
// dead: both refute, and the next join (by either side) brings the two
// views together again.
func (m *Membership) reconnect(interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-t.C:
		}
		m.mu.Lock()
		var names []string
		for name, p := range m.dead {
			if time.Since(p.since) > timeout {
				delete(m.dead, name)
				continue
			}
			names = append(names, name)
		}
		var peer deadPeer
		var name string
		if len(names) > 0 {
			name = names[rand.IntN(len(names))]
			peer = m.dead[name]
		}
		m.mu.Unlock()
		if name == "" || m.stopping.Load() || peer.addr == m.Addr() {
			// (A container reconnected to its network may be given the
			// address a dead member had.)
			continue
		}
		if _, err := m.ml.Join([]string{peer.addr}); err != nil {
			m.logger.Debug("reconnect to a member declared dead failed", "peer", name, "peer_addr", peer.addr, "err", err)
			continue
		}
		m.logger.Info("reached a member declared dead", "peer", name, "peer_addr", peer.addr)
	}
}

// step feeds one event to the tracker and queues the view it yields.
// memberlist calls it from its own goroutines, possibly after Close.
func (m *Membership) step(ev Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	switch ev.Kind {
	case EventDead:
		if ev.Name != m.name {
			m.dead[ev.Name] = deadPeer{addr: ev.Addr, since: time.Now()}
		}
	default:
		delete(m.dead, ev.Name)
	}
	v, changed, err := m.tracker.Step(ev)
	if err != nil {
		m.logger.Warn("membership event ignored", "err", err)
		return
	}
	if !changed {
		return
	}
	m.pending = append(m.pending, v)
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// eventDelegate is Membership as memberlist's EventDelegate.
type eventDelegate Membership

var _ memberlist.EventDelegate = (*eventDelegate)(nil)

func (d *eventDelegate) NotifyJoin(n *memberlist.Node)   { d.alive(EventJoin, n) }
func (d *eventDelegate) NotifyUpdate(n *memberlist.Node) { d.alive(EventUpdate, n) }

// NotifyLeave reports both graceful leaves and deaths (memberlist's Node
// does not carry which), so a node's last metadata tells them apart: Leave
// sets Meta.Leaving before it goes.
func (d *eventDelegate) NotifyLeave(n *memberlist.Node) {
	kind := EventDead
	if meta, err := DecodeMeta(n.Meta); err == nil && meta.Leaving {
		kind = EventLeave
	}
	(*Membership)(d).step(Event{Kind: kind, Name: n.Name, Addr: n.Address()})
}

// alive admits a node only if its metadata decodes; one that does not
// (another program, a newer format) is logged and left out of the views.
func (d *eventDelegate) alive(kind EventKind, n *memberlist.Node) {
	meta, err := DecodeMeta(n.Meta)
	if err != nil {
		d.logger.Warn("node left out of membership: its metadata does not decode",
			"peer", n.Name, "peer_addr", n.Address(), "err", err)
		return
	}
	(*Membership)(d).step(Event{Kind: kind, Name: n.Name, Addr: n.Address(), Meta: meta})
}

// metaDelegate is Membership as memberlist's Delegate: it only supplies
// the node metadata; Shoal sends no user messages through gossip.
type metaDelegate Membership

var _ memberlist.Delegate = (*metaDelegate)(nil)

func (d *metaDelegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.meta) > limit {
		// Encode already capped it at MaxMetaSize, memberlist's limit.
		d.logger.Error("node metadata over memberlist's limit", "bytes", len(d.meta), "limit", limit)
		return nil
	}
	return d.meta
}
func (d *metaDelegate) NotifyMsg([]byte)                           {}
func (d *metaDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *metaDelegate) LocalState(join bool) []byte                { return nil }
func (d *metaDelegate) MergeRemoteState(buf []byte, join bool)     {}

// slogWriter turns memberlist's log lines ("[WARN] memberlist: ...") into
// slog records at the matching level; once the node is stopping, at most
// debug. Warnings and errors pass limit: junk packets from anyone who can
// reach the gossip port, or a loaded machine's failed probes, would
// otherwise print a line each.
type slogWriter struct {
	l        *slog.Logger
	stopping *atomic.Bool
	limit    *logLimit // nil: no limit
}

func (w slogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	levels := [...]struct {
		prefix string
		level  slog.Level
	}{
		{"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo},
		{"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}, {"[ERROR]", slog.LevelError},
	}
	level := slog.LevelInfo
	for _, l := range levels {
		if rest, ok := strings.CutPrefix(msg, l.prefix); ok {
			msg, level = strings.TrimSpace(rest), l.level
			break
		}
	}
	msg = strings.TrimPrefix(msg, "memberlist: ")
	if w.stopping != nil && w.stopping.Load() {
		level = min(level, slog.LevelDebug)
	}
	if level < slog.LevelWarn || w.limit == nil {
		w.l.Log(context.Background(), level, msg)
		return len(p), nil
	}
	if ok, dropped := w.limit.allow(msg); ok {
		if dropped > 0 {
			w.l.Log(context.Background(), level, msg, "suppressed", dropped)
		} else {
			w.l.Log(context.Background(), level, msg)
		}
	}
	return len(p), nil
}

// logLimit lets through at most logBurst warnings and errors of one kind
// (the message without its digits: addresses, ports and counts differ
// between lines of one kind) a logInterval; the first line of a kind let
// through after some were held back says how many (suppressed). It
// tracks at most logKinds kinds an interval; the rest share one budget.
type logLimit struct {
	now     func() time.Time
	mu      sync.Mutex
	start   time.Time        // of the current interval
	n       map[string]int   // lines let through in it, by kind
	dropped map[string]int64 // lines held back since the last let through, by kind
}

const (
	logInterval = 10 * time.Second
	logBurst    = 5
	logKinds    = 64
)

func (l *logLimit) allow(msg string) (ok bool, dropped int64) {
	kind := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, msg)
	kind = kind[:min(len(kind), 60)]
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := l.now(); l.n == nil || now.Sub(l.start) >= logInterval {
		l.start, l.n = now, map[string]int{}
	}
	if l.dropped == nil {
		l.dropped = map[string]int64{}
	}
	if _, seen := l.n[kind]; !seen && len(l.n) >= logKinds {
		kind = ""
	}
	if l.n[kind] >= logBurst {
		if len(l.dropped) < logKinds || l.dropped[kind] > 0 {
			l.dropped[kind]++
		}
		return false, 0
	}
	l.n[kind]++
	dropped = l.dropped[kind]
	delete(l.dropped, kind)
	return true, dropped
}

var _ io.Writer = slogWriter{}
