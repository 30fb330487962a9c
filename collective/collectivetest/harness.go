package collectivetest

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
)

// NewGroupFunc returns n connected transports, ranks 0..n−1 in order.
type NewGroupFunc = func(t *testing.T, n int) []collective.Transport

// callTimeout bounds every collective of the suite, so that a bug fails
// the test instead of hanging it.
const callTimeout = 60 * time.Second

// group is one set of connected transports and their Communicators.
type group struct {
	t      *testing.T
	ts     []collective.Transport
	cs     []*collective.Communicator
	mu     sync.Mutex
	closed []bool
}

// newGroup builds a group of n ranks with cfg; its transports are closed
// (each exactly once) when the test ends.
func newGroup(t *testing.T, mk NewGroupFunc, n int, cfg collective.Config) *group {
	t.Helper()
	return newHostGroup(t, mk, n, nil, cfg)
}

// newHostGroup is newGroup with rank r on fake host hosts[r] (nil: the
// transports' own hosts), told to the Communicators by a
// collective.HostLocator around each transport.
func newHostGroup(t *testing.T, mk NewGroupFunc, n int, hosts []string, cfg collective.Config) *group {
	t.Helper()
	ts := mk(t, n)
	require.Len(t, ts, n, "newGroup(t, %d) returned %d transports", n, len(ts))
	if hosts != nil {
		require.Len(t, hosts, n, "one fake host per rank")
		for i := range ts {
			ts[i] = hostedTransport{Transport: ts[i], hosts: hosts}
		}
	}
	g := &group{t: t, ts: ts, cs: make([]*collective.Communicator, n), closed: make([]bool, n)}
	t.Cleanup(func() {
		for i := range ts {
			g.close(i)
		}
	})
	for i, tr := range ts {
		require.NotNil(t, tr, "transport %d", i)
		require.Equal(t, i, tr.Rank(), "transport %d: Rank()", i)
		require.Equal(t, n, tr.Size(), "transport %d: Size()", i)
		c, err := collective.New(tr, cfg)
		require.NoError(t, err)
		g.cs[i] = c
	}
	return g
}

// hostedTransport is a Transport on fake hosts: rank r on hosts[r].
type hostedTransport struct {
	collective.Transport
	hosts []string
}

var _ collective.HostLocator = hostedTransport{}

func (h hostedTransport) HostOf(rank int) string { return h.hosts[rank] }

// fakeHosts puts n ranks on hosts of the given sizes, in rank order
// (interleave: rank r on host r mod len(sizes), sizes all alike).
func fakeHosts(sizes []int, interleave bool) []string {
	var hosts []string
	for h, k := range sizes {
		for range k {
			hosts = append(hosts, fmt.Sprintf("host-%d", h))
		}
	}
	if interleave {
		for r := range hosts {
			hosts[r] = fmt.Sprintf("host-%d", r%len(sizes))
		}
	}
	return hosts
}

// close closes rank i's transport unless the suite already did; safe
// from any goroutine.
func (g *group) close(i int) {
	g.mu.Lock()
	done := g.closed[i]
	g.closed[i] = true
	g.mu.Unlock()
	if !done {
		if err := g.ts[i].Close(); err != nil {
			g.t.Errorf("rank %d: Close: %v", i, err)
		}
	}
}

// run calls f for every rank in ranks (all ranks if nil), each on its own
// goroutine with a ctx bounded by callTimeout, joins them, and returns
// the errors indexed by rank.
func (g *group) run(ranks []int, f func(ctx context.Context, rank int, c *collective.Communicator) error) []error {
	if ranks == nil {
		ranks = allRanks(len(g.cs))
	}
	ctx, cancel := context.WithTimeout(g.t.Context(), callTimeout)
	defer cancel()
	errs := make([]error, len(g.cs))
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() { errs[r] = f(ctx, r, g.cs[r]) })
	}
	wg.Wait()
	return errs
}

// runOK is run for all ranks, requiring every call to succeed.
func (g *group) runOK(f func(ctx context.Context, rank int, c *collective.Communicator) error) {
	g.t.Helper()
	for r, err := range g.run(nil, f) {
		require.NoError(g.t, err, "rank %d", r)
	}
}

func allRanks(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// cfg returns the default Config with the given segment size (0: the
// default) and compression.
func cfg(segBytes int, comp collective.Compression) collective.Config {
	c := collective.DefaultConfig()
	if segBytes > 0 {
		c.SegmentBytes = segBytes
	}
	c.Compression = comp
	return c
}

// randVecs returns n vectors of size floats uniform in [−1, 1), seeded.
func randVecs(seed uint64, n, size int) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, uint64(n)<<32|uint64(size)))
	v := make([][]float32, n)
	for r := range v {
		v[r] = make([]float32, size)
		for i := range v[r] {
			v[r][i] = 2*rng.Float32() - 1
		}
	}
	return v
}

func clone2(x [][]float32) [][]float32 {
	y := make([][]float32, len(x))
	for i := range x {
		y[i] = append([]float32(nil), x[i]...)
	}
	return y
}

// checkClose reports, once, the elements of got that differ from want by
// more than tol(i).
func checkClose(t *testing.T, what string, got []float32, want []float64, tol func(i int) float64) {
	t.Helper()
	require.Len(t, got, len(want), "%s: length", what)
	bad, first := 0, -1
	for i := range got {
		g, w := float64(got[i]), want[i]
		if math.IsNaN(w) && math.IsNaN(g) {
			continue
		}
		if !(math.Abs(g-w) <= tol(i)) { // NaN fails too
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d elements out of tolerance; first at [%d]: got %g, want %g ± %g",
			what, bad, len(got), first, got[first], want[first], tol(first))
	}
}

// bits returns the memory of x, to compare float32 slices bit for bit
// quickly (also under the race detector).
func bits(x []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}

// checkIdentical reports whether every rank's result is bit-identical to
// rank 0's.
func checkIdentical(t *testing.T, what string, results [][]float32) {
	t.Helper()
	for r := 1; r < len(results); r++ {
		require.Len(t, results[r], len(results[0]), "%s: rank %d length", what, r)
		if bytes.Equal(bits(results[r]), bits(results[0])) {
			continue
		}
		for i := range results[r] {
			if math.Float32bits(results[r][i]) != math.Float32bits(results[0][i]) {
				t.Errorf("%s: rank %d differs from rank 0 at [%d]: %g vs %g (ranks must agree bit for bit)",
					what, r, i, results[r][i], results[0][i])
				break
			}
		}
	}
}

// checkEqual reports the first element where got differs from want (bit
// for bit, NaN equal to NaN).
func checkEqual(t *testing.T, what string, got, want []float32) {
	t.Helper()
	require.Len(t, got, len(want), "%s: length", what)
	if bytes.Equal(bits(got), bits(want)) {
		return
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("%s: [%d] is %g, want %g", what, i, got[i], want[i])
			return
		}
	}
}

// unitRoundoff is the relative rounding error of one rounding to the
// wire format (and of float32 arithmetic for None), and subnormal the
// absolute error of rounding a tiny value to it.
func unitRoundoff(comp collective.Compression) (rel, abs float64) {
	switch comp {
	case collective.Float16:
		return 0x1p-11, 0x1p-25
	case collective.BFloat16:
		return 0x1p-8, 0x1p-134
	default:
		return 0x1p-24, 0x1p-150
	}
}

func name(format string, args ...any) string { return fmt.Sprintf(format, args...) }
