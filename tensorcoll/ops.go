package tensorcoll

import (
	"context"
	"unsafe"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/wire"
)

// floatBytes is f's memory as bytes.
func floatBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// asFloats is b's memory as float32s when b is 4-byte aligned and a whole
// number of floats, else false.
func asFloats(b []byte) ([]float32, bool) {
	if len(b) == 0 {
		return nil, true
	}
	if len(b)%4 != 0 || uintptr(unsafe.Pointer(&b[0]))%4 != 0 {
		return nil, false
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4), true
}

// padded copies b into new float32s, the last one zero-padded.
func padded(b []byte) []float32 {
	f := make([]float32, (len(b)+3)/4)
	copy(floatBytes(f), b)
	return f
}

// broadcast sends root's Data to every rank, byte for byte.
func (s *Session) broadcast(ctx context.Context, r *Request) error {
	comm := s.comms[collective.None]
	if f, ok := asFloats(r.Data); ok {
		return comm.Broadcast(ctx, f, r.Root)
	}
	f := padded(r.Data)
	if err := comm.Broadcast(ctx, f, r.Root); err != nil {
		return err
	}
	copy(r.Data, floatBytes(f))
	return nil
}

// allgather gathers every rank's Data, byte for byte; nbytes[i] is rank
// i's size (from the descriptors).
func (s *Session) allgather(ctx context.Context, r *Request, nbytes []int) ([]byte, []int, error) {
	counts := make([]int, len(nbytes))
	total, totalBytes := 0, 0
	for i, b := range nbytes {
		counts[i] = (b + 3) / 4
		total += counts[i]
		totalBytes += b
	}
	out := make([]float32, total)
	if err := s.comms[collective.None].Allgather(ctx, padded(r.Data), out, counts); err != nil {
		return nil, nil, err
	}
	res := make([]byte, 0, totalBytes)
	rows := make([]int, len(nbytes))
	ob, off := floatBytes(out), 0
	for i, b := range nbytes {
		res = append(res, ob[off:off+b]...)
		off += 4 * counts[i]
		rows[i] = b / r.RowBytes
	}
	return res, rows, nil
}

// ringOps are the ops the ring reduces itself.
var ringOps = map[ReduceOp]collective.Op{Average: collective.Average, Sum: collective.Sum, Min: collective.Min, Max: collective.Max}

// allreduce reduces Data over the ranks in place.
func (s *Session) allreduce(ctx context.Context, r *Request) error {
	cop, onRing := ringOps[r.Op]
	switch {
	case r.DType == Float32 && (onRing || r.Op == Adasum):
		f, aligned := asFloats(r.Data)
		if !aligned {
			f = padded(r.Data)
		}
		if err := s.reduceFloats(ctx, f, r, cop); err != nil {
			return err
		}
		if !aligned {
			copy(r.Data, floatBytes(f))
		}
		return nil
	case (r.DType == Float16 || r.DType == BFloat16) && (onRing || r.Op == Adasum):
		enc, comp := wire.Float16, collective.Float16
		if r.DType == BFloat16 {
			enc, comp = wire.BFloat16, collective.BFloat16
		}
		f := make([]float32, len(r.Data)/2)
		if err := enc.Decode(f, r.Data); err != nil {
			return err
		}
		rr := *r
		if rr.Compression == collective.None {
			rr.Compression = comp // the data is no wider than its dtype
		}
		if err := s.reduceFloats(ctx, f, &rr, cop); err != nil {
			return err
		}
		enc.Put(r.Data, f)
		return nil
	}
	return s.gatherReduce(ctx, r)
}

// reduceFloats reduces f over the ring (or with AdaSum), with r's scaling.
func (s *Session) reduceFloats(ctx context.Context, f []float32, r *Request, op collective.Op) error {
	scale(f, r.Prescale)
	var err error
	if r.Op == Adasum {
		err = s.comms[collective.None].AllreduceAdasum(ctx, f)
	} else {
		err = s.comms[r.Compression].Allreduce(ctx, f, op)
	}
	if err != nil {
		return err
	}
	scale(f, r.Postscale)
	return nil
}

