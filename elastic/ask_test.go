package elastic

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/secure"
)

// TestAskKeepsTheTokenOnLoopback: the default Ask does not call a
// coordinator that CheckDial refuses (with a token and no TLS, one beyond
// loopback: the roster's gossip names it, and without a gossip key anyone
// can), and says PermissionDenied, which ends the re-form at once; before,
// it sent the token there in the clear.
func TestAskKeepsTheTokenOnLoopback(t *testing.T) {
	f, err := secure.WriteTestPKI(filepath.Join(t.TempDir(), "certs"), nil, time.Hour)
	require.NoError(t, err)
	creds, err := secure.Load(secure.Files{Token: f.Token})
	require.NoError(t, err)
	m := &member{cfg: Config{CheckDial: creds.CheckDial, DialOptions: creds.DialOptions()}, log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = m.askGRPC(ctx, "192.0.2.7:7000", &pb.ReformRequest{})
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "the token would cross the network in the clear")
	// On loopback it calls (and finds no one there).
	_, err = m.askGRPC(ctx, "127.0.0.1:1", &pb.ReformRequest{})
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
}
