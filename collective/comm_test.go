package collective

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newComms returns a Communicator per rank of a fresh mem group, closed
// when the test ends.
func newComms(t *testing.T, n int, cfg Config) []*Communicator {
	t.Helper()
	cs := make([]*Communicator, n)
	for i, tr := range memTransports(t, n) {
		c, err := New(tr, cfg)
		require.NoError(t, err)
		cs[i] = c
	}
	return cs
}

// onAll runs f on every rank at once and returns the errors by rank.
func onAll(t *testing.T, cs []*Communicator, f func(ctx context.Context, r int, c *Communicator) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { errs[r] = f(ctx, r, c) })
	}
	wg.Wait()
	return errs
}

func onAllOK(t *testing.T, cs []*Communicator, f func(ctx context.Context, r int, c *Communicator) error) {
	t.Helper()
	for r, err := range onAll(t, cs, f) {
		require.NoError(t, err, "rank %d", r)
	}
}

func randVec(seed uint64, n int) []float32 {
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	x := make([]float32, n)
	for i := range x {
		x[i] = 2*rng.Float32() - 1
	}
	return x
}

func TestBlocks(t *testing.T) {
	tests := []struct {
		name    string
		n, size int
		want    []int
	}{
		{name: "divisible", n: 12, size: 4, want: []int{3, 3, 3, 3}},
		{name: "remainder goes first", n: 14, size: 4, want: []int{4, 4, 3, 3}},
		{name: "n < size", n: 2, size: 4, want: []int{1, 1, 0, 0}},
		{name: "n == 0", n: 0, size: 3, want: []int{0, 0, 0}},
		{name: "one rank", n: 7, size: 1, want: []int{7}},
		{name: "prime", n: 999983, size: 8, want: []int{124998, 124998, 124998, 124998, 124998, 124998, 124998, 124997}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Blocks(tc.n, tc.size))
			off := 0
			for i, l := range tc.want {
				o, bl := blockRange(tc.n, tc.size, i)
				assert.Equal(t, off, o, "offset of block %d", i)
				assert.Equal(t, l, bl, "length of block %d", i)
				off += l
			}
		})
	}
	assert.Panics(t, func() { Blocks(1, 0) })
	assert.Panics(t, func() { Blocks(-1, 2) })
}

func TestNewValidates(t *testing.T) {
	tr := NewMemGroup(1)[0]
	tests := []struct {
		name    string
		t       Transport
		cfg     Config
		wantErr string
	}{
		{name: "nil transport", cfg: DefaultConfig(), wantErr: "collective: nil Transport"},
		{name: "zero segment", t: tr, cfg: Config{}, wantErr: "collective: Config.SegmentBytes is 0, want at least 4 (DefaultConfig uses 1048576)"},
		{name: "bad compression", t: tr, cfg: Config{SegmentBytes: 8, Compression: 7}, wantErr: "collective: Config.Compression is Compression(7), want None, Float16 or BFloat16"},
		{name: "negative call timeout", t: tr, cfg: Config{SegmentBytes: 8, CallTimeout: -1}, wantErr: "collective: Config.CallTimeout is -1ns, want 0 (none) or more"},
		{name: "bad rank", t: badRank{}, cfg: DefaultConfig(), wantErr: "collective: transport says rank 3 of size 2, want 0 <= rank < size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.t, tc.cfg)
			assert.EqualError(t, err, tc.wantErr)
		})
	}
	c, err := New(tr, DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, 0, c.Rank())
	assert.Equal(t, 1, c.Size())
}

type badRank struct{ noTraffic }

func (badRank) Rank() int { return 3 }
func (badRank) Size() int { return 2 }

