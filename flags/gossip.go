package flags

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

// Gossip puts a ps or worker into the job's gossip cluster
// (membership): it is on when --gossip-addr or --join is set.
type Gossip struct {
	Addr      string
	Join      string
	KeyFile   string
	Detection string
	Timeout   time.Duration
}

// Register adds the flags to fs.
func (g *Gossip) Register(fs *flag.FlagSet) {
	fs.StringVar(&g.Addr, "gossip-addr", "", SectionMembership.Usage("membership: gossip on this HOST:PORT (UDP and TCP; port 0 picks a free one); with --join and no address, every interface on a free port. Empty and no --join: no membership"))
	fs.StringVar(&g.Join, "join", "", SectionMembership.Usage("membership: HOST:PORT gossip addresses of members already running, comma-separated (a server's, say); any one that answers is enough"))
	fs.StringVar(&g.KeyFile, "gossip-key-file", "", SectionMembership.Usage("membership: a file of exactly 32 random bytes, the AES-256 key that encrypts gossip ((umask 077; head -c 32 /dev/urandom > gossip.key)); every member needs the same"))
	fs.StringVar(&g.Detection, "gossip-detection", "auto", SectionMembership.Usage("membership: failure-detection timings: loopback (a dead process declared in about 1.3 s), lan (about 5 s), or auto (loopback when gossiping on a loopback address)"))
	fs.DurationVar(&g.Timeout, "join-timeout", 30*time.Second, SectionMembership.Usage("membership: how long to keep trying --join"))
}

// On says whether gossip is on.
func (g *Gossip) On() bool { return g.Addr != "" || g.Join != "" }

// Validate checks the flags without starting anything.
func (g *Gossip) Validate() error {
	if !g.On() {
		if g.KeyFile != "" {
			return fmt.Errorf("--gossip-key-file %s: gossip is off; set --gossip-addr or --join too", g.KeyFile)
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(g.BindAddr()); err != nil {
		return fmt.Errorf("--gossip-addr %q: %v (want HOST:PORT, e.g. 0.0.0.0:7946)", g.Addr, err)
	}
	for _, p := range g.peers() {
		if _, _, err := net.SplitHostPort(p); err != nil {
			return fmt.Errorf("--join %q: %v (want HOST:PORT,...)", p, err)
		}
	}
	if _, err := g.detectionFor("127.0.0.1"); err != nil {
		return err
	}
	if g.Timeout <= 0 {
		return fmt.Errorf("--join-timeout %v: want > 0", g.Timeout)
	}
	return nil
}

// BindAddr is the address gossip binds to.
func (g *Gossip) BindAddr() string {
	if g.Addr == "" {
		return ":0"
	}
	return g.Addr
}

func (g *Gossip) peers() []string {
	if g.Join == "" {
		return nil
	}
	return strings.Split(g.Join, ",")
}

func (g *Gossip) detectionFor(host string) (cluster.Detection, error) {
	switch g.Detection {
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
	return cluster.Detection{}, fmt.Errorf("--gossip-detection %q: unknown (want loopback, lan or auto)", g.Detection)
}

// Start joins the gossip cluster as name with meta; nil when gossip is
// off. The caller Leaves (or Closes, to be seen dying) when done.
func (g *Gossip) Start(ctx context.Context, name string, meta cluster.Meta, log *slog.Logger) (*cluster.Membership, error) {
	if !g.On() {
		return nil, nil
	}
	host, port, _ := net.SplitHostPort(g.BindAddr())
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("--gossip-addr %q: port %q is not a number", g.Addr, port)
	}
	det, err := g.detectionFor(host)
	if err != nil {
		return nil, err
	}
	if host == "" {
		host = "0.0.0.0"
	}
	cfg := cluster.Config{Name: name, BindAddr: host, BindPort: p, Meta: meta, Detection: det, KeyFile: g.KeyFile, Logger: log}
	m, err := cluster.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	if addr := cluster.Reachable(meta.GRPCAddr, cluster.HostOf(m.Addr())); addr != meta.GRPCAddr {
		// Serving on every interface: peers reach it at the host the
		// gossip advertises. Set before joining, so that the first
		// address anyone sees is the one that stays.
		meta.GRPCAddr = addr
		if err := m.SetMeta(meta, g.Timeout); err != nil {
			m.Close()
			return nil, fmt.Errorf("membership: %w", err)
		}
	}
	if peers := g.peers(); len(peers) > 0 {
		if err := cluster.JoinRetrying(ctx, m, peers, g.Timeout); err != nil {
			m.Close()
			return nil, fmt.Errorf("membership: --join %s: %w", g.Join, err)
		}
	}
	log.Info("gossiping", "component", "membership", "name", name, "addr", m.Addr(), "detection", g.Detection)
	return m, nil
}
