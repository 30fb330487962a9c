package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"
)

// Follow runs consume over m's views on a goroutine of its own and
// returns the function that ends it: it leaves the gossip cluster
// gracefully (the others see "left", not "died"), waiting up to
// leaveTimeout for the news to go out, stops gossip, which closes the
// views, and waits for consume to return. The returned func is the
// goroutine's owner; call it once.
func Follow(m *Membership, log *slog.Logger, leaveTimeout time.Duration, consume func(<-chan View)) (leave func()) {
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

// JoinRetrying joins peers, trying again with backoff while none answers
// (they may still be starting), for up to timeout. A peer that answers
// with gossip this node cannot decrypt (another gossip key) is final:
// waiting will not change the key.
func JoinRetrying(ctx context.Context, m *Membership, peers []string, timeout time.Duration) error {
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

// LogChanges logs a view's joins, rejoins, leaves and deaths.
func LogChanges(v View, log *slog.Logger) {
	for _, role := range []Role{RolePS, RoleWorker} {
		for _, c := range Changes(v, role, 0) {
			log.Info(role.String()+" "+c.What(), "component", "membership", "rank", c.Member.Meta.Rank, "view", v.Version)
		}
	}
}

// ShardMover moves a client's connection to a shard (client.Client).
// SetShardAddr may be called from the goroutine that follows gossip while
// the client is in use.
type ShardMover interface {
	SetShardAddr(shard int, addr string) error
}

// FollowShards moves the client's connection to a shard whose gossiped
// gRPC address changed (a shard restarted elsewhere). seen holds the
// address each shard gossiped last; the first one a shard gossips is only
// recorded: it may name the same server as the worker's server list in
// other words (an IP for a host name, one interface for another). An
// address check refuses (secure.Credentials.CheckDial: a token in the
// clear beyond loopback) is not followed, as a server list naming it
// would not be.
func FollowShards(v View, fp uint64, seen []string, c ShardMover, check func(addr string) error, log *slog.Logger) {
	for _, m := range v.Members {
		meta := m.Meta
		if meta.Role != RolePS || meta.ModelFingerprint != fp || meta.Rank >= len(seen) || meta.GRPCAddr == "" || meta.GRPCAddr == seen[meta.Rank] {
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

// HostOf is addr's host, or addr when it has no port.
func HostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// Reachable replaces an unspecified host in addr ("0.0.0.0:7000") with
// host, the one peers reach this process at.
func Reachable(addr, host string) string {
	h, port, err := net.SplitHostPort(addr)
	if err != nil || (h != "" && !net.ParseIP(h).IsUnspecified()) {
		return addr
	}
	return net.JoinHostPort(host, port)
}
