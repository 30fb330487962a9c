// Package secure holds what Shoal's gRPC servers and clients need to
// talk over TLS (mutual, when both sides have certificates from one CA)
// and to prove themselves with a shared bearer token.
//
// A node has one certificate (server and client use), the CA that signed
// every node's, and optionally the job's token. A server with a CA asks
// every client for a certificate that CA signed and refuses the handshake
// without one; a server with a token refuses every call that does not
// carry it in the standard "authorization: Bearer <token>" metadata with
// Unauthenticated (the health service excepted, so probes need neither).
// The token is only ever sent over TLS or to loopback, where nobody else
// can read it.
package secure

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Files names a node's credentials, as given by --tls-cert, --tls-key,
// --tls-ca and --auth-token-file. Empty fields are not used.
type Files struct {
	Cert, Key, CA string
	Token         string
}

// Credentials are a node's loaded credentials. The zero value (or nil)
// is plaintext without a token.
type Credentials struct {
	cert  *tls.Certificate
	pool  *x509.CertPool
	token string
	// exposed names the secret files other users may read.
	exposed []string
}

// Exposed says which of the secret files Load read (the private key and
// the token) other users of the machine may read too, each with its mode
// and what to do, for the caller to log as a warning. (Not refused: a
// Kubernetes Secret is mounted readable by all by default, inside a
// container of one user.)
func (c *Credentials) Exposed() []string {
	if c == nil {
		return nil
	}
	return c.exposed
}

// exposedFile notes path when others than its owner may read it.
func (c *Credentials) exposedFile(flag, path string) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		c.exposed = append(c.exposed, fmt.Sprintf("%s %s can be read by other users (mode %04o): chmod 600 it", flag, path, fi.Mode().Perm()))
	}
}

// MinTokenBytes is the shortest token accepted: 16 bytes of a random
// token are 128 bits, past guessing.
const MinTokenBytes = 16

// Load reads and checks f's files: the certificate and key are both
// given or neither (and match), a CA is needed with a certificate (it is
// what the node checks its peers against), and a token file holds one
// line of at least MinTokenBytes bytes. An empty f gives nil, plaintext.
func Load(f Files) (*Credentials, error) {
	if f == (Files{}) {
		return nil, nil
	}
	c := &Credentials{}
	switch {
	case (f.Cert == "") != (f.Key == ""):
		return nil, errors.New("--tls-cert and --tls-key: give both (the node's certificate and its private key) or neither")
	case f.Cert != "" && f.CA == "":
		return nil, errors.New("--tls-ca: needed with --tls-cert, to check the certificates of the nodes this one talks to (shoal certs writes one)")
	case f.Cert == "" && f.CA != "":
		return nil, errors.New("--tls-ca without --tls-cert and --tls-key: every node, worker or server, presents a certificate too")
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", f.Cert, f.Key, err)
		}
		c.cert = &cert
		c.exposedFile("--tls-key", f.Key)
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		c.pool = x509.NewCertPool()
		if !c.pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", f.CA)
		}
	}
	if f.Token != "" {
		b, err := os.ReadFile(f.Token)
		if err != nil {
			return nil, fmt.Errorf("--auth-token-file: %w", err)
		}
		tok := string(bytes.TrimRight(b, "\r\n"))
		switch {
		case len(tok) < MinTokenBytes:
			return nil, fmt.Errorf("--auth-token-file %s: the token has %d bytes, want at least %d (shoal certs writes a random one)", f.Token, len(tok), MinTokenBytes)
		case strings.ContainsAny(tok, "\r\n"):
			return nil, fmt.Errorf("--auth-token-file %s: want one line, the token", f.Token)
		}
		c.token = tok
		c.exposedFile("--auth-token-file", f.Token)
	}
	return c, nil
}

// TLS says whether c talks TLS.
func (c *Credentials) TLS() bool { return c != nil && c.cert != nil }

// Token says whether c has a token.
func (c *Credentials) Token() bool { return c != nil && c.token != "" }

// Describe says in words what c protects, for logs: "mutual TLS and a
// token", "plaintext", ….
func (c *Credentials) Describe() string {
	switch {
	case c.TLS() && c.Token():
		return "mutual TLS and a bearer token"
	case c.TLS():
		return "mutual TLS"
	case c.Token():
		return "plaintext with a bearer token (loopback only)"
	}
	return "plaintext, no authentication"
}

// ServerTLS is the TLS configuration of a server: it presents the node's
// certificate and requires one from every client, signed by the CA.
func (c *Credentials) ServerTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{*c.cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.pool,
		MinVersion:   tls.VersionTLS13,
	}
}

