package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoalml/shoal/internal/lockedio"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeKey(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gossip.key")
	key := make([]byte, GossipKeySize)
	_, _ = rand.Read(key)
	require.NoError(t, os.WriteFile(path, key, 0o600))
	return path
}

func startNode(t *testing.T, name string, rank int, keyFile string, logs io.Writer) *Membership {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Name = name
	cfg.Meta = Meta{Role: RoleWorker, Rank: rank, GRPCAddr: "127.0.0.1:1"}
	cfg.KeyFile = keyFile
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m, err := New(cfg)
	require.NoError(t, err, "start %s", name)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// waitView reads m's views until one satisfies ok, or fails the test when
// ctx is done first.
func waitView(ctx context.Context, t *testing.T, m *Membership, what string, ok func(View) bool) View {
	t.Helper()
	for {
		select {
		case v, open := <-m.Views():
			require.True(t, open, "%s: views closed while waiting for %s", m.Addr(), what)
			if ok(v) {
				return v
			}
		case <-ctx.Done():
			t.Fatalf("node at %s: no view with %s: %v; last view %+v", m.Addr(), what, ctx.Err(), m.View())
		}
	}
}

func names(ms []Member) []string {
	var ns []string
	for _, m := range ms {
		ns = append(ns, m.Name)
	}
	return ns
}

func hasMember(ms []Member, name, addr string) bool {
	return slices.ContainsFunc(ms, func(m Member) bool { return m.Name == name && m.Addr == addr })
}

// TestMembershipLoopback runs real memberlist instances on 127.0.0.1:
// three nodes agree on a view; one stops without leaving and the others
// see it die; it restarts under its name on a new port and is taken back;
// a node with another gossip key is refused; a node that leaves is seen
// leaving. Each wait is bounded by a generous timeout, far above the
// ~1-2 s the loopback timings aim at, so that a loaded CI machine does
// not fail it; the observed detection time is logged.
func TestMembershipLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	key := writeKey(t)
	logsA := lockedio.NewBuffer()
	a := startNode(t, "w0", 0, key, logsA)
	b := startNode(t, "w1", 1, key, nil)
	c := startNode(t, "w2", 2, key, nil)
	require.NoError(t, b.Join(ctx, []string{a.Addr()}))
	require.NoError(t, c.Join(ctx, []string{a.Addr()}))

	all := func(v View) bool { return len(v.Members) == 3 }
	va := waitView(ctx, t, a, "3 members", all)
	vb := waitView(ctx, t, b, "3 members", all)
	vc := waitView(ctx, t, c, "3 members", all)
	assert.Equal(t, []string{"w0", "w1", "w2"}, names(va.Members))
	assert.Equal(t, va.Members, vb.Members, "b's view differs from a's")
	assert.Equal(t, va.Members, vc.Members, "c's view differs from a's")
	assert.Equal(t, Meta{Role: RoleWorker, Rank: 2, GRPCAddr: "127.0.0.1:1"}, va.Members[2].Meta)

	// c stops without leaving.
	oldAddr := c.Addr()
	stopped := time.Now()
	require.NoError(t, c.Close())
	died := func(v View) bool { return hasMember(v.Died, "w2", oldAddr) }
	waitView(ctx, t, a, "w2 dead", died)
	t.Logf("a saw w2 dead %v after it stopped", time.Since(stopped).Round(time.Millisecond))
	vb = waitView(ctx, t, b, "w2 dead", died)
	t.Logf("b saw w2 dead %v after it stopped", time.Since(stopped).Round(time.Millisecond))
	assert.Equal(t, []string{"w0", "w1"}, names(vb.Members))

	// c restarts under its name on a new port and is taken back.
	c2 := startNode(t, "w2", 2, key, nil)
	require.NotEqual(t, oldAddr, c2.Addr(), "the restarted node should have a new port")
	require.NoError(t, c2.Join(ctx, []string{a.Addr()}))
	back := func(v View) bool { return hasMember(v.Rejoined, "w2", c2.Addr()) }
	waitView(ctx, t, a, "w2 back at "+c2.Addr(), back)
	vb = waitView(ctx, t, b, "w2 back at "+c2.Addr(), back)
	assert.Equal(t, []string{"w0", "w1", "w2"}, names(vb.Members))

	// A node with another key cannot join, and a's log says why.
	intruder := startNode(t, "w3", 3, writeKey(t), nil)
	err := intruder.Join(ctx, []string{a.Addr()})
	var joinErr *JoinError
	require.ErrorAs(t, err, &joinErr)
	t.Logf("join with the wrong key: %v", err)
	assert.Contains(t, err.Error(), "no installed keys could decrypt the message")
	assert.Contains(t, logsA.String(), "no installed keys could decrypt the message")
	assert.Len(t, a.View().Members, 3, "the intruder must not be in a's view")

	// b leaves gracefully: a sees a leave, not a death.
	require.NoError(t, b.Leave(5*time.Second))
	require.NoError(t, b.Close())
	va = waitView(ctx, t, a, "w1 left", func(v View) bool { return hasMember(v.Left, "w1", vb.Members[1].Addr) || len(v.Died) > 0 })
	assert.Equal(t, []string{"w0", "w2"}, names(va.Members))
	assert.Empty(t, va.Died)
}

