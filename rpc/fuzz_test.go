package rpc_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoalml/shoal/internal/testcluster"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
)

// splitMessages cuts fuzz input into length-prefixed messages (a
// little-endian uint16 length, then that many bytes).
func splitMessages(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= 2 && len(out) < 64 {
		n := min(int(binary.LittleEndian.Uint16(b)), len(b)-2)
		out = append(out, b[2:2+n])
		b = b[2+n:]
	}
	return out
}

// FuzzPushStream sends whatever pieces the input decodes to as one push
// stream to a real shard over gRPC: the server answers every stream (no
// panic, no hang past the call's deadline), and whatever it applied
// leaves every weight finite.
func FuzzPushStream(f *testing.F) {
	good := &pb.PushPiece{Header: header(0, [2]int64{0, 8}), Grads: floats(1, 2, 3, 4, 5, 6, 7, 8)}
	b, err := proto.Marshal(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(append(binary.LittleEndian.AppendUint16(nil, uint16(len(b))), b...))
	huge := &pb.PushPiece{Header: header(1, [2]int64{0, 8}), Grads: floats(3e38, 3e38, 3e38, 3e38, 3e38, 3e38, 3e38, 3e38)}
	b, _ = proto.Marshal(huge)
	f.Add(append(binary.LittleEndian.AppendUint16(nil, uint16(len(b))), b...))
	fuzzPushes(f, testcluster.Cores(f, 8, 1, 4, 0.5)[0])
}

// FuzzInt8PushStream is FuzzPushStream against a shard of local steps,
// which takes INT8 pseudo-gradients: whatever the scales and values, it
// answers, and the weights stay finite.
func FuzzInt8PushStream(f *testing.F) {
	b0, s0 := int8Piece([]float32{1, -2, 3, 0.5})
	b1, s1 := int8Piece([]float32{0, 0, 7, -7})
	var seed []byte
	for _, p := range []*pb.PushPiece{{Header: int8Header(), Grads: b0, Scales: s0}, {Grads: b1, Scales: s1}} {
		b, err := proto.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		seed = append(append(seed, binary.LittleEndian.AppendUint16(nil, uint16(len(b)))...), b...)
	}
	f.Add(seed)
	bad, _ := proto.Marshal(&pb.PushPiece{Header: int8Header(), Grads: []byte{127, 127, 127, 127, 127, 127, 127, 127}, Scales: []float32{3e38}})
	f.Add(append(binary.LittleEndian.AppendUint16(nil, uint16(len(bad))), bad...))
	fuzzPushes(f, outerCores(f, 10)[0])
}

// fuzzPushes fuzzes push streams to core, served over gRPC: the server
// answers every stream (no panic, no hang past the call's deadline), and
// whatever it applied leaves every weight finite.
func fuzzPushes(f *testing.F, core *ps.Server) {
	conn, _, _ := serveCore(f, core, time.Second)
	cl := pb.NewParameterServerClient(conn)
	f.Fuzz(func(t *testing.T, in []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stream, err := cl.Push(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range splitMessages(in) {
			var piece pb.PushPiece
			if proto.Unmarshal(m, &piece) != nil {
				continue
			}
			if stream.Send(&piece) != nil {
				break
			}
		}
		_, err = stream.CloseAndRecv()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("the push stream was not answered within 20 s: %v", err)
		}
		dst := make([]float32, 8)
		if _, err := core.Snapshot(dst); err != nil {
			t.Fatal(err)
		}
		for i, v := range dst {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("weight %d is %v after a push the shard took", i, v)
			}
		}
	})
}

// FuzzPullRequest sends whatever request the input decodes to as a pull
// of a real shard over gRPC: the server answers, and streams no more
// floats than the shard holds, whatever ranges were asked for.
func FuzzPullRequest(f *testing.F) {
	good, _ := proto.Marshal(&pb.PullRequest{Ranges: []*pb.Range{{Offset: 0, Length: 8}}})
	f.Add(good)
	dup, _ := proto.Marshal(&pb.PullRequest{Ranges: []*pb.Range{{Offset: 0, Length: 8}, {Offset: 0, Length: 8}}})
	f.Add(dup)
	core := testcluster.Cores(f, 8, 1, 4, 0.5)[0]
	conn, _, _ := serveCore(f, core, time.Second)
	ps := pb.NewParameterServerClient(conn)
	f.Fuzz(func(t *testing.T, in []byte) {
		var req pb.PullRequest
		if proto.Unmarshal(in, &req) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stream, err := ps.Pull(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		var bytes int
		for {
			piece, err := stream.Recv()
			if err == io.EOF || (err != nil && ctx.Err() == nil) {
				break
			}
			if err != nil {
				t.Fatalf("the pull was not answered within 20 s: %v", err)
			}
			bytes += len(piece.GetValues())
			if bytes > 4*8 {
				t.Fatalf("the pull streamed %d bytes, the shard holds %d", bytes, 4*8)
			}
		}
	})
}