func TestArgumentErrors(t *testing.T) {
	c := newComms(t, 4, DefaultConfig())[1]
	ctx := t.Context()
	tests := []struct {
		name    string
		call    func() error
		wantErr string
	}{
		{name: "allreduce op", call: func() error { return c.Allreduce(ctx, nil, Op(9)) },
			wantErr: "allreduce: unknown op Op(9), want Sum, Average, Min or Max"},
		{name: "reducescatter out", call: func() error { return c.ReduceScatter(ctx, make([]float32, 13), make([]float32, 4), Sum) },
			wantErr: "reducescatter: out has 4 floats, want 3 (block 1 of Blocks(13, 4))"},
		{name: "allgather counts", call: func() error { return c.Allgather(ctx, nil, nil, []int{1, 2, 3}) },
			wantErr: "allgather: counts has 3 entries, want 4 (one per rank)"},
		{name: "allgather negative", call: func() error { return c.Allgather(ctx, nil, nil, []int{1, -2, 3, 0}) },
			wantErr: "allgather: counts[1] is -2, want >= 0"},
		{name: "allgather in", call: func() error { return c.Allgather(ctx, make([]float32, 3), make([]float32, 6), []int{1, 2, 3, 0}) },
			wantErr: "allgather: in has 3 floats, want counts[1] = 2"},
		{name: "allgather out", call: func() error { return c.Allgather(ctx, make([]float32, 2), make([]float32, 5), []int{1, 2, 3, 0}) },
			wantErr: "allgather: out has 5 floats, want 6 (the sum of counts)"},
		{name: "broadcast root", call: func() error { return c.Broadcast(ctx, nil, 4) },
			wantErr: "broadcast: root is 4, want 0..3"},
		{name: "alltoall sendCounts sum", call: func() error {
			return c.Alltoall(ctx, make([]float32, 12), []int{1, 2, 3, 4}, make([]float32, 10), []int{1, 2, 3, 4})
		}, wantErr: "alltoall: sendCounts sum to 10, in has 12 floats"},
		{name: "alltoall recvCounts entries", call: func() error {
			return c.Alltoall(ctx, make([]float32, 10), []int{1, 2, 3, 4}, make([]float32, 10), []int{1, 2, 3})
		}, wantErr: "alltoall: recvCounts has 3 entries, want 4 (one per rank)"},
		{name: "alltoall self part", call: func() error {
			return c.Alltoall(ctx, make([]float32, 10), []int{1, 2, 3, 4}, make([]float32, 11), []int{1, 3, 3, 4})
		}, wantErr: "alltoall: sendCounts[1] is 2 but recvCounts[1] is 3; this rank's part for itself must fit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.EqualError(t, tc.call(), tc.wantErr)
		})
	}
	// Argument errors leave the Communicator usable.
	assert.NoError(t, c.broken)
}

// noTraffic is a one-rank transport that fails the test on any traffic.
type noTraffic struct{ t *testing.T }

func (noTraffic) Rank() int { return 0 }
func (noTraffic) Size() int { return 1 }
func (n noTraffic) Send(context.Context, int, []byte) error {
	n.t.Error("Send on a one-rank group")
	return errors.New("no traffic expected")
}
func (n noTraffic) Recv(context.Context, int, []byte) error {
	n.t.Error("Recv on a one-rank group")
	return errors.New("no traffic expected")
}
func (noTraffic) Close() error { return nil }

func TestOneRankNoTraffic(t *testing.T) {
	for _, comp := range []Compression{None, Float16} {
		t.Run(comp.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Compression = comp
			c, err := New(noTraffic{t}, cfg)
			require.NoError(t, err)
			ctx := t.Context()
			x := []float32{1.1, -2, 3}
			for _, op := range []Op{Sum, Average, Min, Max} {
				buf := append([]float32(nil), x...)
				require.NoError(t, c.Allreduce(ctx, buf, op))
				assert.Equal(t, x, buf, "%v over one rank is the identity", op)
			}
			out := make([]float32, 3)
			require.NoError(t, c.ReduceScatter(ctx, x, out, Average))
			assert.Equal(t, x, out)
			require.NoError(t, c.Allgather(ctx, x, out, []int{3}))
			assert.Equal(t, x, out)
			require.NoError(t, c.Broadcast(ctx, out, 0))
			require.NoError(t, c.Alltoall(ctx, x, []int{3}, out, []int{3}))
			assert.Equal(t, x, out)
			require.NoError(t, c.Barrier(ctx))
			require.NoError(t, c.AllreduceAdasum(ctx, out))
			assert.Equal(t, x, out)
		})
	}
}

