package secure_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/nn"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/rpc"
	"github.com/shoalml/shoal/secure"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/wire"
)

// pki writes a fresh CA, node certificate and token.
func pki(t *testing.T) secure.Files {
	t.Helper()
	f, err := secure.WriteTestPKI(t.TempDir(), nil, time.Hour)
	require.NoError(t, err)
	return f
}

func load(t *testing.T, f secure.Files) *secure.Credentials {
	t.Helper()
	c, err := secure.Load(f)
	require.NoError(t, err)
	return c
}

// serve serves a small async shard on a loopback port with creds, and
// returns its address and the count of calls it refused.
func serve(t *testing.T, creds *secure.Credentials) (string, *secure.Refusals) {
	t.Helper()
	var l nn.Layout
	l.Add("w", 8)
	plan, err := shard.New(8, 1, 32)
	require.NoError(t, err)
	core, err := ps.New(ps.Config{Mode: consistency.Async, Plan: plan, Layout: l, Optimizer: ps.DefaultConfig().Optimizer}, make([]float32, 8))
	require.NoError(t, err)
	refused := &secure.Refusals{}
	g, health := rpc.NewGRPCServer(creds.ServerOptions(slog.New(slog.DiscardHandler), refused)...)
	rpc.RegisterPS(g, health, core, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rpc.Serve(ctx, g, health, lis, time.Second) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return lis.Addr().String(), refused
}

// info calls Info on addr with dial options opts.
func info(t *testing.T, addr string, opts ...grpc.DialOption) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, opts...)
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pb.NewParameterServerClient(conn).Info(ctx, &pb.InfoRequest{})
	return err
}

// With mutual TLS and a token: the right certificate and token are
// served; no token or a wrong one get Unauthenticated (counted); a client
// certificate of another CA, or none, or plaintext, fail at the
// handshake; health probes need the TLS handshake but no token.
func TestMutualTLSAndToken(t *testing.T) {
	f := pki(t)
	creds := load(t, f)
	addr, refused := serve(t, creds)

	require.NoError(t, info(t, addr, creds.DialOptions()...), "the right certificate and token")

	noToken := f
	noToken.Token = ""
	err := info(t, addr, load(t, noToken).DialOptions()...)
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "no bearer token")

	wrong := f
	wrong.Token = filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(wrong.Token, []byte("0123456789abcdef0123456789abcdef\n"), 0o600))
	err = info(t, addr, load(t, wrong).DialOptions()...)
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "a wrong bearer token")
	assert.Equal(t, int64(2), refused.Load())

	// Trusting the server, with the token, but a certificate of another
	// CA, or none.
	other := pki(t)
	mixed := secure.Files{Cert: other.Cert, Key: other.Key, CA: f.CA, Token: f.Token}
	err = info(t, addr, load(t, mixed).DialOptions()...)
	// In TLS 1.3 the server checks the client's certificate after the
	// client finished its side, so the client sees a bad-certificate alert
	// or a closed connection, whichever comes first.
	assert.Equal(t, codes.Unavailable, status.Code(err), "a certificate of another CA: %v", err)
	anon := creds.ClientTLS("")
	anon.Certificates = nil
	err = info(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(anon)), grpc.WithPerRPCCredentials(bearerOf(readToken(t, f.Token))))
	assert.Equal(t, codes.Unavailable, status.Code(err), "no client certificate: %v", err)
	// And a server of another CA is not trusted by ours.
	otherAddr, _ := serve(t, load(t, other))
	err = info(t, otherAddr, creds.DialOptions()...)
	assert.Equal(t, codes.Unavailable, status.Code(err), "a server of another CA: %v", err)
	assert.ErrorContains(t, err, "certificate signed by unknown authority")

	err = info(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	assert.Equal(t, codes.Unavailable, status.Code(err), "plaintext: %v", err)
	assert.Equal(t, int64(2), refused.Load(), "handshakes that failed reached no handler")

	conn, err := grpc.NewClient(addr, load(t, noToken).DialOptions()...)
	require.NoError(t, err)
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "health needs no token")
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.Status)
}

// bearerOf sends the token in file as grpcurl's -H would.
type bearerOf string

func (b bearerOf) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearerOf) RequireTransportSecurity() bool { return true }

