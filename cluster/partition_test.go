package cluster

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
)

// cutTransport is memberlist's own transport with a switch that cuts the
// node off the network: while cut, nothing it sends arrives, nothing sent
// to it is taken in, and dials fail, like a cable pulled (or docker
// network disconnect).
type cutTransport struct {
	*memberlist.NetTransport
	cut     atomic.Bool
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{}
	stop    sync.Once
	wg      sync.WaitGroup
}

func newCutTransport(t *testing.T) *cutTransport {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, Logger: log.New(io.Discard, "", 0)})
	require.NoError(t, err)
	c := &cutTransport{NetTransport: nt, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), done: make(chan struct{})}
	c.wg.Go(func() {
		for {
			select {
			case p := <-nt.PacketCh():
				if c.cut.Load() {
					continue
				}
				select {
				case c.packets <- p:
				case <-c.done:
					return
				}
			case <-c.done:
				return
			}
		}
	})
	c.wg.Go(func() {
		for {
			select {
			case conn := <-nt.StreamCh():
				if c.cut.Load() {
					conn.Close()
					continue
				}
				select {
				case c.streams <- conn:
				case <-c.done:
					conn.Close()
					return
				}
			case <-c.done:
				return
			}
		}
	})
	return c
}

func (c *cutTransport) PacketCh() <-chan *memberlist.Packet { return c.packets }
func (c *cutTransport) StreamCh() <-chan net.Conn           { return c.streams }

func (c *cutTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if c.cut.Load() {
		return time.Now(), nil // sent, and lost on the way
	}
	return c.NetTransport.WriteTo(b, addr)
}

func (c *cutTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if c.cut.Load() {
		return nil, errors.New("network is unreachable (cut by the test)")
	}
	return c.NetTransport.DialTimeout(addr, timeout)
}

// memberlist calls the address-aware forms of WriteTo and DialTimeout,
// which NetTransport also has.
func (c *cutTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	return c.WriteTo(b, addr.Addr)
}

func (c *cutTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return c.DialTimeout(addr.Addr, timeout)
}

func (c *cutTransport) Shutdown() error {
	err := c.NetTransport.Shutdown()
	c.stop.Do(func() { close(c.done) })
	c.wg.Wait()
	return err
}

// startCut starts a member named name over a cutTransport, with the
// default detection changed by tune.
func startCut(t *testing.T, name string, rank int, tune func(*Detection)) (*Membership, *cutTransport) {
	t.Helper()
	tr := newCutTransport(t)
	cfg := DefaultConfig()
	cfg.Name, cfg.Meta = name, Meta{Role: RoleWorker, Rank: rank, GRPCAddr: "127.0.0.1:1"}
	tune(&cfg.Detection)
	// Missed probes would stretch the probe timeout up to this multiple;
	// memberlist's Shutdown does not wait for a probe in flight, so a
	// stretched one would outlive the test for goleak.
	cfg.Detection.AwarenessMaxMultiplier = 1
	cfg.transport, cfg.BindPort = tr, tr.GetAutoBindPort()
	m, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m, tr
}

// TestAPartitionLongerThanGossipToTheDeadHeals: a node cut off long
// enough for each side to declare the other dead, and for memberlist to
// stop gossiping to the dead (GossipToTheDeadTime is made negligible
// here), comes back once the network does: the reconnect loop reaches a
// member declared dead, and both sides see each other alive again.
// Without it the two views would never meet again.
func TestAPartitionLongerThanGossipToTheDeadHeals(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := func(name string, rank int) (*Membership, *cutTransport) {
		return startCut(t, name, rank, func(d *Detection) {
			d.GossipToTheDeadTime = time.Nanosecond
			d.ReconnectInterval = 100 * time.Millisecond
		})
	}
	a, _ := start("w0", 0)
	b, _ := start("w1", 1)
	c, cut := start("w2", 2)
	require.NoError(t, b.Join(ctx, []string{a.Addr()}))
	require.NoError(t, c.Join(ctx, []string{a.Addr()}))
	nodes := []*Membership{a, b, c}
	for _, m := range nodes {
		waitView(ctx, t, m, "3 members", func(v View) bool { return len(v.Members) == 3 })
	}

	cut.cut.Store(true)
	for _, m := range []*Membership{a, b} {
		waitView(ctx, t, m, "w2 dead", func(v View) bool { return len(v.Members) == 2 && !slices.Contains(names(v.Members), "w2") })
	}
	waitView(ctx, t, c, "w0 and w1 dead", func(v View) bool { return len(v.Members) == 1 })

	healed := time.Now()
	cut.cut.Store(false)
	for _, m := range nodes {
		waitView(ctx, t, m, "all 3 members again", func(v View) bool { return len(v.Members) == 3 })
	}
	t.Logf("the three views agree again %v after the network came back", time.Since(healed).Round(time.Millisecond))
}
