package tensorcoll_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/tensorcoll"
)

// group returns n Sessions over an in-memory transport, closed at cleanup.
func group(t *testing.T, n int, timeout time.Duration) []*tensorcoll.Session {
	t.Helper()
	ss := make([]*tensorcoll.Session, n)
	for rank, tr := range collective.NewMemGroup(n) {
		cfg := tensorcoll.DefaultConfig()
		cfg.Rank, cfg.Size, cfg.CallTimeout = rank, n, timeout
		s, err := tensorcoll.New(tr, cfg)
		require.NoError(t, err)
		ss[rank] = s
		t.Cleanup(func() { s.Close() })
	}
	return ss
}

// each runs f for every rank concurrently and returns the ranks' errors.
func each(ss []*tensorcoll.Session, f func(rank int, s *tensorcoll.Session) error) []error {
	errs := make([]error, len(ss))
	var wg sync.WaitGroup
	for rank, s := range ss {
		wg.Go(func() { errs[rank] = f(rank, s) })
	}
	wg.Wait()
	return errs
}

func bytesOf[T any](x []T) []byte {
	var z T
	return bytes.Clone(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x)*int(unsafe.Sizeof(z))))
}

func valuesOf[T any](b []byte) []T {
	var z T
	out := make([]T, len(b)/int(unsafe.Sizeof(z)))
	copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), len(b)), b)
	return out
}

func f16(x float32) []byte { // exact for the small integers used here
	b := make([]byte, 2)
	bits := math.Float32bits(x)
	if x == 0 {
		return b
	}
	exp := int((bits>>23)&0xff) - 127 + 15
	binary.LittleEndian.PutUint16(b, uint16(bits>>31)<<15|uint16(exp)<<10|uint16((bits>>13)&0x3ff))
	return b
}

