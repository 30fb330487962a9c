package shoalpb

import (
	"encoding/binary"
	"fmt"
	"io"
	"unsafe"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/shoalml/shoal/wire"
)

// The tensor codec replaces gRPC's "proto" codec in every process that
// imports this package (the way vtprotobuf's codec does). Every message is
// still plain protobuf on the wire, so any protobuf client (Python's
// grpcio, grpcurl) talks to Shoal as before. What changes is how Shoal
// itself builds and reads the messages that carry tensors: a TensorOut's
// payload goes to the transport as the buffer it is in (no protobuf copy),
// and a TensorIn's payload is copied once, from the transport's buffers
// straight into the receiver's float32 vector. Every other message goes
// through gRPC's own proto codec unchanged.
func init() {
	encoding.RegisterCodecV2(tensorCodec{std: encoding.GetCodecV2(protocodec.Name)})
}

// TensorOut is a message sent with its tensor payload as a separate buffer.
// Msg holds every field but the payload, whose field number is Field (a
// bytes field). The codec takes over Payload: the transport frees it once
// it has written it.
type TensorOut struct {
	Msg     proto.Message
	Field   protowire.Number
	Payload mem.Buffer
}

// TensorIn receives a message whose payload, field Field, is copied
// straight to where Place says.
type TensorIn struct {
	Msg   proto.Message
	Field protowire.Number
	// Place is called when the payload is reached, with Msg holding the
	// fields before it on the wire (protobuf writes fields in number
	// order; Shoal's messages put what Place needs first) and the
	// payload's length in bytes. It returns where the payload goes: Floats
	// (little-endian float32 decoded into it; n must be 4·len) or Bytes
	// (copied; n must be len), or neither to drop it.
	Place func(n int) Sink
	// Len is the payload's length in bytes; Placed says whether it went
	// where Place said.
	Len    int
	Placed bool
}

// Sink is where a TensorIn's payload goes.
type Sink struct {
	Floats []float32
	Bytes  []byte
}

type tensorCodec struct{ std encoding.CodecV2 }

func (tensorCodec) Name() string { return protocodec.Name }

func (c tensorCodec) Marshal(v any) (mem.BufferSlice, error) {
	out, ok := v.(*TensorOut)
	if !ok {
		return c.std.Marshal(v)
	}
	hdr, err := proto.MarshalOptions{}.MarshalAppend(make([]byte, 0, 64), out.Msg)
	if err != nil {
		return nil, err
	}
	if out.Payload == nil || out.Payload.Len() == 0 {
		// An empty bytes field is left out, as protobuf does.
		if out.Payload != nil {
			out.Payload.Free()
		}
		return mem.BufferSlice{mem.SliceBuffer(hdr)}, nil
	}
	hdr = protowire.AppendTag(hdr, out.Field, protowire.BytesType)
	hdr = protowire.AppendVarint(hdr, uint64(out.Payload.Len()))
	return mem.BufferSlice{mem.SliceBuffer(hdr), out.Payload}, nil
}

func (c tensorCodec) Unmarshal(data mem.BufferSlice, v any) error {
	in, ok := v.(*TensorIn)
	if !ok {
		return c.std.Unmarshal(data, v)
	}
	r := data.Reader()
	defer r.Close()
	in.Len, in.Placed = 0, false
	var rest []byte // every field but the payload (varints and lengths re-encoded shortest)
	seen := false
	for r.Remaining() > 0 {
		tag, err := binary.ReadUvarint(r)
		if err != nil {
			return fmt.Errorf("tensor message: %w", err)
		}
		num, typ := protowire.DecodeTag(tag)
		if num < protowire.MinValidNumber {
			return fmt.Errorf("tensor message: field number %d", num)
		}
		if num == in.Field && typ == protowire.BytesType {
			n, err := readLen(r)
			if err != nil {
				return err
			}
			if seen {
				return fmt.Errorf("tensor message: payload field %d twice", num)
			}
			seen = true
			if err := proto.Unmarshal(rest, in.Msg); err != nil {
				return err
			}
			in.Len = n
			if err := in.place(r, n); err != nil {
				return err
			}
			continue
		}
		rest = protowire.AppendTag(rest, num, typ)
		switch typ {
		case protowire.VarintType:
			x, err := binary.ReadUvarint(r)
			if err != nil {
				return fmt.Errorf("tensor message: %w", err)
			}
			rest = protowire.AppendVarint(rest, x)
		case protowire.Fixed32Type, protowire.Fixed64Type:
			k := 4
			if typ == protowire.Fixed64Type {
				k = 8
			}
			if rest, err = appendN(rest, r, k); err != nil {
				return err
			}
		case protowire.BytesType:
			n, err := readLen(r)
			if err != nil {
				return err
			}
			rest = protowire.AppendVarint(rest, uint64(n))
			if rest, err = appendN(rest, r, n); err != nil {
				return err
			}
		default:
			return fmt.Errorf("tensor message: field %d has wire type %d", num, typ)
		}
	}
	return proto.Unmarshal(rest, in.Msg)
}

