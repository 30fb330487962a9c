package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/client"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/shard"
	"github.com/shoalml/shoal/wire"
)

// lyingShard is shard `shard` of 2 of a plan of n floats in chunks of 4:
// it answers Info as the plan says, and Pull and PushPull (after reading
// the push) with the pieces reply gives, which need not be its share.
type lyingShard struct {
	pb.UnimplementedParameterServerServer
	shard, n int
	reply    func() []*pb.PullPiece
}

func (s *lyingShard) Info(context.Context, *pb.InfoRequest) (*pb.InfoResponse, error) {
	return &pb.InfoResponse{Plan: &pb.Plan{Version: shard.Version, VectorLength: int64(s.n), Servers: 2, ChunkFloats: 4},
		Shard: int32(s.shard), Mode: "async", Workers: 4,
		Layout: []*pb.TensorInfo{{Name: "w", Shape: []int64{int64(s.n)}}}}, nil
}

func (s *lyingShard) send(send func(*pb.PullPiece) error) error {
	for _, p := range s.reply() {
		if err := send(p); err != nil {
			return err
		}
	}
	return nil
}

func (s *lyingShard) Pull(_ *pb.PullRequest, stream grpc.ServerStreamingServer[pb.PullPiece]) error {
	return s.send(stream.Send)
}

func (s *lyingShard) PushPull(stream grpc.BidiStreamingServer[pb.PushPiece, pb.PullPiece]) error {
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
	}
	return s.send(stream.Send)
}

func serveLiars(t *testing.T, shards ...*lyingShard) *client.Client {
	t.Helper()
	cl, err := client.Dial(ctxT(t), listenLiars(t, shards...), client.WithRetry(1, time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	return cl
}

// listenLiars serves each shard on a port of its own and returns their
// addresses.
func listenLiars(t *testing.T, shards ...*lyingShard) []string {
	t.Helper()
	var addrs []string
	for _, s := range shards {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		g := grpc.NewServer()
		pb.RegisterParameterServerServer(g, s)
		go g.Serve(lis)
		t.Cleanup(g.Stop)
		addrs = append(addrs, lis.Addr().String())
	}
	return addrs
}

func piece(off, clock int64, v float32, n int) *pb.PullPiece {
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = v
	}
	return &pb.PullPiece{Offset: off, Clock: clock, Values: wire.Float32.Append(nil, vals), Push: &pb.PushResponse{Clock: clock}}
}

func sentinel(n int) []float32 {
	d := make([]float32, n)
	for i := range d {
		d[i] = -1
	}
	return d
}

// pullBoth pulls, then push-pulls, into a vector of -1s, and returns
// each call's error and what it left in the vector.
func pullBoth(t *testing.T, cl *client.Client, n int) map[string]error {
	t.Helper()
	errs := map[string]error{}
	for _, call := range []string{"Pull", "PushPull"} {
		dst := sentinel(n)
		var err error
		if call == "Pull" {
			_, err = cl.Pull(ctxT(t), dst)
		} else {
			_, err = cl.PushPull(ctxT(t), client.PushPullArgs{PushArgs: client.PushArgs{WorkerID: 0, Grads: make([]float32, n)}, Pull: true, Dst: dst})
		}
		t.Logf("%s: %v; dst %v", call, err, dst)
		errs[call] = err
	}
	return errs
}

// TestALyingShardIsCaught: a shard's reply must be its share, whole, once,
// in one view. Each lie below passed before: the client counted floats
// and looked at a piece's first and last chunk only.
func TestALyingShardIsCaught(t *testing.T) {
	honest1 := func(n int) *lyingShard { // shard 1 of 2, its chunks at 4, 12, 20...
		return &lyingShard{shard: 1, n: n, reply: func() []*pb.PullPiece {
			var ps []*pb.PullPiece
			for off := 4; off < n; off += 8 {
				ps = append(ps, piece(int64(off), 1, 1, 4))
			}
			return ps
		}}
	}
	for _, tc := range []struct {
		name  string
		n     int
		lie   []*pb.PullPiece // shard 0's reply
		wants string
	}{
		// 16 floats: shard 0 owns [0,4) and [8,12).
		{"a chunk twice, another never", 16, []*pb.PullPiece{piece(0, 1, 7, 4), piece(0, 1, 7, 4)}, "server sent floats [0,4) twice"},
		{"overlapping pieces", 16, []*pb.PullPiece{piece(0, 1, 7, 4), piece(8, 1, 7, 2), piece(9, 1, 7, 2)}, "server sent floats [9,10) twice"},
		// 24 floats: shard 0 owns [0,4), [8,12) and [16,20); a piece from
		// 0 to 12 ends in its own chunk but covers shard 1's [4,8).
		{"a piece across another shard's chunk", 24, []*pb.PullPiece{piece(0, 1, 666, 12), piece(16, 1, 666, 4)}, "server sent a piece at offset 0 of 48 bytes, outside its chunks"},
		{"pieces at two clocks", 16, []*pb.PullPiece{piece(0, 3, 1, 4), piece(8, 9, 1, 4)}, "server sent values at clocks 3 and 9 in one reply"},
		{"a piece short", 16, []*pb.PullPiece{piece(0, 1, 1, 4), piece(8, 1, 1, 3)}, "server sent 7 floats, it owns 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lie := &lyingShard{shard: 0, n: tc.n, reply: func() []*pb.PullPiece { return tc.lie }}
			cl := serveLiars(t, lie, honest1(tc.n))
			for call, err := range pullBoth(t, cl, tc.n) {
				assert.Equal(t, codes.Internal, status.Code(err), "%s: %v", call, err)
				assert.ErrorContains(t, err, tc.wants, call)
			}
		})
	}
	t.Run("the truth", func(t *testing.T) {
		truth := &lyingShard{shard: 0, n: 16, reply: func() []*pb.PullPiece { return []*pb.PullPiece{piece(8, 1, 2, 4), piece(0, 1, 2, 4)} }}
		for call, err := range pullBoth(t, serveLiars(t, truth, honest1(16)), 16) {
			assert.NoError(t, err, "%s: pieces in any order, each once", call)
		}
	})
}

// TestAPlanOfTooManyChunksIsRefused: a shard whose plan cuts 2⁴⁰ floats
// into 2³⁸ chunks would have Dial walk every one; it is refused at once.
func TestAPlanOfTooManyChunksIsRefused(t *testing.T) {
	addrs := listenLiars(t, &lyingShard{shard: 0, n: 1 << 40}, &lyingShard{shard: 1, n: 1 << 40})
	_, err := client.Dial(ctxT(t), addrs, client.WithRetry(1, time.Millisecond))
	assert.ErrorContains(t, err, "chunks of 16 bytes cut a vector of 1099511627776 floats into 274877906944 chunks, more than 1048576")
}
