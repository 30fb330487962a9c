package collnet

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shoalml/shoal/collective"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	goleak.VerifyTestMain(m)
}

// modes are the two data planes every transport test runs over.
var modes = []struct {
	name string
	shm  bool
}{{"tcp", false}, {"shm", true}}

// testRingBytes is small, so that messages wrap around the rings.
const testRingBytes = 64 << 10

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// shmDir makes a directory for ring files and checks, at the end of the
// test, that nothing was left in it.
func shmDir(t testing.TB) string {
	dir, err := os.MkdirTemp(defaultShmDir(), "collnet-test-")
	require.NoError(t, err)
	t.Cleanup(func() {
		assertEmptyDir(t, dir)
		os.RemoveAll(dir)
	})
	return dir
}

func assertEmptyDir(t testing.TB, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Empty(t, names, "files left in %s", dir)
}

// groupConfigs returns the configs of n ranks on loopback, rank 0 with a
// master listener on 127.0.0.1:0.
func groupConfigs(t testing.TB, n int, shm bool) []Config {
	lis, err := ListenMaster("127.0.0.1:0")
	require.NoError(t, err)
	dir := shmDir(t)
	cfgs := make([]Config, n)
	for r := range cfgs {
		cfgs[r] = Config{
			Rank: r, Size: n,
			Master:       lis.Addr().String(),
			Listen:       "127.0.0.1:0",
			JobID:        t.Name(),
			SharedMemory: shm,
			RingBytes:    testRingBytes,
			ShmDir:       dir,
			Logger:       testLogger(t),
		}
	}
	cfgs[0].MasterListener = lis
	return cfgs
}

// connect runs Connect for every config at once and returns the results
// by rank.
func connect(ctx context.Context, cfgs []Config) ([]collective.Transport, []error) {
	ts := make([]collective.Transport, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for r, cfg := range cfgs {
		wg.Go(func() { ts[r], errs[r] = Connect(ctx, cfg) })
	}
	wg.Wait()
	return ts, errs
}

// connectAll is connect, with the transports closed at the end of the
// test.
func connectAll(t testing.TB, ctx context.Context, cfgs []Config) ([]collective.Transport, []error) {
	ts, errs := connect(ctx, cfgs)
	t.Cleanup(func() {
		for _, tr := range ts {
			if tr != nil {
				assert.NoError(t, tr.Close())
			}
		}
	})
	return ts, errs
}

// group connects n ranks on loopback; edit, if not nil, changes each
// rank's config first.
func group(t testing.TB, n int, shm bool, edit func(cfg *Config)) []collective.Transport {
	t.Helper()
	cfgs := groupConfigs(t, n, shm)
	if edit != nil {
		for i := range cfgs {
			edit(&cfgs[i])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ts, errs := connectAll(t, ctx, cfgs)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		require.Equal(t, r, ts[r].Rank())
		require.Equal(t, n, ts[r].Size())
	}
	assertEmptyDir(t, cfgs[0].ShmDir) // unlinked once both sides mapped
	return ts
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// pattern fills b with bytes that depend on the pair and the message.
func pattern(b []byte, from, to, msg int) {
	x := uint32(from*7919 + to*104729 + msg*15485863 + 1)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
}

// exchange has every rank send sizes (one message each) to every other
// rank, all at once, and checks what each receives.
func exchange(t *testing.T, ts []collective.Transport, sizes []int) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	var wg sync.WaitGroup
	for _, tr := range ts {
		me := tr.Rank()
		for peer := range ts {
			if peer == me {
				continue
			}
			wg.Go(func() {
				for k, n := range sizes {
					buf := make([]byte, n)
					pattern(buf, me, peer, k)
					if !assert.NoError(t, tr.Send(ctx, peer, buf), "rank %d send %d to %d", me, k, peer) {
						return
					}
				}
			})
			wg.Go(func() {
				for k, n := range sizes {
					got := make([]byte, n)
					want := make([]byte, n)
					pattern(want, peer, me, k)
					if !assert.NoError(t, tr.Recv(ctx, peer, got), "rank %d recv %d from %d", me, k, peer) {
						return
					}
					if !assert.True(t, string(got) == string(want), "rank %d message %d from %d (%d bytes) differs", me, k, peer, n) {
						return
					}
				}
			})
		}
	}
	wg.Wait()
}

// mixedSizes has empty, tiny, page, larger-than-ring and odd sizes.
var mixedSizes = []int{1, 0, 7, 4096, testRingBytes + 13, 300_001, 3, 2*testRingBytes - 1, 8}

func TestStreams(t *testing.T) {
	for _, m := range modes {
		for _, n := range []int{2, 3, 8} {
			t.Run(fmt.Sprintf("%s/n=%d", m.name, n), func(t *testing.T) {
				ts := group(t, n, m.shm, nil)
				for _, tr := range ts {
					for p, l := range tr.(*transport).links {
						if l != nil {
							assert.Equal(t, m.shm && shmSupported, l.send != nil, "rank %d to %d uses shm", tr.Rank(), p)
						}
					}
				}
				exchange(t, ts, mixedSizes)
				exchange(t, ts, []int{5, 1 << 20}) // the links stay usable
			})
		}
	}
}

// TestLargeBothWays sends messages bigger than socket buffers and rings
// both ways at once: a Send that waited for its peer's Send would hang.
func TestLargeBothWays(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ts := group(t, 2, m.shm, nil)
			exchange(t, ts, []int{16 << 20, 16<<20 + 1, 1})
		})
	}
}

