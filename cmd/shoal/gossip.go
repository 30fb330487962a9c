package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/cluster"
	"github.com/shoalml/shoal/nn"
)

// gossipFlags put a ps or worker into the job's gossip cluster
// (membership): it is on when --gossip-addr or --join is set.
type gossipFlags struct {
	addr      string
	join      string
	keyFile   string
	detection string
	timeout   time.Duration
}

func (g *gossipFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "gossip-addr", "", "membership: gossip on this HOST:PORT (UDP and TCP; port 0 picks a free one); with --join and no address, every interface on a free port. Empty and no --join: no membership")
	fs.StringVar(&g.join, "join", "", "membership: HOST:PORT gossip addresses of members already running, comma-separated (a server's, say); any one that answers is enough")
	fs.StringVar(&g.keyFile, "gossip-key-file", "", "membership: a file of exactly 32 random bytes, the AES-256 key that encrypts gossip (head -c 32 /dev/urandom > gossip.key); every member needs the same")
	fs.StringVar(&g.detection, "gossip-detection", "auto", "membership: failure-detection timings: loopback (a dead process declared in about 1.3 s), lan (about 5 s), or auto (loopback when gossiping on a loopback address)")
	fs.DurationVar(&g.timeout, "join-timeout", 30*time.Second, "membership: how long to keep trying --join")
}

func (g *gossipFlags) on() bool { return g.addr != "" || g.join != "" }

// validate checks the flags without starting anything.
func (g *gossipFlags) validate() error {
	if !g.on() {
		if g.keyFile != "" {
			return fmt.Errorf("--gossip-key-file %s: gossip is off; set --gossip-addr or --join too", g.keyFile)
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(g.bindAddr()); err != nil {
		return fmt.Errorf("--gossip-addr %q: %v (want HOST:PORT, e.g. 0.0.0.0:7946)", g.addr, err)
	}
	for _, p := range g.peers() {
		if _, _, err := net.SplitHostPort(p); err != nil {
			return fmt.Errorf("--join %q: %v (want HOST:PORT,...)", p, err)
		}
	}
	if _, err := g.detectionFor("127.0.0.1"); err != nil {
		return err
	}
	if g.timeout <= 0 {
		return fmt.Errorf("--join-timeout %v: want > 0", g.timeout)
	}
	return nil
}

func (g *gossipFlags) bindAddr() string {
	if g.addr == "" {
		return ":0"
	}
	return g.addr
}

func (g *gossipFlags) peers() []string {
	if g.join == "" {
		return nil
	}
	return strings.Split(g.join, ",")
}

func (g *gossipFlags) detectionFor(host string) (cluster.Detection, error) {
	switch g.detection {
	case "loopback":
		return cluster.LoopbackDetection(), nil
	case "lan":
		return cluster.LANDetection(), nil
	case "auto":
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() || host == "localhost" {
			return cluster.LoopbackDetection(), nil
		}
		return cluster.LANDetection(), nil
	}
	return cluster.Detection{}, fmt.Errorf("--gossip-detection %q: unknown (want loopback, lan or auto)", g.detection)
}

// start joins the gossip cluster as name with meta; nil when gossip is
// off. The caller Leaves (or Closes, to be seen dying) when done.
func (g *gossipFlags) start(ctx context.Context, name string, meta cluster.Meta, log *slog.Logger) (*cluster.Membership, error) {
	if !g.on() {
		return nil, nil
	}
	host, port, _ := net.SplitHostPort(g.bindAddr())
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("--gossip-addr %q: port %q is not a number", g.addr, port)
	}
	det, err := g.detectionFor(host)
	if err != nil {
		return nil, err
	}
	if host == "" {
		host = "0.0.0.0"
	}
	cfg := cluster.Config{Name: name, BindAddr: host, BindPort: p, Meta: meta, Detection: det, KeyFile: g.keyFile, Logger: log}
	m, err := cluster.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	if addr := reachable(meta.GRPCAddr, hostOf(m.Addr())); addr != meta.GRPCAddr {
		// Serving on every interface: peers reach it at the host the
		// gossip advertises. Set before joining, so that the first
		// address anyone sees is the one that stays.
		meta.GRPCAddr = addr
		if err := m.SetMeta(meta, g.timeout); err != nil {
			m.Close()
			return nil, fmt.Errorf("membership: %w", err)
		}
	}
	if peers := g.peers(); len(peers) > 0 {
		if err := joinRetrying(ctx, m, peers, g.timeout); err != nil {
			m.Close()
			return nil, fmt.Errorf("membership: --join %s: %w", g.join, err)
		}
	}
	log.Info("gossiping", "component", "membership", "name", name, "addr", m.Addr(), "detection", g.detection)
	return m, nil
}

// follow runs consume over m's views on a goroutine of its own and
// returns the function that ends it: it leaves the gossip cluster
// gracefully (the others see "left", not "died"), waiting up to
// leaveTimeout for the news to go out, stops gossip, which closes the
// views, and waits for consume to return.
func follow(m *cluster.Membership, log *slog.Logger, leaveTimeout time.Duration, consume func(<-chan cluster.View)) (leave func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		consume(m.Views())
	}()
	return func() {
		if err := m.Leave(leaveTimeout); err != nil {
			level := slog.LevelWarn
			if strings.Contains(err.Error(), "timeout waiting for") {
				// Nobody acknowledged: at the end of a run the others
				// may well have gone first.
				level = slog.LevelDebug
			}
			log.Log(context.Background(), level, "leaving the gossip cluster", "component", "membership", "err", err)
		}
		m.Close()
		<-done
	}
}

