package collnet

import (
	"context"
	"crypto/tls"
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

// With credentials, every TCP link runs over mutual TLS (and the
// rendezvous checks the token); messages of every size arrive intact;
// shared-memory links stay as they are.
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
					assert.Equal(t, l.send == nil, isTLS, "rank %d to %d: TLS exactly where TCP carries the data", tr.Rank(), p)
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