// TestMixedHosts gives ranks two host ids, and one rank no shared memory:
// only the pair on one host that both want it uses shared memory.
func TestMixedHosts(t *testing.T) {
	hosts := []string{"a", "a", "b", "b", "a"}
	ts := group(t, len(hosts), true, func(cfg *Config) {
		cfg.HostID = hosts[cfg.Rank]
		cfg.SharedMemory = cfg.Rank != 3
	})
	shmPairs := map[[2]int]bool{{0, 1}: true, {0, 4}: true, {1, 4}: true}
	for _, tr := range ts {
		for p, l := range tr.(*transport).links {
			if l != nil {
				pair := [2]int{min(tr.Rank(), p), max(tr.Rank(), p)}
				assert.Equal(t, shmPairs[pair] && shmSupported, l.send != nil, "ranks %v on shared memory", pair)
				assert.Equal(t, shmPairs[pair] && shmSupported, l.recv != nil, "ranks %v on shared memory", pair)
			}
		}
	}
	exchange(t, ts, mixedSizes)
}

// TestConnectDeadlinePassed: the links outlive Connect's context.
func TestConnectDeadlinePassed(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cfgs := groupConfigs(t, 3, m.shm)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			ts, errs := connectAll(t, ctx, cfgs)
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			<-ctx.Done()
			exchange(t, ts, []int{10, 100_000})
		})
	}
}

// TestUnspecifiedListen listens on 0.0.0.0: the rendezvous fills in the
// address each rank is reached at.
func TestUnspecifiedListen(t *testing.T) {
	ts := group(t, 3, false, func(cfg *Config) { cfg.Listen = "0.0.0.0:0" })
	exchange(t, ts, []int{10, 100_000})
}

func TestSizeOne(t *testing.T) {
	tr, err := Connect(ctxT(t, 5*time.Second), Config{Size: 1})
	require.NoError(t, err)
	assert.Equal(t, 0, tr.Rank())
	assert.Equal(t, 1, tr.Size())
	assert.Error(t, tr.Send(context.Background(), 0, []byte{1}), "send to self")
	assert.NoError(t, tr.Close())
}

func TestNotAPeer(t *testing.T) {
	ts := group(t, 2, false, nil)
	ctx := ctxT(t, 5*time.Second)
	for _, peer := range []int{-1, 0, 2} {
		err := ts[0].Send(ctx, peer, []byte{1})
		assert.ErrorContains(t, err, "not a peer", "peer %d", peer)
		assert.NotErrorIs(t, err, collective.ErrPeer)
		assert.ErrorContains(t, ts[0].Recv(ctx, peer, make([]byte, 1)), "not a peer", "peer %d", peer)
	}
}

func assertPeerError(t *testing.T, err error, rank int, msgAndArgs ...any) {
	t.Helper()
	var pe *collective.PeerError
	if assert.ErrorAs(t, err, &pe, msgAndArgs...) {
		assert.Equal(t, rank, pe.Rank, msgAndArgs...)
	}
	assert.ErrorIs(t, err, collective.ErrPeer, msgAndArgs...)
}

