package data

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// seqDataset's sample i is `size` copies of float32(i), labelled i%7.
type seqDataset struct{ n, size int }

var _ Dataset = seqDataset{}

func (d seqDataset) Name() string         { return "seq" }
func (d seqDataset) Len() int             { return d.n }
func (d seqDataset) Shape() (c, h, w int) { return 1, 1, d.size }
func (d seqDataset) Classes() int         { return 7 }
func (d seqDataset) Gather(idx []int, x []float32, y []int32) {
	for k, i := range idx {
		for j := range d.size {
			x[k*d.size+j] = float32(i)
		}
		y[k] = int32(i % 7)
	}
}

// gateDataset is a seqDataset whose Gather announces itself on entered and
// then waits for release to be closed.
type gateDataset struct {
	seqDataset
	entered chan struct{}
	release chan struct{}
}

func (d gateDataset) Gather(idx []int, x []float32, y []int32) {
	select {
	case d.entered <- struct{}{}:
	default:
	}
	<-d.release
	d.seqDataset.Gather(idx, x, y)
}

func newTestLoader(t *testing.T, ds Dataset, rank, world int, cfg LoaderConfig) (*Loader, *Sampler) {
	t.Helper()
	s, err := NewSampler(ds.Len(), rank, world, 99, true)
	require.NoError(t, err)
	l, err := NewLoader(cfg, ds, s)
	require.NoError(t, err)
	return l, s
}

// drain reads the epoch to io.EOF, checking each batch, and returns the
// concatenated indices and the batch sizes.
func drain(t *testing.T, l *Loader, ds seqDataset, epoch int) (indices []int, sizes []int) {
	t.Helper()
	ctx := t.Context()
	indices = []int{}
	for k := 0; ; k++ {
		b, err := l.Next(ctx)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.Equal(t, epoch, b.Epoch)
		require.Equal(t, k, b.Index)
		require.Len(t, b.X, b.Len()*ds.size)
		require.Len(t, b.Indices, b.Len())
		for i, v := range b.Indices {
			require.Equal(t, float32(v), b.X[i*ds.size], "batch %d sample %d", k, i)
			require.Equal(t, float32(v), b.X[(i+1)*ds.size-1], "batch %d sample %d", k, i)
			require.Equal(t, int32(v%7), b.Y[i])
		}
		indices = append(indices, b.Indices...)
		sizes = append(sizes, b.Len())
		l.Release(b)
	}
	_, err := l.Next(ctx)
	require.ErrorIs(t, err, io.EOF, "EOF again after the end")
	return indices, sizes
}

func TestLoaderCoversTheRanksIndicesInOrder(t *testing.T) {
	defer goleak.VerifyNone(t)
	tests := []struct {
		n, world, batch, depth int
		dropLast               bool
		sizes                  []int // per rank
	}{
		{n: 100, world: 1, batch: 10, depth: 2, sizes: []int{10, 10, 10, 10, 10, 10, 10, 10, 10, 10}},
		{n: 103, world: 4, batch: 10, depth: 2, sizes: []int{10, 10, 6}},
		{n: 103, world: 4, batch: 10, depth: 1, dropLast: true, sizes: []int{10, 10}},
		{n: 50, world: 2, batch: 25, depth: 5, dropLast: true, sizes: []int{25}},
		{n: 50, world: 2, batch: 100, depth: 3, sizes: []int{25}},
		{n: 50, world: 2, batch: 100, depth: 3, dropLast: true, sizes: nil},
		{n: 3, world: 5, batch: 2, depth: 2, sizes: []int{1}},
		{n: 50, world: 2, batch: 1 << 50, depth: 2, sizes: []int{25}},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("n=%d/world=%d/batch=%d/depth=%d/dropLast=%v", tt.n, tt.world, tt.batch, tt.depth, tt.dropLast)
		t.Run(name, func(t *testing.T) {
			ds := seqDataset{n: tt.n, size: 3}
			for rank := range tt.world {
				l, s := newTestLoader(t, ds, rank, tt.world, LoaderConfig{Batch: tt.batch, Depth: tt.depth, DropLast: tt.dropLast})
				assert.Equal(t, len(tt.sizes), l.Steps())
				for _, epoch := range []int{0, 1} {
					require.NoError(t, l.Start(t.Context(), epoch))
					got, sizes := drain(t, l, ds, epoch)
					want := s.Indices(epoch, nil)[:len(got)]
					assert.Equal(t, want, got, "rank %d epoch %d", rank, epoch)
					assert.Equal(t, tt.sizes, sizes, "rank %d epoch %d", rank, epoch)
				}
				require.NoError(t, l.Close())
			}
		})
	}
}