// maxField bounds a non-payload field (a header): a sender cannot make the
// receiver buffer a large one.
const maxField = 1 << 20

func readLen(r *mem.Reader) (int, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, fmt.Errorf("tensor message: %w", err)
	}
	if n > uint64(r.Remaining()) {
		return 0, fmt.Errorf("tensor message: a field of %d bytes in %d", n, r.Remaining())
	}
	return int(n), nil
}

func appendN(dst []byte, r *mem.Reader, n int) ([]byte, error) {
	if n > maxField {
		return nil, fmt.Errorf("tensor message: a header field of %d bytes, at most %d", n, maxField)
	}
	i := len(dst)
	dst = append(dst, make([]byte, n)...)
	if _, err := io.ReadFull(r, dst[i:]); err != nil {
		return nil, fmt.Errorf("tensor message: %w", err)
	}
	return dst, nil
}

// place copies the n payload bytes at r where in.Place says, or drops them.
func (in *TensorIn) place(r *mem.Reader, n int) error {
	var s Sink
	if in.Place != nil {
		s = in.Place(n)
	}
	switch {
	case s.Floats != nil && 4*len(s.Floats) == n:
		if wire.NativeLittleEndian {
			_, err := io.ReadFull(r, wire.Float32Bytes(s.Floats))
			in.Placed = err == nil
			return err
		}
		var b [4096]byte
		for f := s.Floats; len(f) > 0; {
			k := min(len(f), len(b)/4)
			if _, err := io.ReadFull(r, b[:4*k]); err != nil {
				return err
			}
			_ = wire.Float32.Decode(f[:k], b[:4*k]) // sized to match
			f = f[k:]
		}
		in.Placed = true
		return nil
	case s.Bytes != nil && len(s.Bytes) == n:
		_, err := io.ReadFull(r, s.Bytes)
		in.Placed = err == nil
		return err
	}
	if _, err := r.Discard(n); err != nil {
		return fmt.Errorf("tensor message: %w", err)
	}
	return nil
}

// HeldFloatBuffer returns a buffer over vals' own memory, without a copy,
// for values that stay as they are until release is called: hold takes
// that promise (see ps.ChunkRead.Hold) and returns release, which the
// buffer calls once its last reference is freed. ok is false, and hold is
// not called, where the memory cannot go as it is (a big-endian host) or
// gRPC would not count the buffer's references (one of at most
// mem.BufferPoolingThreshold bytes): copy then.
func HeldFloatBuffer(vals []float32, hold func() (release func())) (b mem.Buffer, ok bool) {
	if !wire.NativeLittleEndian || mem.IsBelowBufferPoolingThreshold(4*len(vals)) {
		return nil, false
	}
	bytes := wire.Float32Bytes(vals)
	return mem.NewBuffer(&bytes, releaser(hold())), true
}

// releaser is the "pool" of a HeldFloatBuffer: giving the memory back is
// calling it.
type releaser func()

func (r releaser) Get(int) *[]byte { panic("shoalpb: a held buffer has no pool to get from") }
func (r releaser) Put(*[]byte)     { r() }

// NewFloatBuffer returns a pooled buffer of n little-endian float32 values
// that fill writes (into the buffer's own memory on a little-endian host).
// Whoever holds the buffer frees it; the transport does for a TensorOut's
// payload.
func NewFloatBuffer(n int, fill func(dst []float32) error) (mem.Buffer, error) {
	pool := Pool
	b := pool.Get(4 * n)
	var err error
	if wire.NativeLittleEndian && uintptr(unsafe.Pointer(unsafe.SliceData(*b)))%4 == 0 {
		err = fill(unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(*b))), n))
	} else {
		f := make([]float32, n)
		if err = fill(f); err == nil {
			wire.Float32.Put(*b, f)
		}
	}
	if err != nil {
		pool.Put(b)
		return nil, err
	}
	return mem.NewBuffer(b, pool), nil
}
