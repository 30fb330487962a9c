package rpc_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shoalml/shoal/consistency"
	"github.com/shoalml/shoal/internal/testcluster"
	"github.com/shoalml/shoal/nn"
	pb "github.com/shoalml/shoal/proto/shoalpb"
	"github.com/shoalml/shoal/ps"
	"github.com/shoalml/shoal/wire"
)

// outerCores is one async shard of an 8-float vector (values 0..7, chunks
// of 4) that applies pseudo-gradients of localSteps local steps (0:
// gradients) by outer SGD at lr 1, each in full.
func outerCores(t testing.TB, localSteps int) []*ps.Server {
	var l nn.Layout
	l.Add("w", 8)
	cfg := ps.DefaultConfig()
	cfg.Mode, cfg.Workers, cfg.LocalSteps = consistency.Async, 2, localSteps
	cfg.Optimizer.Algorithm, cfg.Optimizer.LR = "sgd", 1
	cfg.Update.Rule = ps.UpdateFull
	return testcluster.CoresWith(t, cfg, l, []float32{0, 1, 2, 3, 4, 5, 6, 7}, 1, 4)
}

func int8Header() *pb.PushHeader {
	h := header(0, [2]int64{0, 8})
	h.Encoding = pb.Encoding_INT8
	return h
}

// int8Piece is x in INT8, as a client writes it.
func int8Piece(x []float32) ([]byte, []float32) {
	b, scales := make([]byte, len(x)), make([]float32, wire.Int8Scales(len(x)))
	wire.PutInt8(b, scales, x)
	return b, scales
}

// TestInt8PseudoGradient: a shard with local steps applies an INT8 push
// as the values it stands for (q·scale), through either RPC, here split
// over two pieces with a scale each.
func TestInt8PseudoGradient(t *testing.T) {
	delta := []float32{0.5, -1, 0.25, 2, -0.125, 0, 1, 3}
	for _, rpc := range pushRPCs {
		t.Run(rpc.name, func(t *testing.T) {
			c := testcluster.Start(t, outerCores(t, 10)...)
			cl := pb.NewParameterServerClient(dial(t, c, 0))
			b0, s0 := int8Piece(delta[:4])
			b1, s1 := int8Piece(delta[4:])
			_, err := rpc.push(t, cl, []*pb.PushPiece{{Header: int8Header(), Grads: b0, Scales: s0}, {Grads: b1, Scales: s1}})
			require.NoError(t, err)
			want := make([]float32, 8)
			for i := range want {
				q := append([]float32(nil), delta[i/4*4:i/4*4+4]...)
				wire.Int8.Quantize(q)
				want[i] = float32(i) - q[i%4]
			}
			assert.Equal(t, want, pullAll(t, cl))
			st := c.Shard(0).Core.Stats()
			assert.Empty(t, st.RejectedBy)
			assert.Equal(t, int64(2*(4+4)), st.PushBytes, "two pieces of 4 values and a scale")
		})
	}
}

// TestInt8PushBadInput: INT8 pushes with a bad scale, the wrong number of
// scales or of values, scales on a piece of another encoding, or INT8 to
// a shard without local steps, are refused with InvalidArgument, counted
// once by reason, and change nothing.
func TestInt8PushBadInput(t *testing.T) {
	ones := []byte{1, 1, 1, 1, 1, 1, 1, 1}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		name       string
		localSteps int
		pieces     []*pb.PushPiece
		want       string
		reason     string
	}{
		{"nan scale", 10, []*pb.PushPiece{{Header: int8Header(), Grads: ones, Scales: []float32{nan}}}, "INT8 scale 0 of the piece after 0 floats: int8 scale is not finite", "non-finite"},
		{"inf scale in the second piece", 10, []*pb.PushPiece{{Header: int8Header(), Grads: ones[:4], Scales: []float32{1}}, {Grads: ones[:4], Scales: []float32{inf}}},
			"INT8 scale 0 of the piece after 4 floats: int8 scale is not finite (want a finite scale > 0): +Inf", "non-finite"},
		{"zero scale", 10, []*pb.PushPiece{{Header: int8Header(), Grads: ones, Scales: []float32{0}}}, "int8 scale is not > 0 (want a finite scale > 0): 0", "wire"},
		{"negative scale", 10, []*pb.PushPiece{{Header: int8Header(), Grads: ones, Scales: []float32{-0.5}}}, "int8 scale is not > 0 (want a finite scale > 0): -0.5", "wire"},
		{"no scale", 10, []*pb.PushPiece{{Header: int8Header(), Grads: ones}}, "an INT8 piece of 8 values with 0 scales, want 1 (one per 2048 values)", "shape"},
		{"two scales", 10, []*pb.PushPiece{{Header: int8Header(), Grads: ones, Scales: []float32{1, 1}}}, "an INT8 piece of 8 values with 2 scales, want 1", "shape"},
		{"a scale without values", 10, []*pb.PushPiece{{Header: int8Header(), Scales: []float32{1}}, {Grads: ones, Scales: []float32{1}}}, "an INT8 piece of 0 values with 1 scales, want 0", "shape"},
		{"too few values", 10, []*pb.PushPiece{{Header: int8Header(), Grads: ones[:7], Scales: []float32{1}}}, "pieces carry 7 floats, the header's ranges hold 8", "shape"},
		{"too many values", 10, []*pb.PushPiece{{Header: int8Header(), Grads: append(ones, 1), Scales: []float32{1}}}, "more than the 8 floats", "shape"},
		{"decoded beyond the magnitude bound", 10, []*pb.PushPiece{{Header: int8Header(), Grads: ones, Scales: []float32{1e38}}}, "reaches 1e+38", "magnitude"},
		{"scales on float32", 10, []*pb.PushPiece{{Header: header(0, [2]int64{0, 8}), Grads: floats(1, 1, 1, 1, 1, 1, 1, 1), Scales: []float32{1}}}, "a FLOAT32 piece with 1 scales; scales are for INT8 pieces only", "wire"},
		{"int8 gradients", 0, []*pb.PushPiece{{Header: int8Header(), Grads: ones, Scales: []float32{1}}}, "INT8 is for the pseudo-gradients of local steps, and this shard applies gradients", "wire"},
	} {
		for _, rpc := range pushRPCs {
			t.Run(rpc.name+"/"+tc.name, func(t *testing.T) {
				c := testcluster.Start(t, outerCores(t, tc.localSteps)...)
				cl := pb.NewParameterServerClient(dial(t, c, 0))
				before := pullAll(t, cl)
				_, err := rpc.push(t, cl, tc.pieces)
				require.Error(t, err)
				assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
				assert.Contains(t, status.Convert(err).Message(), tc.want)
				assert.Equal(t, before, pullAll(t, cl), "a refused push changed the values")
				assert.Equal(t, map[string]int64{tc.reason: 1}, c.Shard(0).Core.Stats().RejectedBy, "counted once, by reason")
			})
		}
	}
}