// TestPeerClosed closes rank 2 of 3: its peers' calls fail with a
// PeerError naming it, whether they started before or after, and ranks 0
// and 1 still talk.
func TestPeerClosed(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ts := group(t, 3, m.shm, nil)
			ctx := ctxT(t, 20*time.Second)
			// Rank 2 sends one message, which rank 0 still gets after rank
			// 2 is gone.
			require.NoError(t, ts[2].Send(ctx, 0, []byte("last words")))
			blocked := make(chan error, 1)
			go func() { blocked <- ts[1].Recv(ctx, 2, make([]byte, 10)) }()
			require.NoError(t, ts[2].Close())

			assertPeerError(t, <-blocked, 2, "recv in progress")
			got := make([]byte, 10)
			require.NoError(t, ts[0].Recv(ctx, 2, got))
			assert.Equal(t, "last words", string(got))
			assertPeerError(t, ts[0].Recv(ctx, 2, got), 2, "recv after close")
			// A Send fails once the kernel's buffers or the ring are full.
			assertPeerError(t, ts[1].Send(ctx, 2, make([]byte, 64<<20)), 2, "send after close")
			exchange(t, ts[:2], []int{100, 200_000})
		})
	}
}

// TestDeadline: a silent peer ends calls at ctx's deadline or
// cancellation, never a PeerError; a call that moved no bytes leaves the
// stream usable, one cut mid-message does not.
func TestDeadline(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ts := group(t, 2, m.shm, nil)
			buf := make([]byte, 5)

			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			err := ts[0].Recv(ctx, 1, buf)
			cancel()
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.NotErrorIs(t, err, collective.ErrPeer)

			ctx, cancel = context.WithCancel(context.Background())
			stop := time.AfterFunc(50*time.Millisecond, cancel)
			err = ts[0].Recv(ctx, 1, buf)
			stop.Stop()
			cancel()
			assert.ErrorIs(t, err, context.Canceled)

			// Nothing was read: the stream is intact.
			ok := ctxT(t, 10*time.Second)
			require.NoError(t, ts[1].Send(ok, 0, []byte("hello")))
			require.NoError(t, ts[0].Recv(ok, 1, buf))
			assert.Equal(t, "hello", string(buf))

			// A send far bigger than buffers to a peer that does not read:
			// it fills them, then waits until its deadline cuts it
			// mid-message. (The deadline is long enough for the first
			// bytes to go out even on a loaded machine; at 200 ms a CI run
			// once moved none, and the stream then rightly stayed usable.)
			ctx, cancel = context.WithTimeout(context.Background(), time.Second)
			err = ts[0].Send(ctx, 1, make([]byte, 64<<20))
			cancel()
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.ErrorIs(t, ts[0].Send(ok, 1, buf), ErrInterrupted)
			// The other direction is unaffected.
			require.NoError(t, ts[1].Send(ok, 0, []byte("again")))
			require.NoError(t, ts[0].Recv(ok, 1, buf))
			assert.Equal(t, "again", string(buf))
		})
	}
}

// TestClose: Close ends calls in progress and later ones with ErrClosed,
// and may be called twice.
func TestClose(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ts := group(t, 2, m.shm, nil)
			ctx := ctxT(t, 20*time.Second)
			blocked := make(chan error, 1)
			go func() { blocked <- ts[0].Recv(ctx, 1, make([]byte, 10)) }()
			require.NoError(t, ts[0].Close())
			assert.ErrorIs(t, <-blocked, ErrClosed)
			assert.ErrorIs(t, ts[0].Send(ctx, 1, []byte{1}), ErrClosed)
			assert.ErrorIs(t, ts[0].Recv(ctx, 1, []byte{1}), ErrClosed)
			assert.NoError(t, ts[0].Close())
		})
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"size 0", Config{Size: 0, Master: "x:1"}},
		{"negative rank", Config{Rank: -1, Size: 2, Master: "x:1"}},
		{"rank too big", Config{Rank: 2, Size: 2, Master: "x:1"}},
		{"no master", Config{Rank: 1, Size: 2}},
		{"ring not a power of two", Config{Size: 2, Master: "x:1", RingBytes: 100_000}},
		{"ring too small", Config{Size: 2, Master: "x:1", RingBytes: 1024}},
		{"long job id", Config{Size: 2, Master: "x:1", JobID: string(make([]byte, MaxJobIDLen+1))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Connect(context.Background(), tt.cfg)
			assert.ErrorIs(t, err, ErrConfig)
		})
	}
}

func TestDefaults(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Size, cfg.Master = 2, "x:1"
	cfg, err := cfg.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, DefaultListen, cfg.Listen)
	assert.Equal(t, DefaultRingBytes, cfg.RingBytes)
	assert.NotEmpty(t, cfg.HostID)
	assert.NotEmpty(t, cfg.ShmDir)
	assert.NotNil(t, cfg.Logger)
}
