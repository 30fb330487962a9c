package collnet

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/secure"
)

// testCreds writes a fresh CA, node certificate and token and loads
// them (with the token, or without).
func testCreds(t testing.TB, token bool) *secure.Credentials {
	t.Helper()
	f, err := secure.WriteTestPKI(t.TempDir(), nil, time.Hour)
	require.NoError(t, err)
	if !token {
		f.Token = ""
	}
	c, err := secure.Load(f)
	require.NoError(t, err)
	return c
}

// With credentials, every link runs over mutual TLS from its hello on
// (and the rendezvous checks the token): the TCP links carry the data
// over it, the shared-memory links set up their rings over it and carry
// the data in them; messages of every size arrive intact.
func TestTLSLinks(t *testing.T) {
	creds := testCreds(t, true)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ts := group(t, 3, m.shm, func(cfg *Config) { cfg.Security = creds })
			for _, tr := range ts {
				for p, l := range tr.(*transport).links {
					if l == nil {
						continue
					}
					_, isTLS := l.data.(*tls.Conn)
					assert.True(t, isTLS, "rank %d to %d: the link is TLS", tr.Rank(), p)
					assert.Equal(t, m.shm && shmSupported, l.send != nil, "rank %d to %d: shared memory where asked for", tr.Rank(), p)
				}
			}
			exchange(t, ts, mixedSizes)
		})
	}
}

// A rank whose certificate another CA signed gets no further than the
// rendezvous, and nor does one without the token; the group does not
// form, and Connect fails in every rank before its deadline.
func TestTLSRefusesStrangers(t *testing.T) {
	creds := testCreds(t, true)
	strangers := map[string]*secure.Credentials{"another CA": testCreds(t, true), "no token": creds.WithoutToken()}
	for name, stranger := range strangers {
		t.Run(name, func(t *testing.T) {
			cfgs := groupConfigs(t, 2, false)
			cfgs[0].Security, cfgs[1].Security = creds, stranger
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, errs := connectAll(t, ctx, cfgs)
			require.Error(t, errs[1], "the stranger")
			require.Error(t, errs[0], "rank 0 waits for a rank that never joins")
			t.Logf("%s: rank 1: %v", name, errs[1])
		})
	}
}

// BenchmarkTLSSendRecv is BenchmarkSendRecv's 4 MiB message over TCP in
// plaintext and over mutual TLS.
func BenchmarkTLSSendRecv(b *testing.B) {
	creds := testCreds(b, false)
	for _, sec := range []*secure.Credentials{nil, creds} {
		name := "plaintext"
		if sec != nil {
			name = "tls"
		}
		b.Run(name, func(b *testing.B) {
			ts := group(b, 2, false, func(cfg *Config) { cfg.RingBytes = DefaultRingBytes; cfg.Logger = nil; cfg.Security = sec })
			benchSendRecv(b, ts, 4<<20)
		})
	}
}

// A token without TLS goes to a loopback rendezvous only.
func TestATokenIsNotSentInTheClear(t *testing.T) {
	f, err := secure.WriteTestPKI(t.TempDir(), nil, time.Hour)
	require.NoError(t, err)
	tokenOnly, err := secure.Load(secure.Files{Token: f.Token})
	require.NoError(t, err)
	_, err = Connect(context.Background(), Config{Rank: 1, Size: 2, Master: "10.1.2.3:29500", Security: tokenOnly})
	assert.ErrorIs(t, err, ErrConfig)
	assert.ErrorContains(t, err, "in the clear")
	group(t, 2, false, func(cfg *Config) { cfg.Security = tokenOnly }) // loopback: fine
}

// TestAStrangerCannotTakeARanksPlace: rank 1 accepts a stranger's
// connection before rank 0's. Under TLS the stranger, who has no
// certificate, gets nowhere whatever it sends (before, a plaintext hello
// naming rank 0 took rank 0's place: the real rank 0 was refused, and a
// stranger that then echoed rank 1's own shared-memory offer back had
// rank 1 talk to itself outside TLS). A stranger that says nothing holds
// up no one, with TLS or without (before, hellos were read one at a
// time, each for up to helloTimeout, longer than this test's deadline).
func TestAStrangerCannotTakeARanksPlace(t *testing.T) {
	creds := testCreds(t, true)
	for _, tc := range []struct {
		name     string
		tls      bool
		stranger []byte // what it sends, then it waits
	}{
		{"TLS, a hello as rank 0", true, nil},
		{"TLS, silent", true, []byte{}},
		{"plaintext, silent", false, []byte{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfgs, lis := acceptPair(t, true, func(cfg *Config) {
				if tc.tls {
					cfg.Security = creds
				}
			})
			addr := lis.Addr().String()
			// Shorter than helloTimeout: a stranger read first would outlast it.
			ctx, cancel := context.WithTimeout(context.Background(), helloTimeout/2)
			defer cancel()

			stranger, err := net.Dial("tcp", addr) // queued before rank 0's
			require.NoError(t, err)
			defer stranger.Close()
			say := tc.stranger
			if say == nil {
				say = appendHello(nil, hello{From: 0, To: 1, Size: 2, JobID: cfgs[1].JobID})
			}
			_, err = stranger.Write(say)
			require.NoError(t, err)

			conns := make([]peerConn, 1)
			accepted := make(chan error, 1)
			go func() { accepted <- accept(ctx, cfgs[1], lis, conns) }()
			rank0, err := dial(ctx, cfgs[0], 1, addr)
			require.NoError(t, err, "the real rank 0")
			defer rank0.tcp.Close()
			require.NoError(t, <-accepted)
			require.NotNil(t, conns[0].tcp)
			defer conns[0].tcp.Close()
			assert.Equal(t, rank0.tcp.LocalAddr().String(), conns[0].tcp.RemoteAddr().String(), "rank 1's link to rank 0 is rank 0's connection")
			_, isTLS := conns[0].greet.(*tls.Conn)
			assert.Equal(t, tc.tls, isTLS, "the hello went over TLS")
		})
	}
}

// acceptPair returns the configs of ranks 0 and 1 (edit, when not nil,
// changes each first) and a data listener for rank 1, for tests that run
// accept and dial themselves, without a rendezvous.
func acceptPair(t *testing.T, shm bool, edit func(cfg *Config)) ([]Config, *net.TCPListener) {
	t.Helper()
	cfgs := groupConfigs(t, 2, shm)
	cfgs[0].MasterListener.Close()
	for i := range cfgs {
		if edit != nil {
			edit(&cfgs[i])
		}
		var err error
		cfgs[i], err = cfgs[i].withDefaults()
		require.NoError(t, err)
	}
	lis, err := listenData("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { lis.Close() })
	return cfgs, lis
}