// A batch larger than the rank's share of an epoch is one batch of the
// share, as in PyTorch, and the loader's buffers hold no more than that.
func TestLoaderBuffersHoldAtMostTheRanksShare(t *testing.T) {
	defer goleak.VerifyNone(t)
	ds := seqDataset{n: 50, size: 3}
	l, s := newTestLoader(t, ds, 1, 2, LoaderConfig{Batch: 1 << 50, Depth: 2})
	defer l.Close()
	require.Len(t, l.free, 3)
	for range 3 {
		b := <-l.free
		assert.Equal(t, s.PerRank()*ds.size, cap(b.x))
		assert.Equal(t, s.PerRank(), cap(b.y))
		l.free <- b
	}
	require.NoError(t, l.Start(t.Context(), 0))
	_, sizes := drain(t, l, ds, 0)
	assert.Equal(t, []int{25}, sizes)
}

func TestLoaderRestartMidEpoch(t *testing.T) {
	defer goleak.VerifyNone(t)
	ds := seqDataset{n: 100, size: 2}
	l, s := newTestLoader(t, ds, 0, 1, LoaderConfig{Batch: 10, Depth: 2})
	defer l.Close()
	require.NoError(t, l.Start(t.Context(), 0))
	old, err := l.Next(t.Context())
	require.NoError(t, err)
	oldIdx := append([]int(nil), old.Indices...)
	// Abandon epoch 0 while holding one of its batches.
	require.NoError(t, l.Start(t.Context(), 1))
	got, _ := drain(t, l, ds, 1)
	assert.Equal(t, s.Indices(1, nil), got)
	assert.Equal(t, oldIdx, old.Indices, "a held batch is untouched by the new epoch")
	assert.Equal(t, 0, old.Epoch)
	l.Release(old)
}

func TestLoaderStartContextCancel(t *testing.T) {
	defer goleak.VerifyNone(t)
	ds := seqDataset{n: 1000, size: 2}
	l, _ := newTestLoader(t, ds, 0, 1, LoaderConfig{Batch: 10, Depth: 2})
	defer l.Close()
	ctx, cancel := context.WithCancel(t.Context())
	require.NoError(t, l.Start(ctx, 0))
	b, err := l.Next(t.Context())
	require.NoError(t, err)
	l.Release(b)
	cancel()
	// At most the batches already queued, then the cause.
	got := 0
	for {
		b, err := l.Next(t.Context())
		if err != nil {
			require.ErrorIs(t, err, context.Canceled)
			break
		}
		got++
		l.Release(b)
		require.LessOrEqual(t, got, 3, "batches after cancel")
	}
	_, err = l.Next(t.Context())
	assert.ErrorIs(t, err, context.Canceled, "stays ended")
	// The loader can start again.
	require.NoError(t, l.Start(t.Context(), 1))
	b, err = l.Next(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, b.Epoch)
	l.Release(b)
}