// TestPortableWire runs collectives with some ranks on the portable
// (big-endian host) encoding and checks the results are bit-identical to
// an all-native group.
func TestPortableWire(t *testing.T) {
	const n, size = 3, 1000
	cfg := DefaultConfig()
	cfg.SegmentBytes = 4 * 37
	run := func(portable bool) [][]float32 {
		cs := newComms(t, n, cfg)
		if portable {
			cs[0].native, cs[2].native = false, false
		}
		var res [][]float32
		bufs := make([][]float32, n)
		for r := range bufs {
			bufs[r] = randVec(uint64(r), size)
		}
		onAllOK(t, cs, func(ctx context.Context, r int, c *Communicator) error {
			return c.Allreduce(ctx, bufs[r], Sum)
		})
		res = append(res, bufs...)
		ags := make([][]float32, n)
		onAllOK(t, cs, func(ctx context.Context, r int, c *Communicator) error {
			ags[r] = make([]float32, 3*size)
			return c.Allgather(ctx, randVec(uint64(10+r), size), ags[r], []int{size, size, size})
		})
		res = append(res, ags...)
		a2a := make([][]float32, n)
		onAllOK(t, cs, func(ctx context.Context, r int, c *Communicator) error {
			a2a[r] = make([]float32, 3*100)
			return c.Alltoall(ctx, randVec(uint64(20+r), 300), []int{100, 100, 100}, a2a[r], []int{100, 100, 100})
		})
		res = append(res, a2a...)
		ada := make([][]float32, n)
		onAllOK(t, cs, func(ctx context.Context, r int, c *Communicator) error {
			ada[r] = randVec(uint64(30+r), size)
			return c.AllreduceAdasum(ctx, ada[r])
		})
		return append(res, ada...)
	}
	native, portable := run(false), run(true)
	for i := range native {
		assert.Equal(t, native[i], portable[i], "result %d", i)
	}
}

// TestCompressedLarge checks a compressed Allreduce of a vector that spans
// many segments: within the format's precision and identical on all ranks.
func TestCompressedLarge(t *testing.T) {
	const n, size = 3, 100003
	for _, tc := range []struct {
		comp Compression
		rel  float64
	}{{Float16, 0x1p-11}, {BFloat16, 0x1p-8}} {
		t.Run(tc.comp.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Compression = tc.comp
			cfg.SegmentBytes = 64 << 10
			cs := newComms(t, n, cfg)
			in := make([][]float32, n)
			bufs := make([][]float32, n)
			for r := range in {
				in[r] = randVec(uint64(40+r), size)
				bufs[r] = append([]float32(nil), in[r]...)
			}
			onAllOK(t, cs, func(ctx context.Context, r int, c *Communicator) error {
				return c.Allreduce(ctx, bufs[r], Average)
			})
			for r := 1; r < n; r++ {
				require.Equal(t, bufs[0], bufs[r], "rank %d differs from rank 0", r)
			}
			for i := range size {
				var want, mag float64
				for r := range n {
					want += float64(in[r][i])
					mag += math.Abs(float64(in[r][i]))
				}
				want /= n
				tol := float64(n+2)*tc.rel*mag/n + 0x1p-22
				require.InDelta(t, want, bufs[0][i], tol, "element %d", i)
			}
		})
	}
}