func scale(f []float32, by float64) {
	if !scaled(by) {
		return
	}
	k := float32(by)
	for i := range f {
		f[i] *= k
	}
}

// gatherReduce gathers every rank's Data and reduces it locally in its
// dtype, in rank order: exact, and the same on every rank.
func (s *Session) gatherReduce(ctx context.Context, r *Request) error {
	n, N := len(r.Data), s.cfg.Size
	m := (n + 3) / 4
	counts := make([]int, N)
	for i := range counts {
		counts[i] = m
	}
	out := make([]float32, m*N)
	if err := s.comms[collective.None].Allgather(ctx, padded(r.Data), out, counts); err != nil {
		return err
	}
	all := floatBytes(out)
	parts := make([][]byte, N)
	for i := range parts {
		parts[i] = all[i*4*m : i*4*m+n]
	}
	res := make([]byte, n+8) // room to align the result to 8 bytes
	off := int((8 - uintptr(unsafe.Pointer(&res[0]))%8) % 8)
	dst := res[off : off+n]
	switch r.DType {
	case Float32:
		reduceFloat(view[float32](dst), views[float32](parts), r, N)
	case Float64:
		reduceFloat(view[float64](dst), views[float64](parts), r, N)
	case Int32:
		reduceInt(view[int32](dst), views[int32](parts), r.Op)
	case Int64:
		reduceInt(view[int64](dst), views[int64](parts), r.Op)
	case Int16:
		reduceInt(view[int16](dst), views[int16](parts), r.Op)
	case Int8:
		reduceInt(view[int8](dst), views[int8](parts), r.Op)
	case Uint8, Bool:
		reduceInt(view[uint8](dst), views[uint8](parts), r.Op)
	default: // float16/bfloat16 with Product: widen, reduce, narrow
		enc := wire.Float16
		if r.DType == BFloat16 {
			enc = wire.BFloat16
		}
		fs := make([][]float32, N)
		for i, p := range parts {
			fs[i] = make([]float32, n/2)
			if err := enc.Decode(fs[i], p); err != nil {
				return err
			}
		}
		acc := make([]float32, n/2)
		reduceFloat(acc, fs, r, N)
		enc.Put(r.Data, acc)
		return nil
	}
	copy(r.Data, dst)
	return nil
}

// view is b's memory as Ts; b must be aligned for T.
func view[T any](b []byte) []T {
	var z T
	sz := int(unsafe.Sizeof(z))
	if len(b) < sz {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/sz)
}

// views is view of each part, copying the parts that are not aligned.
func views[T any](parts [][]byte) [][]T {
	var z T
	al := uintptr(unsafe.Alignof(z))
	out := make([][]T, len(parts))
	for i, p := range parts {
		if len(p) > 0 && uintptr(unsafe.Pointer(&p[0]))%al != 0 {
			c := make([]T, len(p)/int(unsafe.Sizeof(z)))
			copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(c))), len(p)), p)
			out[i] = c
			continue
		}
		out[i] = view[T](p)
	}
	return out
}

func reduceFloat[T float32 | float64](dst []T, parts [][]T, r *Request, N int) {
	pre, post := T(1), T(1)
	if scaled(r.Prescale) {
		pre = T(r.Prescale)
	}
	if scaled(r.Postscale) {
		post = T(r.Postscale)
	}
	if r.Op == Average {
		post /= T(N)
	}
	for j := range dst {
		acc := parts[0][j] * pre
		for _, p := range parts[1:] {
			x := p[j] * pre
			switch r.Op {
			case Min:
				if x < acc || x != x {
					acc = x
				}
			case Max:
				if x > acc || x != x {
					acc = x
				}
			case Product:
				acc *= x
			default:
				acc += x
			}
		}
		dst[j] = acc * post
	}
}

func reduceInt[T int8 | int16 | int32 | int64 | uint8](dst []T, parts [][]T, op ReduceOp) {
	for j := range dst {
		acc := parts[0][j]
		for _, p := range parts[1:] {
			x := p[j]
			switch op {
			case Min:
				acc = min(acc, x)
			case Max:
				acc = max(acc, x)
			case Product:
				acc *= x
			default:
				acc += x
			}
		}
		dst[j] = acc
	}
}