func TestAllreduce(t *testing.T) {
	const N = 3
	tests := []struct {
		name  string
		dtype tensorcoll.DType
		op    tensorcoll.ReduceOp
		in    func(rank int) []byte
		want  []byte
	}{
		{"float32 average", tensorcoll.Float32, tensorcoll.Average,
			func(r int) []byte { return bytesOf([]float32{float32(r), 3 * float32(r)}) }, bytesOf([]float32{1, 3})},
		{"float32 sum", tensorcoll.Float32, tensorcoll.Sum,
			func(r int) []byte { return bytesOf([]float32{float32(r), -1}) }, bytesOf([]float32{3, -3})},
		{"float32 max", tensorcoll.Float32, tensorcoll.Max,
			func(r int) []byte { return bytesOf([]float32{float32(r), 5 - float32(r)}) }, bytesOf([]float32{2, 5})},
		{"float32 product", tensorcoll.Float32, tensorcoll.Product,
			func(r int) []byte { return bytesOf([]float32{float32(r + 1)}) }, bytesOf([]float32{6})},
		{"float64 sum exact", tensorcoll.Float64, tensorcoll.Sum,
			func(r int) []byte { return bytesOf([]float64{1e17 + float64(r)}) }, bytesOf([]float64{3e17 + 3})},
		{"int64 sum exact", tensorcoll.Int64, tensorcoll.Sum,
			func(r int) []byte { return bytesOf([]int64{1<<40 + int64(r), -int64(r)}) }, bytesOf([]int64{3<<40 + 3, -3})},
		{"int32 min", tensorcoll.Int32, tensorcoll.Min,
			func(r int) []byte { return bytesOf([]int32{int32(r) - 1, 7}) }, bytesOf([]int32{-1, 7})},
		{"uint8 odd length", tensorcoll.Uint8, tensorcoll.Sum,
			func(r int) []byte { return []byte{byte(r), 1, 2} }, []byte{3, 3, 6}},
		{"bool max is or", tensorcoll.Bool, tensorcoll.Max,
			func(r int) []byte { return []byte{b2u(r == 1), 0} }, []byte{1, 0}},
		{"float16 sum", tensorcoll.Float16, tensorcoll.Sum,
			func(r int) []byte { return append(f16(float32(r)), f16(2)...) }, append(f16(3), f16(6)...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ss := group(t, N, 10*time.Second)
			out := make([][]byte, N)
			errs := each(ss, func(rank int, s *tensorcoll.Session) error {
				out[rank] = tc.in(rank)
				_, err := s.Do(t.Context(), tensorcoll.Request{Kind: tensorcoll.KindAllreduce, Name: tc.name, Data: out[rank], DType: tc.dtype, Op: tc.op})
				return err
			})
			for rank := range N {
				require.NoError(t, errs[rank])
				assert.Equal(t, tc.want, out[rank], "rank %d", rank)
			}
		})
	}
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func TestScaleAndCompression(t *testing.T) {
	ss := group(t, 2, 10*time.Second)
	out := make([][]float32, 2)
	errs := each(ss, func(rank int, s *tensorcoll.Session) error {
		out[rank] = []float32{1, 2, 3, 4, 5}
		d := bytesOf(out[rank])
		_, err := s.Do(t.Context(), tensorcoll.Request{Kind: tensorcoll.KindAllreduce, Name: "g", Data: d, DType: tensorcoll.Float32,
			Op: tensorcoll.Sum, Compression: collective.Float16, Prescale: 0.5, Postscale: 3})
		out[rank] = valuesOf[float32](d)
		return err
	})
	for rank := range 2 {
		require.NoError(t, errs[rank])
		assert.Equal(t, []float32{3, 6, 9, 12, 15}, out[rank])
	}
}

func TestBroadcastAndAllgather(t *testing.T) {
	ss := group(t, 3, 10*time.Second)
	bc := make([][]byte, 3)
	gathered := make([][]byte, 3)
	rows := make([][]int, 3)
	errs := each(ss, func(rank int, s *tensorcoll.Session) error {
		bc[rank] = bytes.Repeat([]byte{byte(rank)}, 7)
		if _, err := s.Do(t.Context(), tensorcoll.Request{Kind: tensorcoll.KindBroadcast, Name: "b", Data: bc[rank], DType: tensorcoll.Uint8, Root: 2}); err != nil {
			return err
		}
		// rank r gives r+1 rows of 3 bytes
		in := bytes.Repeat([]byte{byte(10 + rank), 1, 2}, rank+1)
		op, err := s.Do(t.Context(), tensorcoll.Request{Kind: tensorcoll.KindAllgather, Name: "g", Data: in, DType: tensorcoll.Uint8, RowBytes: 3})
		if err != nil {
			return err
		}
		gathered[rank], rows[rank] = op.Result()
		_, err = s.Do(t.Context(), tensorcoll.Request{Kind: tensorcoll.KindBarrier})
		return err
	})
	want := append(append([]byte{10, 1, 2}, bytes.Repeat([]byte{11, 1, 2}, 2)...), bytes.Repeat([]byte{12, 1, 2}, 3)...)
	for rank := range 3 {
		require.NoError(t, errs[rank])
		assert.Equal(t, bytes.Repeat([]byte{2}, 7), bc[rank])
		assert.Equal(t, want, gathered[rank])
		assert.Equal(t, []int{1, 2, 3}, rows[rank])
	}
}

func TestMismatchFailsEveryRankAndKeepsSession(t *testing.T) {
	ss := group(t, 2, 10*time.Second)
	errs := each(ss, func(rank int, s *tensorcoll.Session) error {
		n := 4 + rank // rank 1 submits a longer tensor
		_, err := s.Do(t.Context(), tensorcoll.Request{Kind: tensorcoll.KindAllreduce, Name: "fc.weight", Data: make([]byte, 4*n), DType: tensorcoll.Float32})
		return err
	})
	for rank, err := range errs {
		require.ErrorIs(t, err, tensorcoll.ErrMismatch, "rank %d", rank)
		var me *tensorcoll.MismatchError
		require.ErrorAs(t, err, &me)
		assert.Contains(t, err.Error(), `rank 0: allreduce "fc.weight" float32[4] average`)
		assert.Contains(t, err.Error(), `rank 1: allreduce "fc.weight" float32[5] average`)
	}
	// The streams are in step: the next collective works.
	errs = each(ss, func(rank int, s *tensorcoll.Session) error {
		_, err := s.Do(t.Context(), tensorcoll.Request{Kind: tensorcoll.KindBarrier})
		return err
	})
	assert.Equal(t, []error{nil, nil}, errs)
}

func TestInvalidRequestsRefusedAtSubmit(t *testing.T) {
	ss := group(t, 1, time.Second)
	tests := []struct {
		name string
		req  tensorcoll.Request
		want string
	}{
		{"average of ints", tensorcoll.Request{Kind: tensorcoll.KindAllreduce, Data: make([]byte, 8), DType: tensorcoll.Int64, Op: tensorcoll.Average}, "integer dtype"},
		{"unknown dtype", tensorcoll.Request{Kind: tensorcoll.KindAllreduce, Data: make([]byte, 8), DType: 99}, "unsupported dtype"},
		{"ragged bytes", tensorcoll.Request{Kind: tensorcoll.KindAllreduce, Data: make([]byte, 7), DType: tensorcoll.Float32}, "whole number"},
		{"root out of range", tensorcoll.Request{Kind: tensorcoll.KindBroadcast, Data: make([]byte, 4), DType: tensorcoll.Float32, Root: 1}, "root rank 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ss[0].Submit(tc.req)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestPeerFailureBreaksSession(t *testing.T) {
	ss := group(t, 3, 5*time.Second)
	require.NoError(t, ss[2].Close()) // rank 2 leaves
	errs := each(ss[:2], func(rank int, s *tensorcoll.Session) error {
		_, err := s.Do(t.Context(), tensorcoll.Request{Kind: tensorcoll.KindAllreduce, Name: "g", Data: make([]byte, 400), DType: tensorcoll.Float32})
		return err
	})
	for rank, err := range errs {
		require.Error(t, err, "rank %d", rank)
		assert.True(t, errors.Is(err, collective.ErrPeer) || errors.Is(err, context.DeadlineExceeded), "rank %d: %v", rank, err)
		_, err = ss[rank].Do(t.Context(), tensorcoll.Request{Kind: tensorcoll.KindBarrier})
		assert.ErrorIs(t, err, tensorcoll.ErrBroken, "rank %d", rank)
	}
	_, err := ss[2].Submit(tensorcoll.Request{Kind: tensorcoll.KindBarrier})
	assert.ErrorIs(t, err, tensorcoll.ErrClosed)
}