// fingerprint identifies a model's parameter vector in gossip metadata.
func fingerprint(l nn.Layout) uint64 { return cluster.Fingerprint(fmt.Sprint(l)) }

// joinRetrying joins peers, trying again with backoff while none answers
// (they may still be starting), for up to timeout. A peer that answers
// with gossip this node cannot decrypt (another --gossip-key-file) is
// final: waiting will not change the key.
func joinRetrying(ctx context.Context, m *cluster.Membership, peers []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	backoff := 100 * time.Millisecond
	for {
		err := m.Join(ctx, peers)
		if err == nil || strings.Contains(err.Error(), "decrypt") {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("no peer answered within --join-timeout %v: %w", timeout, err)
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// logChanges logs a view's joins, rejoins, leaves and deaths.
func logChanges(v cluster.View, log *slog.Logger) {
	for _, role := range []cluster.Role{cluster.RolePS, cluster.RoleWorker} {
		for _, c := range cluster.Changes(v, role, 0) {
			log.Info(role.String()+" "+c.What(), "component", "membership", "rank", c.Member.Meta.Rank, "view", v.Version)
		}
	}
}

// shardMover moves a client's connection to a shard (client.Client).
type shardMover interface {
	SetShardAddr(shard int, addr string) error
}

// followShards moves the client's connection to a shard whose gossiped
// gRPC address changed (a shard restarted elsewhere). seen holds the
// address each shard gossiped last; the first one a shard gossips is only
// recorded: it may name the same server as --servers in other words (an
// IP for a host name, one interface for another). An address check
// refuses (secure.Credentials.CheckDial: a token in the clear beyond
// loopback) is not followed, as --servers naming it would not be.
func followShards(v cluster.View, fp uint64, seen []string, c shardMover, check func(addr string) error, log *slog.Logger) {
	for _, m := range v.Members {
		meta := m.Meta
		if meta.Role != cluster.RolePS || meta.ModelFingerprint != fp || meta.Rank >= len(seen) || meta.GRPCAddr == "" || meta.GRPCAddr == seen[meta.Rank] {
			continue
		}
		old := seen[meta.Rank]
		seen[meta.Rank] = meta.GRPCAddr
		if old == "" {
			continue
		}
		if err := check(meta.GRPCAddr); err != nil {
			log.Warn("shard moved to an address this worker does not dial; staying", "component", "membership", "shard", meta.Rank, "addr", meta.GRPCAddr, "err", err)
			continue
		}
		if err := c.SetShardAddr(meta.Rank, meta.GRPCAddr); err != nil {
			log.Warn("shard moved to an address that does not parse", "component", "membership", "shard", meta.Rank, "addr", meta.GRPCAddr, "err", err)
			continue
		}
		log.Warn("shard moved", "component", "membership", "shard", meta.Rank, "from", old, "to", meta.GRPCAddr)
	}
}

// hostOf is addr's host, or addr when it has no port.
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// reachable replaces an unspecified host in addr ("0.0.0.0:7000") with
// host, the one peers reach this process at.
func reachable(addr, host string) string {
	h, port, err := net.SplitHostPort(addr)
	if err != nil || (h != "" && !net.ParseIP(h).IsUnspecified()) {
		return addr
	}
	return net.JoinHostPort(host, port)
}