func TestNewRefuses(t *testing.T) {
	dir := t.TempDir()
	shortKey := filepath.Join(dir, "short.key")
	require.NoError(t, os.WriteFile(shortKey, make([]byte, 16), 0o600))
	valid := func() Config {
		cfg := DefaultConfig()
		cfg.Name = "w0"
		cfg.Meta = Meta{Role: RoleWorker, GRPCAddr: "h:1"}
		return cfg
	}
	tests := []struct {
		name    string
		change  func(*Config)
		wantMsg string
	}{
		{"no name", func(c *Config) { c.Name = "" }, "Name is empty"},
		{"bad port", func(c *Config) { c.BindPort = 70000 }, "BindPort 70000"},
		{"no role", func(c *Config) { c.Meta.Role = 0 }, "Meta: invalid node metadata: role Role(0)"},
		{"zero probe interval", func(c *Config) { c.Detection.ProbeInterval = 0 }, "ProbeInterval is 0s, want > 0"},
		{"probe timeout above interval", func(c *Config) { c.Detection.ProbeTimeout = time.Second }, "ProbeTimeout 1s is not below ProbeInterval 200ms"},
		{"no suspicion", func(c *Config) { c.Detection.SuspicionMult = 0 }, "SuspicionMult is 0, want >= 1"},
		{"no reclaim", func(c *Config) { c.Detection.DeadNodeReclaimTime = 0 }, "DeadNodeReclaimTime is 0s"},
		{"short key", func(c *Config) { c.KeyFile = shortKey }, "16 bytes, want exactly 32 raw bytes (AES-256)"},
		{"missing key", func(c *Config) { c.KeyFile = filepath.Join(dir, "none") }, "gossip key file: open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid()
			tt.change(&cfg)
			m, err := New(cfg)
			if m != nil {
				_ = m.Close()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantMsg)
		})
	}
}

func TestLANDetectionIsValid(t *testing.T) {
	require.NoError(t, LANDetection().validate())
	require.NoError(t, LoopbackDetection().validate())
}

func TestSlogWriterLevels(t *testing.T) {
	tests := []struct {
		name, line, want string
		stopping         bool
	}{
		{"debug", "[DEBUG] memberlist: Stream connection\n", "level=DEBUG msg=\"Stream connection\"", false},
		{"warn", "[WARN] memberlist: Refuting a suspect message\n", "level=WARN msg=\"Refuting a suspect message\"", false},
		{"error", "[ERR] memberlist: Conflicting address\n", "level=ERROR msg=\"Conflicting address\"", false},
		{"no level", "something else\n", "level=INFO msg=\"something else\"", false},
		{"error while stopping", "[ERR] memberlist: Failed to send gossip: use of closed network connection\n",
			"level=DEBUG msg=\"Failed to send gossip: use of closed network connection\"", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			h := slog.NewTextHandler(&out, &slog.HandlerOptions{
				Level:       slog.LevelDebug,
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return dropTime(a) },
			})
			var stopping atomic.Bool
			stopping.Store(tt.stopping)
			n, err := slogWriter{l: slog.New(h), stopping: &stopping}.Write([]byte(tt.line))
			require.NoError(t, err)
			assert.Equal(t, len(tt.line), n)
			assert.Equal(t, tt.want+"\n", out.String())
		})
	}
}

// TestGossipWarningsAreRateLimited: 2,000 junk packets meant 2,000 error
// lines; now at most logBurst warnings and errors pass an interval, and
// the first one after says how many were held back. Debug and info lines
// are not limited.
func TestGossipWarningsAreRateLimited(t *testing.T) {
	var out bytes.Buffer
	h := slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return dropTime(a) }})
	now := time.Unix(1000, 0)
	w := slogWriter{l: slog.New(h), limit: &logLimit{now: func() time.Time { return now }}}
	for i := range 2000 {
		_, err := w.Write([]byte(fmt.Sprintf("[ERR] memberlist: failed to receive: decoding failed from=127.0.0.1:%d\n", 40000+i)))
		require.NoError(t, err)
	}
	_, err := w.Write([]byte("[DEBUG] memberlist: a debug line\n"))
	require.NoError(t, err)
	_, err = w.Write([]byte("[ERR] memberlist: another kind of error\n"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, logBurst+2, "the burst, the debug line, an error of another kind")
	assert.Contains(t, lines[logBurst], "a debug line")
	assert.Contains(t, lines[logBurst+1], "another kind of error")

	out.Reset()
	now = now.Add(logInterval)
	_, err = w.Write([]byte("[ERR] memberlist: failed to receive: decoding failed from=127.0.0.1:1\n"))
	require.NoError(t, err)
	assert.Equal(t, "level=ERROR msg=\"failed to receive: decoding failed from=127.0.0.1:1\" suppressed=1995\n", out.String())
}

func dropTime(a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