// ClientTLS is the TLS configuration of a client that dials serverName
// (a host name or IP address the server's certificate must name): it
// checks the server against the CA and presents the node's certificate.
func (c *Credentials) ClientTLS(serverName string) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{*c.cert},
		RootCAs:      c.pool,
		ServerName:   serverName,
		MinVersion:   tls.VersionTLS13,
	}
}

// CheckListen refuses to serve a token in the clear beyond loopback:
// without TLS, only a listener on a loopback address may ask for one.
func (c *Credentials) CheckListen(a net.Addr) error {
	if c.Token() && !c.TLS() && !Loopback(a.String()) {
		return fmt.Errorf("--auth-token-file without --tls-cert on %s: the token would cross the network in the clear; serve on loopback or add TLS", a)
	}
	return nil
}

// CheckDial refuses to send the token in the clear beyond loopback.
func (c *Credentials) CheckDial(addr string) error {
	if c.Token() && !c.TLS() && !Loopback(addr) {
		return fmt.Errorf("--auth-token-file without --tls-cert, dialing %s: the token would cross the network in the clear; add TLS", addr)
	}
	return nil
}

// Loopback says whether addr (host:port, or a host) names a loopback
// address or localhost.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// DialOptions are the gRPC options of a client with c: TLS (or
// plaintext) and the token on every call.
func (c *Credentials) DialOptions() []grpc.DialOption {
	var o []grpc.DialOption
	if c.TLS() {
		o = append(o, grpc.WithTransportCredentials(credentials.NewTLS(c.ClientTLS(""))))
	} else {
		o = append(o, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if c.Token() {
		o = append(o, grpc.WithPerRPCCredentials(bearer(c.token)))
	}
	return o
}

// bearer sends the token with every call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false so that a token can go to loopback
// without TLS; CheckDial refuses every other address.
func (bearer) RequireTransportSecurity() bool { return false }

// Refusals counts the calls a server refused for want of the token.
type Refusals struct{ n atomic.Int64 }

// Load returns the count.
func (r *Refusals) Load() int64 { return r.n.Load() }

// ServerOptions are the gRPC options of a server with c: TLS, and with a
// token, a tap on every new stream that refuses calls without it before
// anything of their messages is read (an interceptor would run after a
// unary call's request was received and decoded: a caller without the
// token could hold a goroutine and a megabyte with a message it never
// finishes), counting them in refused (which may be nil) and logging them
// with the peer's address, at most one line a second.
func (c *Credentials) ServerOptions(log *slog.Logger, refused *Refusals) []grpc.ServerOption {
	var o []grpc.ServerOption
	if c.TLS() {
		o = append(o, grpc.Creds(credentials.NewTLS(c.ServerTLS())))
	}
	if c.Token() {
		if refused == nil {
			refused = &Refusals{}
		}
		a := &authenticator{want: []byte("Bearer " + c.token), log: log, refused: refused, every: rate.Sometimes{Interval: time.Second}}
		o = append(o, grpc.InTapHandle(a.tap))
	}
	return o
}

type authenticator struct {
	want    []byte
	log     *slog.Logger
	refused *Refusals
	every   rate.Sometimes
}

// Open says whether method (a full gRPC method name, "/service/method")
// is served without the token: the health service's, for probes that
// hold no credential. A call to any other method has passed the token
// check once it reaches a handler (or a stats handler), where the server
// has a token; rpc's connection cap counts only those.
func Open(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") }

func (a *authenticator) check(ctx context.Context, method string) error {
	if Open(method) {
		return nil
	}
	var got string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) == 1 {
			got = v[0]
		}
	}
	if subtle.ConstantTimeCompare([]byte(got), a.want) == 1 {
		return nil
	}
	n := a.refused.n.Add(1)
	from := "unknown"
	if p, ok := peer.FromContext(ctx); ok {
		from = p.Addr.String()
	}
	if a.log != nil {
		a.every.Do(func() {
			a.log.Warn("refused a call without the job's token", "component", "auth", "peer", from, "method", method, "refused", n)
		})
	}
	why := "no bearer token"
	if got != "" {
		why = "a wrong bearer token"
	}
	return status.Errorf(codes.Unauthenticated, "%s: the call carried %s; send the job's token as \"authorization: Bearer <token>\" (--auth-token-file)", method, why)
}

// tap checks a new stream's headers, in the connection's reader
// goroutine (check neither blocks nor waits).
func (a *authenticator) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	return ctx, a.check(ctx, info.FullMethodName)
}

// WithoutToken is c without its token (the same certificates): a client
// that a server with the token refuses, as tests need.
func (c *Credentials) WithoutToken() *Credentials {
	if c == nil {
		return nil
	}
	d := *c
	d.token = ""
	return &d
}
