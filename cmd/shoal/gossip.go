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
	if addr := cluster.Reachable(meta.GRPCAddr, cluster.HostOf(m.Addr())); addr != meta.GRPCAddr {
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
		if err := cluster.JoinRetrying(ctx, m, peers, g.timeout); err != nil {
			m.Close()
			return nil, fmt.Errorf("membership: --join %s: %w", g.join, err)
		}
	}
	log.Info("gossiping", "component", "membership", "name", name, "addr", m.Addr(), "detection", g.detection)
	return m, nil
}