func TestLoaderNextContextCancel(t *testing.T) {
	defer goleak.VerifyNone(t)
	ds := gateDataset{seqDataset: seqDataset{n: 100, size: 2}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	l, _ := newTestLoader(t, ds, 0, 1, LoaderConfig{Batch: 10, Depth: 2})
	require.NoError(t, l.Start(t.Context(), 0))
	<-ds.entered // the producer is stuck in Gather: Next must wait

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := l.Next(ctx)
	assert.ErrorIs(t, err, context.Canceled, "already cancelled")

	ctx, cancel = context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := l.Next(ctx)
		errc <- err
	}()
	cancel()
	assert.ErrorIs(t, <-errc, context.Canceled, "cancelled while waiting")

	close(ds.release)
	require.NoError(t, l.Close())
}

func TestLoaderCloseWhileProducing(t *testing.T) {
	defer goleak.VerifyNone(t)
	ds := gateDataset{seqDataset: seqDataset{n: 100, size: 2}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	l, _ := newTestLoader(t, ds, 0, 1, LoaderConfig{Batch: 10, Depth: 2})
	require.NoError(t, l.Start(t.Context(), 0))
	<-ds.entered
	errc := make(chan error, 1)
	go func() { errc <- l.Close() }()
	close(ds.release) // Close waits for Gather to return
	require.NoError(t, <-errc)
	require.NoError(t, l.Close(), "idempotent")
	_, err := l.Next(t.Context())
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, l.Start(t.Context(), 1), ErrClosed)
}

func TestLoaderCloseWithHeldBatch(t *testing.T) {
	defer goleak.VerifyNone(t)
	ds := seqDataset{n: 100, size: 2}
	l, _ := newTestLoader(t, ds, 0, 1, LoaderConfig{Batch: 10, Depth: 2})
	require.NoError(t, l.Start(t.Context(), 0))
	b, err := l.Next(t.Context())
	require.NoError(t, err)
	require.NoError(t, l.Close())
	assert.Equal(t, float32(b.Indices[0]), b.X[0], "a held batch stays valid after Close")
	l.Release(b)
}

func TestLoaderMisuse(t *testing.T) {
	defer goleak.VerifyNone(t)
	ds := seqDataset{n: 100, size: 2}
	l, _ := newTestLoader(t, ds, 0, 1, LoaderConfig{Batch: 10, Depth: 1}) // 2 buffers
	defer l.Close()
	_, err := l.Next(t.Context())
	assert.ErrorIs(t, err, ErrNotStarted)

	require.NoError(t, l.Start(t.Context(), 0))
	b1, err := l.Next(t.Context())
	require.NoError(t, err)
	b2, err := l.Next(t.Context())
	require.NoError(t, err)
	_, err = l.Next(t.Context())
	assert.ErrorIs(t, err, ErrAllHeld)

	const msg = "data: Loader.Release: batch not held from this Loader (released twice?)"
	other, _ := newTestLoader(t, ds, 0, 1, LoaderConfig{Batch: 10, Depth: 1})
	defer other.Close()
	assert.PanicsWithValue(t, msg, func() { other.Release(b2) }, "another loader's")
	assert.PanicsWithValue(t, msg, func() { l.Release(nil) })
	for b := range Batches(ds, 10) {
		assert.PanicsWithValue(t, msg, func() { l.Release(b) }, "a Batches batch")
		break
	}
	l.Release(b1)
	assert.PanicsWithValue(t, msg, func() { l.Release(b1) }, "twice")
	b3, err := l.Next(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 2, b3.Index)
	l.Release(b2)
	l.Release(b3)
}

func TestNewLoaderValidation(t *testing.T) {
	t.Parallel()
	ds := seqDataset{n: 100, size: 2}
	s, err := NewSampler(100, 0, 1, 0, false)
	require.NoError(t, err)
	s50, err := NewSampler(50, 0, 1, 0, false)
	require.NoError(t, err)
	tests := []struct {
		name string
		ds   Dataset
		s    *Sampler
		cfg  LoaderConfig
		has  string
	}{
		{name: "zero batch", ds: ds, s: s, cfg: LoaderConfig{Batch: 0, Depth: 2}, has: "batch 0: want ≥ 1"},
		{name: "zero depth", ds: ds, s: s, cfg: LoaderConfig{Batch: 4, Depth: 0}, has: "depth 0: want ≥ 1"},
		{name: "sampler of another size", ds: ds, s: s50, cfg: DefaultLoaderConfig(), has: "sampler is over 50 samples but seq holds 100"},
		{name: "nil sampler", ds: ds, s: nil, cfg: DefaultLoaderConfig(), has: "want a non-nil Dataset and Sampler"},
		{name: "nil dataset", ds: nil, s: s, cfg: DefaultLoaderConfig(), has: "want a non-nil Dataset and Sampler"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := NewLoader(tt.cfg, tt.ds, tt.s)
			require.Error(t, err)
			assert.ErrorContains(t, err, tt.has)
			assert.Nil(t, l)
		})
	}
}

