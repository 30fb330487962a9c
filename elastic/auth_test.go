package elastic

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/shoalml/shoal/proto/shoalpb"
)

// TestAForgedReformIsRefused: a coordinator with the job's secret refuses
// a remote Reform that its members did not sign — unsigned, or signed
// with another key — even from a member's own host (loopback: a local
// process forged about 40 re-forms in a row of a plaintext elastic ring),
// and takes a signed one into its round.
func TestAForgedReformIsRefused(t *testing.T) {
	secret := Secret([]byte("the job's gossip key, 32 bytes!!"))
	r := &roster{}
	r.live = []Member{{ID: 0, Addr: "127.0.0.1:1"}, {ID: 1, Addr: "127.0.0.1:2"}}
	coord, err := NewCoordinator(CoordinatorConfig{JobID: "j", Self: 0, Initial: 2, MinWorkers: 1, RejoinTimeout: time.Minute, Roster: r, Secret: secret,
		Listen: func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	stop := Serve(lis, coord, nil)
	defer func() { require.NoError(t, stop()) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	cl := pb.NewElasticClient(conn)

	req := func() *pb.ReformRequest {
		return &pb.ReformRequest{JobId: "j", Member: 1, Generation: 3, Reason: "forged", Step: 100, Previous: []int32{0, 1}}
	}
	ask := func(r *pb.ReformRequest, d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := cl.Reform(ctx, r)
		return err
	}
	unsigned := req()
	err = ask(unsigned, 10*time.Second)
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "without the job's signature")

	other := req()
	require.NoError(t, sign(Secret([]byte("another job's key, also 32 bytes")), other))
	assert.Equal(t, codes.PermissionDenied, status.Code(ask(other, 10*time.Second)))

	tampered := req()
	require.NoError(t, sign(secret, tampered))
	tampered.Step++
	assert.Equal(t, codes.PermissionDenied, status.Code(ask(tampered, 10*time.Second)), "a signed request changed after signing")

	signed := req()
	require.NoError(t, sign(secret, signed))
	// Past the signature it waits for the round (member 0 never asks):
	// its deadline ends it, not a refusal.
	err = ask(signed, 300*time.Millisecond)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
}

// TestAFloodOfForgedReformsIsCountedNotLoggedEach: refused Reforms are
// counted by reason (Refusals: shoal_elastic_refused_reforms_total) and
// logged at most once a second with the count so far, so that a flood of
// forged requests does not fill the log (1,000 from a loopback process
// gave 1,065 WARN lines in a 25 s run; issue 44).
func TestAFloodOfForgedReformsIsCountedNotLoggedEach(t *testing.T) {
	secret := Secret([]byte("the job's gossip key, 32 bytes!!"))
	r := &roster{}
	r.live = []Member{{ID: 0, Addr: "127.0.0.1:1"}, {ID: 1, Addr: "127.0.0.1:2"}}
	var log bytes.Buffer
	coord, err := NewCoordinator(CoordinatorConfig{JobID: "j", Self: 0, Initial: 2, MinWorkers: 1, RejoinTimeout: time.Minute, Roster: r, Secret: secret,
		Listen: func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	from := func(ip string) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}})
	}
	const n = 1000
	start := time.Now()
	for range n {
		_, err := coord.Reform(from("127.0.0.1"), &pb.ReformRequest{JobId: "j", Member: 1, Generation: 1, Reason: "forged", Previous: []int32{0, 1}})
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	}
	took := time.Since(start)
	lines := strings.Count(log.String(), `msg="refused a Reform"`)
	assert.GreaterOrEqual(t, lines, 1, "the first refusal is logged")
	assert.LessOrEqual(t, lines, 2+int(took/time.Second), "at most a line a second (%d requests in %v)", n, took)
	assert.Contains(t, log.String(), "reason=signature")

	// Signed, but from a host other than member 1's; and a request of
	// another job from within the process (no peer: no signature needed).
	signed := &pb.ReformRequest{JobId: "j", Member: 1, Generation: 1, Previous: []int32{0, 1}}
	require.NoError(t, sign(secret, signed))
	_, err = coord.Reform(from("10.1.2.3"), signed)
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = coord.Reform(context.Background(), &pb.ReformRequest{JobId: "another", Member: 0})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Equal(t, map[string]int64{RefusedSignature: n, RefusedHost: 1, RefusedRequest: 1, RefusedMember: 0}, coord.Refusals())
}