// TestBrokenAfterFailure: a collective that fails part-way leaves the
// streams out of step, so later calls fail with ErrBroken and the cause.
func TestBrokenAfterFailure(t *testing.T) {
	cs := newComms(t, 2, DefaultConfig())
	require.NoError(t, cs[1].t.Close())
	err := cs[0].Allreduce(t.Context(), make([]float32, 10), Sum)
	var pe *PeerError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Rank)
	assert.ErrorIs(t, err, ErrPeer)

	err = cs[0].Barrier(t.Context())
	assert.ErrorIs(t, err, ErrBroken)
	require.ErrorAs(t, err, &pe, "the cause stays visible")
	assert.Equal(t, 1, pe.Rank)

	// A ctx that ended before the call does not break a Communicator.
	c := newComms(t, 2, DefaultConfig())[0]
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, c.Barrier(ctx), context.Canceled)
	assert.NoError(t, c.broken)
}

// TestCallTimeout: with Config.CallTimeout a call whose peer never joins
// ends at the deadline instead of hanging, and breaks the Communicator;
// a call that finishes in time is not affected.
func TestCallTimeout(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CallTimeout = 20 * time.Millisecond
	cs := newComms(t, 2, cfg)
	err := cs[0].Allreduce(t.Context(), make([]float32, 10), Sum) // rank 1 never calls
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, cs[0].Barrier(t.Context()), ErrBroken)

	cfg.CallTimeout = time.Minute
	cs = newComms(t, 2, cfg)
	errs := make(chan error, 2)
	for _, c := range cs {
		go func() { errs <- c.Allreduce(t.Context(), []float32{1, 2, 3}, Sum) }()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	assert.Nil(t, cs[0].cancel, "the call's timer is released")
}

// signalTransport closes entered when a Recv starts.
type signalTransport struct {
	Transport
	once    sync.Once
	entered chan struct{}
}

func (s *signalTransport) Recv(ctx context.Context, peer int, buf []byte) error {
	s.once.Do(func() { close(s.entered) })
	return s.Transport.Recv(ctx, peer, buf)
}

func TestConcurrentCallRefused(t *testing.T) {
	ts := memTransports(t, 2)
	st := &signalTransport{Transport: ts[0], entered: make(chan struct{})}
	c, err := New(st, DefaultConfig())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() { first <- c.Allreduce(ctx, make([]float32, 8), Sum) }() // rank 1 never joins
	<-st.entered
	assert.EqualError(t, c.Barrier(t.Context()), "barrier: another collective is running on this Communicator; calls must be sequential")
	cancel()
	assert.ErrorIs(t, <-first, context.Canceled)
}

// TestAllreduceAllocs: a warm Allreduce allocates a few small objects per
// call (its goroutine and context), never per segment or per element.
func TestAllreduceAllocs(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SegmentBytes = 4 << 10 // 64 segments
	cs := newComms(t, 2, cfg)
	bufs := [][]float32{make([]float32, 64<<10), make([]float32, 64<<10)}
	ctx := t.Context()
	call := func() {
		var wg sync.WaitGroup
		wg.Go(func() { assert.NoError(t, cs[1].Allreduce(ctx, bufs[1], Sum)) })
		assert.NoError(t, cs[0].Allreduce(ctx, bufs[0], Sum))
		wg.Wait()
	}
	call()
	allocs := testing.AllocsPerRun(20, call)
	t.Logf("%.1f allocations per two-rank Allreduce", allocs)
	assert.LessOrEqual(t, allocs, 30.0)
}

func TestOpAndCompressionNames(t *testing.T) {
	assert.Equal(t, "average", Average.String())
	assert.Equal(t, "Op(7)", Op(7).String())
	for _, tc := range []struct {
		in   string
		want Compression
	}{{"none", None}, {"FP16", Float16}, {"float16", Float16}, {"bf16", BFloat16}, {"bfloat16", BFloat16}} {
		got, err := ParseCompression(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
		back, err := ParseCompression(got.String())
		require.NoError(t, err)
		assert.Equal(t, got, back)
	}
	_, err := ParseCompression("int8")
	assert.EqualError(t, err, `unknown compression "int8", want none, float16 or bfloat16`)
}