func TestLoaderNoAllocationsWhenWarm(t *testing.T) {
	defer goleak.VerifyNone(t)
	train, _, err := Synthetic(SyntheticConfig{Train: 4000, Test: 1, C: 1, H: 4, W: 4, Classes: 3, Seed: 1, Noise: 1})
	require.NoError(t, err)
	l, _ := newTestLoader(t, train, 0, 1, LoaderConfig{Batch: 8, Depth: 2}) // 500 steps
	defer l.Close()
	require.NoError(t, l.Start(t.Context(), 0))
	ctx := t.Context()
	var nextErr error
	allocs := testing.AllocsPerRun(300, func() {
		b, err := l.Next(ctx)
		if err != nil {
			nextErr = err
			return
		}
		l.Release(b)
	})
	require.NoError(t, nextErr)
	assert.Zero(t, allocs, "allocations per Next+Release")
}

func TestBatches(t *testing.T) {
	t.Parallel()
	ds := seqDataset{n: 23, size: 3}
	tests := []struct {
		batch int
		sizes []int
	}{
		{batch: 5, sizes: []int{5, 5, 5, 5, 3}},
		{batch: 23, sizes: []int{23}},
		{batch: 100, sizes: []int{23}},
		{batch: 1, sizes: []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.batch), func(t *testing.T) {
			t.Parallel()
			var sizes, seen []int
			k := 0
			for b := range Batches(ds, tt.batch) {
				assert.Equal(t, k, b.Index)
				k++
				sizes = append(sizes, b.Len())
				for i, v := range b.Indices {
					assert.Equal(t, float32(v), b.X[i*3+2])
					assert.Equal(t, int32(v%7), b.Y[i])
				}
				seen = append(seen, b.Indices...)
			}
			assert.Equal(t, tt.sizes, sizes)
			want := make([]int, 23)
			for i := range want {
				want[i] = i
			}
			assert.Equal(t, want, seen)
		})
	}
	n := 0
	for range Batches(ds, 5) {
		if n++; n == 2 {
			break
		}
	}
	assert.Equal(t, 2, n, "break stops the iteration")
	assert.PanicsWithValue(t, "data: Batches: batch 0, want ≥ 1", func() { Batches(ds, 0) })
}

func TestLoaderStartAtBeginsMidEpoch(t *testing.T) {
	defer goleak.VerifyNone(t)
	ds := seqDataset{n: 100, size: 2}
	l, s := newTestLoader(t, ds, 0, 1, LoaderConfig{Batch: 10, Depth: 2})
	defer l.Close()
	require.NoError(t, l.StartAt(t.Context(), 1, 7))
	var got []int
	for k := 7; ; k++ {
		b, err := l.Next(t.Context())
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		assert.Equal(t, k, b.Index)
		got = append(got, b.Indices...)
		l.Release(b)
	}
	assert.Equal(t, s.Indices(1, nil)[70:], got, "the batches 7 to 9 of epoch 1, as Start would give them")
	require.NoError(t, l.StartAt(t.Context(), 0, 10))
	_, err := l.Next(t.Context())
	assert.ErrorIs(t, err, io.EOF, "starting at the end gives no batch")
	assert.ErrorContains(t, l.StartAt(t.Context(), 0, 11), "want 0..10")
}