// A token alone, on loopback, without TLS: checked the same way.
func TestTokenOnLoopback(t *testing.T) {
	f := pki(t)
	creds := load(t, secure.Files{Token: f.Token})
	addr, refused := serve(t, creds)
	require.NoError(t, info(t, addr, creds.DialOptions()...))
	err := info(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	assert.Equal(t, int64(1), refused.Load())

	require.NoError(t, creds.CheckDial(addr))
	assert.ErrorContains(t, creds.CheckDial("10.1.2.3:7070"), "in the clear")
	assert.ErrorContains(t, creds.CheckListen(&net.TCPAddr{IP: net.IPv4zero, Port: 7070}), "in the clear")
	require.NoError(t, creds.CheckListen(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7070}))
	require.NoError(t, load(t, f).CheckDial("10.1.2.3:7070"), "with TLS a token may go anywhere")
}

// TestACallWithoutTheTokenIsRefusedBeforeItsMessage: the token is checked
// on a call's headers, before its message is read. A unary call without it
// whose message is too large for the server gets Unauthenticated, not
// ResourceExhausted: nothing of the message was read (before, the check
// ran after the request was received and decoded, so a caller without the
// token could hold a goroutine and a megabyte with a message it never
// finished), and the refusal is counted.
func TestACallWithoutTheTokenIsRefusedBeforeItsMessage(t *testing.T) {
	f := pki(t)
	creds := load(t, secure.Files{Token: f.Token})
	addr, refused := serve(t, creds)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tooLarge := &pb.PullPiece{Values: make([]byte, 2*wire.MaxMessageBytes)}
	err = conn.Invoke(ctx, "/shoal.v1.ParameterServer/Info", tooLarge, new(pb.InfoResponse))
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	assert.Equal(t, int64(1), refused.Load())
}

// TestSecretFilesStayPrivate: shoal certs writes the key and the token
// readable by their owner alone, also over files that were readable by
// all (before, os.WriteFile kept an old file's mode); Load says when
// others may read them (a warning the commands log: a Kubernetes Secret
// is mounted readable by all by default).
func TestSecretFilesStayPrivate(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{secure.TokenFile, secure.KeyFile} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("old\n"), 0o644))
	}
	f, err := secure.WriteTestPKI(dir, nil, time.Hour)
	require.NoError(t, err)
	for _, p := range []string{f.Token, f.Key} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), p)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 4, "no temporary files left: %v", entries)
	assert.Empty(t, load(t, f).Exposed())

	require.NoError(t, os.Chmod(f.Token, 0o644))
	require.NoError(t, os.Chmod(f.Key, 0o640))
	assert.Equal(t, []string{
		fmt.Sprintf("--tls-key %s can be read by other users (mode 0640): chmod 600 it", f.Key),
		fmt.Sprintf("--auth-token-file %s can be read by other users (mode 0644): chmod 600 it", f.Token),
	}, load(t, f).Exposed())
}

// Load says what is wrong with a set of files.
func TestLoadRefuses(t *testing.T) {
	f := pki(t)
	short := filepath.Join(t.TempDir(), "short")
	require.NoError(t, os.WriteFile(short, []byte("secret\n"), 0o600))
	two := filepath.Join(t.TempDir(), "two")
	require.NoError(t, os.WriteFile(two, []byte("0123456789abcdef0123\nsecond line\n"), 0o600))
	notPEM := filepath.Join(t.TempDir(), "ca")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	for _, tc := range []struct {
		name string
		f    secure.Files
		want string
	}{
		{"cert without key", secure.Files{Cert: f.Cert, CA: f.CA}, "give both"},
		{"cert without CA", secure.Files{Cert: f.Cert, Key: f.Key}, "--tls-ca: needed"},
		{"CA alone", secure.Files{CA: f.CA}, "every node, worker or server, presents a certificate"},
		{"key of another cert", secure.Files{Cert: f.Cert, Key: pki(t).Key, CA: f.CA}, "private key does not match"},
		{"CA not PEM", secure.Files{Cert: f.Cert, Key: f.Key, CA: notPEM}, "no PEM certificate"},
		{"missing token", secure.Files{Token: filepath.Join(t.TempDir(), "none")}, "no such file"},
		{"short token", secure.Files{Token: short}, "the token has 6 bytes, want at least 16"},
		{"two lines", secure.Files{Token: two}, "want one line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := secure.Load(tc.f)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	c, err := secure.Load(secure.Files{})
	require.NoError(t, err)
	assert.Nil(t, c)
	assert.Equal(t, "plaintext, no authentication", c.Describe())
}

func readToken(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:7070": true, "[::1]:7070": true, "localhost:7070": true, "127.0.0.1": true,
		"[::]:7070": false, "0.0.0.0:7070": false, ":7070": false, "10.1.2.3:7070": false, "ps0:7070": false} {
		assert.Equal(t, want, secure.Loopback(addr), addr)
	}
}
