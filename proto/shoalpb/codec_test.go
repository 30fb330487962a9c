package shoalpb

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/shoalml/shoal/wire"
)

// split cuts b into a BufferSlice of pieces of at most n bytes, as the
// transport hands a message over in frames.
func split(b []byte, n int) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		s = append(s, mem.SliceBuffer(b[:k]))
		b = b[k:]
	}
	return s
}

func codec() encoding.CodecV2 { return encoding.GetCodecV2(protocodec.Name) }

// TestTensorRoundTrip: a TensorOut is plain protobuf on the wire (the
// standard decoder reads it), and a TensorIn reads standard protobuf,
// the payload straight into floats, whatever the frame boundaries.
func TestTensorRoundTrip(t *testing.T) {
	vals := []float32{1, -2.5, 3e38, 0}
	payload := wire.Float32.Append(nil, vals)
	msg := &PullPiece{Offset: 12, Clock: 7, HeldMicros: 99, Push: &PushResponse{Clock: 8, Staleness: 1}}
	out, err := codec().Marshal(&TensorOut{Msg: proto.Clone(msg), Field: 2, Payload: mem.SliceBuffer(payload)})
	require.NoError(t, err)
	sent := out.Materialize()

	var std PullPiece
	require.NoError(t, proto.Unmarshal(sent, &std))
	want := proto.Clone(msg).(*PullPiece)
	want.Values = payload
	assert.True(t, proto.Equal(want, &std), "the standard decoder reads %v", &std)

	canonical, err := proto.Marshal(want) // fields in number order
	require.NoError(t, err)
	for _, w := range [][]byte{sent, canonical} {
		for _, frame := range []int{1, 3, 16, 1 << 20} {
			got := make([]float32, len(vals))
			var p PullPiece
			in := &TensorIn{Msg: &p, Field: 2, Place: func(n int) Sink {
				assert.Equal(t, int64(12), p.Offset, "fields before the payload are in Msg when Place runs")
				return Sink{Floats: got[:n/4]}
			}}
			require.NoError(t, codec().Unmarshal(split(w, frame), in))
			assert.True(t, in.Placed)
			assert.Equal(t, 16, in.Len)
			assert.Equal(t, vals, got)
			assert.Equal(t, int64(7), p.Clock)
			assert.Equal(t, int64(8), p.Push.GetClock())
			assert.Empty(t, p.Values, "the payload is not kept in the message")
		}
	}
}

// TestTensorInDrops: a payload Place does not want, or one of the wrong
// length for its sink, is read past and not stored.
func TestTensorInDrops(t *testing.T) {
	msg, err := proto.Marshal(&PullPiece{Offset: 1, Values: wire.Float32.Append(nil, []float32{1, 2, 3}), Clock: 5})
	require.NoError(t, err)
	for _, sink := range []Sink{{}, {Floats: make([]float32, 2)}, {Bytes: make([]byte, 3)}} {
		var p PullPiece
		in := &TensorIn{Msg: &p, Field: 2, Place: func(int) Sink { return sink }}
		require.NoError(t, codec().Unmarshal(split(msg, 5), in))
		assert.False(t, in.Placed)
		assert.Equal(t, 12, in.Len)
		assert.Equal(t, int64(5), p.Clock, "fields after the payload are read")
	}
}

// TestTensorInRefusesDamage: truncated messages, a payload longer than the
// message, a payload field twice and invalid field numbers are errors.
func TestTensorInRefusesDamage(t *testing.T) {
	good, err := proto.Marshal(&PushPiece{Header: &PushHeader{WorkerId: 1, Step: 2}, Grads: wire.Float32.Append(nil, []float32{1, 2})})
	require.NoError(t, err)
	for name, w := range map[string][]byte{
		"truncated":      good[:len(good)-1],
		"payload twice":  append(append([]byte(nil), good...), 0x12, 0x00),
		"field 0":        {0x02, 0x00},
		"long length":    {0x12, 0xff, 0x01},
		"bad varint":     {0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"group wiretype": {0x0b},
	} {
		var p PushPiece
		in := &TensorIn{Msg: &p, Field: 2, Place: func(n int) Sink { return Sink{Bytes: make([]byte, n)} }}
		assert.Error(t, codec().Unmarshal(split(w, 4), in), name)
	}
}

// FuzzTensorUnmarshal: any bytes, cut into any frames, decode without a
// panic; what decodes matches protobuf's own decoder.
func FuzzTensorUnmarshal(f *testing.F) {
	seed, _ := proto.Marshal(&PushPiece{Header: &PushHeader{WorkerId: 3, Ranges: []*Range{{Offset: 0, Length: 2}}}, Grads: wire.Float32.Append(nil, []float32{1, 2})})
	f.Add(seed, uint8(3))
	f.Add([]byte{0x12, 0x04, 1, 2, 3, 4}, uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, frame uint8) {
		var p PushPiece
		var payload []byte
		in := &TensorIn{Msg: &p, Field: 2, Place: func(n int) Sink {
			payload = make([]byte, n)
			return Sink{Bytes: payload}
		}}
		if err := codec().Unmarshal(split(b, int(frame)+1), in); err != nil {
			return
		}
		var std PushPiece
		if err := proto.Unmarshal(b, &std); err != nil {
			return // the tensor codec may read what protobuf refuses (e.g. a field it skips)
		}
		if in.Placed {
			assert.True(t, bytes.Equal(std.Grads, payload), "payload")
		}
		std.Grads = nil
		// The codec passes unknown top-level fields on re-encoded (varints
		// and lengths in their shortest form), protobuf as they came: the same
		// fields, maybe not the same bytes.
		canonicalUnknown(t, &std)
		canonicalUnknown(t, &p)
		assert.True(t, proto.Equal(&std, &p), "fields: %v against %v", &p, &std)
	})
}

// canonicalUnknown re-encodes m's unknown fields with shortest varints
// (values and lengths).
func canonicalUnknown(t *testing.T, m proto.Message) {
	r := m.ProtoReflect()
	var out []byte
	for b := r.GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		require.GreaterOrEqual(t, n, 0)
		b = b[n:]
		out = protowire.AppendTag(out, num, typ)
		switch typ {
		case protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			require.GreaterOrEqual(t, n, 0)
			out, b = protowire.AppendVarint(out, x), b[n:]
			continue
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			require.GreaterOrEqual(t, n, 0)
			out, b = protowire.AppendBytes(out, v), b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		require.GreaterOrEqual(t, n, 0)
		out, b = append(out, b[:n]...), b[n:]
	}
	r.SetUnknown(out)
}
