package client_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/shoalml/shoal/client"
	"github.com/shoalml/shoal/secure"
)

// notices collects what WithConnectNotice hears.
type notices struct {
	mu  sync.Mutex
	got []string
}

func (n *notices) add(addr string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, addr+": "+err.Error())
}

func (n *notices) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.got...)
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// A server nobody serves on is said to refuse the connection while Dial
// goes on trying, and the error at the end says so too.
func TestDialSaysWhyAServerCannotBeReached(t *testing.T) {
	addr := closedAddr(t)
	var n notices
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	_, err := client.Dial(ctx, []string{addr}, client.WithConnectNotice(0, n.add))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "client: server "+addr+" not reachable after")
	assert.Contains(t, err.Error(), "connection refused")
	got := n.all()
	require.NotEmpty(t, got, "a notice while Dial tried")
	assert.Contains(t, got[0], addr+": ")
	assert.Contains(t, got[0], "connection refused")
	assert.Len(t, got, 1, "the same reason is told once (within 15 s)")
}

// A plaintext client at a TLS server is told the server may want TLS.
func TestDialHintsThatTheServerWantsTLS(t *testing.T) {
	files, err := secure.WriteTestPKI(t.TempDir(), nil, time.Hour)
	require.NoError(t, err)
	creds, err := secure.Load(files)
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(creds.ServerTLS())))
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	defer func() {
		srv.Stop()
		<-served
	}()
	var n notices
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	_, err = client.Dial(ctx, []string{lis.Addr().String()}, client.WithConnectNotice(0, n.add))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "it may serve TLS, which this client does not speak")
	require.NotEmpty(t, n.all())
	assert.Contains(t, n.all()[0], "it may serve TLS")
}
