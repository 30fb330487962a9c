package collectivetest

import (
	"context"
	"math"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/shoalml/shoal/collective"
)

// bigSize is a prime near 10⁶: blocks never divide evenly and each block
// spans several default (1 MiB) segments for small N.
const bigSize = 999983

// maxRanks is the largest group the suite builds.
const maxRanks = 8

// bigN are the group sizes that also run bigSize.
var bigN = []int{2, 3, 4, 8}

// Conformance runs the conformance suite against the transports that
// newGroup makes. newGroup(t, n) must return n connected, fresh
// transports, ranks 0..n−1 in order; it may register t.Cleanup for its
// own resources (listeners, servers). The suite closes every transport it
// gets, exactly once, when each subtest ends. It must not run in parallel
// with other tests of the package: it checks with goleak that no
// goroutine it (or the transports) started outlives it.
//
// What it checks, for N = 1..8 unless said:
//   - Transport: Rank and Size; raw Send/Recv between every ordered pair
//     at once, with mixed message sizes (1 B to ~100 KiB) read back split
//     and merged differently, arriving intact and in order; a Recv from a
//     silent peer returns ctx's error at the deadline or on cancel; after
//     a peer's Close, Recv from it and (within 16 MiB of sends) Send to it
//     fail with a *PeerError naming it; a rank's own Close fails its
//     pending Recv.
//   - Allreduce (sum, average, min, max), ReduceScatter (sum, average,
//     max), Allgather (even, uneven, zero and single-rank counts, in
//     place), Broadcast from every root, Alltoall with uneven and zero
//     splits, Barrier (no rank leaves before all entered),
//     AllreduceAdasum (random vectors against a float64 reference of the
//     same tree; orthogonal, equal and zero vectors): sizes 0, 1, N−1,
//     N+1, 1009 with 7-float segments, and the prime 999983 (default
//     1 MiB segments) for N ∈ {2,3,4,8} (sum only, other ops for N = 2
//     and 8, to bound the time under -race). Inputs are seeded random
//     floats in [−1, 1); min, max and data movement must be exact, sums
//     within (N+2)·2⁻²⁴·Σ|x|, and every rank's result bit-identical.
//   - Compression (Float16, BFloat16): Allreduce, ReduceScatter and
//     Allgather, sizes up to 1009, within the format's precision, every
//     rank bit-identical.
//   - Allreduce runs all of the above for Config.Algorithm Ring and
//     Tree, and for Auto at N ∈ {1,2,3,8}; Ring and Tree also at N =
//     9..16 (sizes N+1 and 1009, sum and average, uncompressed: every
//     remainder of recursive doubling's fold). Hierarchical runs the
//     same cases on fake hosts (a collective.HostLocator around each
//     transport): 1×1, one host of 3, 3 and 2 hosts of one rank, 2×2,
//     2×4, 4×2, 4×4, 2×3 with ranks dealt round-robin to the hosts, and
//     hosts of different sizes (2+1, 3+3+2: the flat ring); Auto also on
//     2×2 and 2×4. Each algorithm meets DeadPeer and SilentPeer,
//     Hierarchical on one host and on hosts of two ranks (N = 4 and 6
//     too).
//   - DeadPeer (N = 2, 3, 5, and 4 and 6 for Hierarchical; the dead
//     rank first, middle, last): one rank
//     closes its transport, then the others call a collective. For Barrier
//     and Alltoall every other rank fails with a *PeerError naming it; for
//     the ring-based collectives (Allreduce, ReduceScatter, Allgather,
//     Broadcast, AllreduceAdasum) every other rank, closing its own
//     transport on failure as a worker does, fails with a *PeerError and
//     at least one names it. No rank may fail by its deadline instead.
//     Broadcast's ranks upstream of the dead one (they only send) may
//     succeed.
//   - SilentPeer (N as DeadPeer's): one rank never calls; every other rank's
//     collective returns an error wrapping context.DeadlineExceeded
//     within 10 s of a 50 ms deadline (Broadcast's upstream ranks may
//     succeed).
//
// The contract a transport must meet to pass, beyond the Transport
// documentation: each direction is a byte stream (Recv may cut or merge
// Sends); Send and Recv return ctx's error (possibly wrapped) once ctx
// ends, also while blocked; after a peer closes (or dies), Recv from it
// fails once what it sent before is drained, and Send to it fails within
// a few sends, both with a *PeerError naming it, promptly rather than at
// the deadline; a rank's own Close makes its pending calls fail; Close
// returns nil and, once every rank's transport is closed, no goroutine of
// the transport remains.
func Conformance(t *testing.T, newGroup NewGroupFunc) {
	ignore := goleak.IgnoreCurrent()
	defer goleak.VerifyNone(t, ignore)

	t.Run("Transport", func(t *testing.T) { testTransport(t, newGroup) })
	t.Run("Allreduce", func(t *testing.T) { testAllreduce(t, newGroup, collective.None) })
	t.Run("ReduceScatter", func(t *testing.T) { testReduceScatter(t, newGroup, collective.None) })
	t.Run("Allgather", func(t *testing.T) { testAllgather(t, newGroup, collective.None) })
	t.Run("Broadcast", func(t *testing.T) { testBroadcast(t, newGroup) })
	t.Run("Alltoall", func(t *testing.T) { testAlltoall(t, newGroup) })
	t.Run("Barrier", func(t *testing.T) { testBarrier(t, newGroup) })
	t.Run("Adasum", func(t *testing.T) { testAdasum(t, newGroup) })
	for _, comp := range []collective.Compression{collective.Float16, collective.BFloat16} {
		t.Run("Compression="+comp.String(), func(t *testing.T) {
			t.Run("Allreduce", func(t *testing.T) { testAllreduce(t, newGroup, comp) })
			t.Run("ReduceScatter", func(t *testing.T) { testReduceScatter(t, newGroup, comp) })
			t.Run("Allgather", func(t *testing.T) { testAllgather(t, newGroup, comp) })
		})
	}
	t.Run("DeadPeer", func(t *testing.T) { testDeadPeer(t, newGroup) })
	t.Run("SilentPeer", func(t *testing.T) { testSilentPeer(t, newGroup) })
}

// sizeCase is a vector length and the segment size to cut it with.
type sizeCase struct {
	size, seg int
}

// sizeCases returns the lengths every data test runs for n ranks.
func sizeCases(n int, comp collective.Compression) []sizeCase {
	var cs []sizeCase
	for _, s := range []int{0, 1, n - 1, n + 1} {
		if !slices.Contains(cs, sizeCase{s, 0}) {
			cs = append(cs, sizeCase{s, 0})
		}
	}
	cs = append(cs, sizeCase{1009, 28})
	if slices.Contains(bigN, n) && comp == collective.None {
		cs = append(cs, sizeCase{bigSize, 0})
	}
	return cs
}

var ops = []collective.Op{collective.Sum, collective.Average, collective.Min, collective.Max}

// reference returns op over the ranks' vectors in float64, and for each
// element the sum of the magnitudes (the scale of a summation's error).
func reference(x [][]float32, op collective.Op) (want, mag []float64) {
	n := len(x[0])
	want, mag = make([]float64, n), make([]float64, n)
	for i := range n {
		acc := float64(x[0][i])
		for r := range x {
			v := float64(x[r][i])
			mag[i] += math.Abs(v)
			if r == 0 {
				continue
			}
			switch op {
			case collective.Min:
				acc = min(acc, v)
			case collective.Max:
				acc = max(acc, v)
			default:
				acc += v
			}
		}
		if op == collective.Average {
			acc /= float64(len(x))
		}
		want[i] = acc
	}
	return want, mag
}

// tolerance is the allowed error of op's result at one element whose
// reference is want and whose inputs' magnitudes sum to mag, for n ranks.
func tolerance(comp collective.Compression, op collective.Op, n int, want, mag float64) float64 {
	rel, abs := unitRoundoff(comp)
	switch op {
	case collective.Min, collective.Max:
		if comp == collective.None {
			return 0
		}
		return rel*math.Abs(want) + abs
	case collective.Average:
		return (float64(n+2)*rel*mag)/float64(n) + 0x1p-23*math.Abs(want) + float64(n)*abs
	default:
		return float64(n+2)*rel*mag + float64(n)*abs
	}
}

// maxAllreduceRanks is the largest group Allreduce runs in: up to 16,
// so that recursive doubling folds every remainder from 1 to 7 ranks.
// Past maxRanks only sizes N+1 and 1009, sum and average, uncompressed,
// and only Ring and Tree: groups of 9 to 16 ranks are slow to build over
// TCP, and what they add is the fold's arithmetic.
const maxAllreduceRanks = 16

// algorithms are Allreduce's, each run through the same cases; Auto
// (which runs one of the others) only for autoN, and Hierarchical on the
// fake hosts of hostLayouts.
var (
	algorithms = []collective.Algorithm{collective.Ring, collective.Tree, collective.Auto, collective.Hierarchical}
	autoN      = []int{1, 2, 3, 8}
)

// layout is a named placement of ranks on fake hosts: hosts of sizes in
// rank order, or with interleave rank r on host r mod len(sizes).
type layout struct {
	name       string
	sizes      []int
	interleave bool
	big        bool // also run bigSize
}

func (l layout) n() int {
	n := 0
	for _, k := range l.sizes {
		n += k
	}
	return n
}

// hostLayouts are Hierarchical's (and, for those named in autoLayouts,
// Auto's) fake hosts: one host, one rank per host, square and oblong
// grids, hosts that are not runs of ranks, and hosts of different sizes
// (which run the flat ring).
var hostLayouts = []layout{
	{name: "1x1", sizes: []int{1}},
	{name: "1x3", sizes: []int{3}, big: true},
	{name: "3x1", sizes: []int{1, 1, 1}},
	{name: "2x1", sizes: []int{1, 1}, big: true},
	{name: "2x2", sizes: []int{2, 2}, big: true},
	{name: "2+1", sizes: []int{2, 1}},
	{name: "2x3-interleaved", sizes: []int{3, 3}, interleave: true},
	{name: "2x4", sizes: []int{4, 4}, big: true},
	{name: "4x2", sizes: []int{2, 2, 2, 2}},
	{name: "3+3+2", sizes: []int{3, 3, 2}},
	{name: "4x4", sizes: []int{4, 4, 4, 4}},
}

// autoLayouts are the hostLayouts Auto also runs on.
var autoLayouts = []string{"2x2", "2x4"}

func testAllreduce(t *testing.T, mk NewGroupFunc, comp collective.Compression) {
	for _, alg := range algorithms {
		t.Run("alg="+alg.String(), func(t *testing.T) { testAllreduceWith(t, mk, comp, alg) })
	}
	for _, l := range hostLayouts {
		if !slices.Contains(autoLayouts, l.name) {
			continue
		}
		t.Run("alg=auto/hosts="+l.name, func(t *testing.T) { testAllreduceOn(t, mk, comp, collective.Auto, l) })
	}
}

// allreduceCase says whether testAllreduceWith runs op at sc on n ranks.
func allreduceCase(n int, sc sizeCase, op collective.Op, comp collective.Compression, alg collective.Algorithm) bool {
	switch {
	case alg == collective.Auto && !slices.Contains(autoN, n):
		return false
	case n > maxRanks:
		return alg != collective.Auto && comp == collective.None && (sc.size == n+1 || sc.size == 1009) && (op == collective.Sum || op == collective.Average)
	case sc.size == bigSize && n != 2 && n != 8 && op != collective.Sum:
		return false // the other ops at the big size only for the extreme N, to save time
	}
	return true
}

func testAllreduceWith(t *testing.T, mk NewGroupFunc, comp collective.Compression, alg collective.Algorithm) {
	if alg == collective.Hierarchical {
		for _, l := range hostLayouts {
			t.Run("hosts="+l.name, func(t *testing.T) { testAllreduceOn(t, mk, comp, alg, l) })
		}
		return
	}
	for n := 1; n <= maxAllreduceRanks; n++ {
		testAllreduceN(t, mk, comp, alg, alg, n, nil, slices.Contains(bigN, n))
	}
}

// testAllreduceOn runs the Allreduce cases on l's fake hosts, chosen as
// the ring's for the same N.
func testAllreduceOn(t *testing.T, mk NewGroupFunc, comp collective.Compression, alg collective.Algorithm, l layout) {
	testAllreduceN(t, mk, comp, alg, collective.Ring, l.n(), fakeHosts(l.sizes, l.interleave), l.big)
}

// testAllreduceN runs Allreduce with Config.Algorithm alg on n ranks (on
// fake hosts, when not nil) in the cases allreduceCase gives caseAlg,
// bigSize only when big.
func testAllreduceN(t *testing.T, mk NewGroupFunc, comp collective.Compression, alg, caseAlg collective.Algorithm, n int, hosts []string, big bool) {
	for _, sc := range sizeCases(n, comp) {
		if sc.size == bigSize && !big {
			continue
		}
		in := randVecs(1, n, sc.size)
		for _, op := range ops {
			if !allreduceCase(n, sc, op, comp, caseAlg) {
				continue
			}
			t.Run(name("N=%d/size=%d/seg=%d/%v", n, sc.size, sc.seg, op), func(t *testing.T) {
				c := cfg(sc.seg, comp)
				c.Algorithm = alg
				g := newHostGroup(t, mk, n, hosts, c)
				bufs := clone2(in)
				g.runOK(func(ctx context.Context, r int, c *collective.Communicator) error {
					return c.Allreduce(ctx, bufs[r], op)
				})
				want, mag := reference(in, op)
				checkIdentical(t, "allreduce", bufs)
				if n == 1 {
					checkEqual(t, "allreduce, one rank", bufs[0], in[0])
					return
				}
				checkClose(t, "allreduce", bufs[0], want, func(i int) float64 {
					return tolerance(comp, op, n, want[i], mag[i])
				})
			})
		}
	}
}

func testReduceScatter(t *testing.T, mk NewGroupFunc, comp collective.Compression) {
	for n := 1; n <= maxRanks; n++ {
		for _, sc := range sizeCases(n, comp) {
			in := randVecs(2, n, sc.size)
			for _, op := range []collective.Op{collective.Sum, collective.Average, collective.Max} {
				if sc.size == bigSize && op != collective.Sum {
					continue
				}
				t.Run(name("N=%d/size=%d/seg=%d/%v", n, sc.size, sc.seg, op), func(t *testing.T) {
					g := newGroup(t, mk, n, cfg(sc.seg, comp))
					inputs := clone2(in)
					blocks := collective.Blocks(sc.size, n)
					outs := make([][]float32, n)
					for r := range outs {
						outs[r] = make([]float32, blocks[r])
					}
					g.runOK(func(ctx context.Context, r int, c *collective.Communicator) error {
						return c.ReduceScatter(ctx, inputs[r], outs[r], op)
					})
					want, mag := reference(in, op)
					off := 0
					for r := range n {
						checkEqual(t, name("rank %d: in must not change", r), inputs[r], in[r])
						w, m := want[off:off+blocks[r]], mag[off:off+blocks[r]]
						checkClose(t, name("reducescatter, rank %d", r), outs[r], w, func(i int) float64 {
							if n == 1 {
								return 0
							}
							return tolerance(comp, op, n, w[i], m[i])
						})
						off += blocks[r]
					}
				})
			}
		}
	}
}

// countCase is a named Allgather counts pattern.
type countCase struct {
	name    string
	counts  []int
	seg     int
	inPlace bool
}

func countCases(n int, comp collective.Compression) []countCase {
	fill := func(f func(r int) int) []int {
		c := make([]int, n)
		for r := range c {
			c[r] = f(r)
		}
		return c
	}
	cs := []countCase{
		{name: "even", counts: fill(func(int) int { return 3 })},
		{name: "uneven", counts: fill(func(r int) int { return (7*r + 1) % 4 })},
		{name: "zeros", counts: fill(func(int) int { return 0 })},
		{name: "last-only", counts: fill(func(r int) int {
			if r == n-1 {
				return 5
			}
			return 0
		})},
		{name: "uneven-in-place", counts: fill(func(r int) int { return (7*r + 1) % 4 }), inPlace: true},
		{name: "segmented", counts: fill(func(r int) int { return 100 + 37*r }), seg: 28},
	}
	if slices.Contains(bigN, n) && comp == collective.None {
		cs = append(cs, countCase{name: "big", counts: collective.Blocks(bigSize, n)})
	}
	return cs
}

func testAllgather(t *testing.T, mk NewGroupFunc, comp collective.Compression) {
	for n := 1; n <= maxRanks; n++ {
		for _, cc := range countCases(n, comp) {
			t.Run(name("N=%d/%s", n, cc.name), func(t *testing.T) {
				g := newGroup(t, mk, n, cfg(cc.seg, comp))
				total, offs := 0, make([]int, n+1)
				for r, k := range cc.counts {
					total += k
					offs[r+1] = total
				}
				var in [][]float32
				for r, k := range cc.counts {
					in = append(in, randVecs(uint64(3+r), 1, k)[0])
				}
				inputs := clone2(in)
				outs := make([][]float32, n)
				for r := range outs {
					outs[r] = make([]float32, total)
					for i := range outs[r] {
						outs[r][i] = float32(math.NaN()) // must be overwritten
					}
					if cc.inPlace {
						copy(outs[r][offs[r]:], in[r])
						inputs[r] = outs[r][offs[r]:offs[r+1]]
					}
				}
				g.runOK(func(ctx context.Context, r int, c *collective.Communicator) error {
					return c.Allgather(ctx, inputs[r], outs[r], cc.counts)
				})
				var want []float64
				for _, x := range in {
					for _, v := range x {
						want = append(want, float64(v))
					}
				}
				checkIdentical(t, "allgather", outs)
				rel, abs := unitRoundoff(comp)
				checkClose(t, "allgather", outs[0], want, func(i int) float64 {
					if comp == collective.None || n == 1 {
						return 0
					}
					return rel*math.Abs(want[i]) + abs
				})
				if !cc.inPlace {
					for r := range n {
						checkEqual(t, name("rank %d: in must not change", r), inputs[r], in[r])
					}
				}
			})
		}
	}
}

func testBroadcast(t *testing.T, mk NewGroupFunc) {
	for n := 1; n <= maxRanks; n++ {
		for _, sc := range sizeCases(n, collective.None) {
			if sc.size == bigSize && n != 2 && n != 8 {
				continue
			}
			for root := range n {
				if sc.size == bigSize && root != 0 && root != n-1 {
					continue
				}
				t.Run(name("N=%d/size=%d/seg=%d/root=%d", n, sc.size, sc.seg, root), func(t *testing.T) {
					g := newGroup(t, mk, n, cfg(sc.seg, collective.None))
					src := randVecs(4, 1, sc.size)[0]
					bufs := make([][]float32, n)
					for r := range bufs {
						bufs[r] = make([]float32, sc.size)
						if r == root {
							copy(bufs[r], src)
							continue
						}
						for i := range bufs[r] {
							bufs[r][i] = float32(math.NaN())
						}
					}
					g.runOK(func(ctx context.Context, r int, c *collective.Communicator) error {
						return c.Broadcast(ctx, bufs[r], root)
					})
					for r := range n {
						checkEqual(t, name("broadcast, rank %d", r), bufs[r], src)
					}
				})
			}
		}
	}
}

func testAlltoall(t *testing.T, mk NewGroupFunc) {
	type split struct {
		name  string
		count func(from, to int) int
		seg   int
	}
	splits := []split{
		{name: "uneven", count: func(from, to int) int { return (from + 2*to + 1) % 4 }},
		{name: "zeros", count: func(int, int) int { return 0 }},
		{name: "segmented", count: func(from, to int) int { return 50 * ((from + to) % 3) }, seg: 28},
	}
	for n := 1; n <= maxRanks; n++ {
		for _, sp := range splits {
			t.Run(name("N=%d/%s", n, sp.name), func(t *testing.T) {
				g := newGroup(t, mk, n, cfg(sp.seg, collective.None))
				send := make([][]int, n) // send[from][to]
				recv := make([][]int, n) // recv[to][from]
				for r := range n {
					send[r], recv[r] = make([]int, n), make([]int, n)
				}
				for from := range n {
					for to := range n {
						send[from][to] = sp.count(from, to)
						recv[to][from] = send[from][to]
					}
				}
				ins, outs := make([][]float32, n), make([][]float32, n)
				for r := range n {
					var sIn, sOut int
					for j := range n {
						sIn += send[r][j]
						sOut += recv[r][j]
					}
					ins[r] = randVecs(uint64(5+r), 1, sIn)[0]
					outs[r] = make([]float32, sOut)
				}
				g.runOK(func(ctx context.Context, r int, c *collective.Communicator) error {
					return c.Alltoall(ctx, ins[r], send[r], outs[r], recv[r])
				})
				// Rank r's out is, for each from in order, from's part for r.
				for r := range n {
					var want []float32
					for from := range n {
						off := 0
						for j := range r {
							off += send[from][j]
						}
						want = append(want, ins[from][off:off+send[from][r]]...)
					}
					if want == nil {
						want = []float32{}
					}
					checkEqual(t, name("alltoall, rank %d", r), outs[r], want)
				}
			})
		}
	}
}

func testBarrier(t *testing.T, mk NewGroupFunc) {
	const rounds = 5
	for n := 1; n <= maxRanks; n++ {
		t.Run(name("N=%d", n), func(t *testing.T) {
			g := newGroup(t, mk, n, cfg(0, collective.None))
			var entered [rounds]atomic.Int32
			var early atomic.Int32
			g.runOK(func(ctx context.Context, r int, c *collective.Communicator) error {
				for round := range rounds {
					entered[round].Add(1)
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					if entered[round].Load() != int32(n) {
						early.Add(1)
					}
				}
				return nil
			})
			assert.Zero(t, early.Load(), "a rank left a barrier before every rank had entered it")
		})
	}
}

// adasumRef is AdaSum over the ranks' vectors in float64, in the tree
// order of Communicator.AllreduceAdasum.
func adasumRef(x [][]float32) []float64 {
	v := make([][]float64, len(x))
	for r := range x {
		v[r] = make([]float64, len(x[r]))
		for i, f := range x[r] {
			v[r][i] = float64(f)
		}
	}
	for d := 1; d < len(v); d *= 2 {
		for r := 0; r+d < len(v); r += 2 * d {
			a, b := v[r], v[r+d]
			var dot, na, nb float64
			for i := range a {
				dot += a[i] * b[i]
				na += a[i] * a[i]
				nb += b[i] * b[i]
			}
			ca, cb := 1.0, 1.0
			if na > 0 {
				ca = 1 - dot/(2*na)
			}
			if nb > 0 {
				cb = 1 - dot/(2*nb)
			}
			for i := range a {
				a[i] = ca*a[i] + cb*b[i]
			}
		}
	}
	return v[0]
}

func testAdasum(t *testing.T, mk NewGroupFunc) {
	type adasumCase struct {
		name  string
		n     int
		in    [][]float32
		exact bool // the result must equal want exactly
		want  []float32
	}
	var cases []adasumCase
	for n := 1; n <= maxRanks; n++ {
		for _, size := range []int{0, 1, n + 1, 1000} {
			cases = append(cases, adasumCase{name: name("random/N=%d/size=%d", n, size), n: n, in: randVecs(6, n, size)})
		}
	}
	// Orthogonal vectors add; equal vectors give the vector; 0 is neutral.
	even, odd := make([]float32, 64), make([]float32, 64)
	for i := range even {
		if i%2 == 0 {
			even[i] = float32(i + 1)
		} else {
			odd[i] = -float32(i)
		}
	}
	sum := make([]float32, 64)
	for i := range sum {
		sum[i] = even[i] + odd[i]
	}
	gv := randVecs(7, 1, 100)[0]
	cases = append(cases,
		adasumCase{name: "orthogonal", n: 2, in: [][]float32{even, odd}, exact: true, want: sum},
		adasumCase{name: "equal/N=2", n: 2, in: [][]float32{gv, gv}, want: gv},
		adasumCase{name: "equal/N=5", n: 5, in: [][]float32{gv, gv, gv, gv, gv}, want: gv},
		adasumCase{name: "zero-and-g", n: 2, in: [][]float32{make([]float32, 100), gv}, exact: true, want: gv},
		adasumCase{name: "g-and-zero", n: 2, in: [][]float32{gv, make([]float32, 100)}, exact: true, want: gv},
		adasumCase{name: "zeros", n: 3, in: [][]float32{make([]float32, 9), make([]float32, 9), make([]float32, 9)}, exact: true, want: make([]float32, 9)},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroup(t, mk, tc.n, cfg(0, collective.None))
			bufs := clone2(tc.in)
			g.runOK(func(ctx context.Context, r int, c *collective.Communicator) error {
				return c.AllreduceAdasum(ctx, bufs[r])
			})
			checkIdentical(t, "adasum", bufs)
			if tc.exact {
				checkEqual(t, "adasum", bufs[0], tc.want)
				return
			}
			var want []float64
			if tc.want != nil {
				for _, v := range tc.want {
					want = append(want, float64(v))
				}
			} else {
				want = adasumRef(tc.in)
			}
			// Each tree level rounds to float32 and perturbs the
			// coefficients by about as much; errors scale with the
			// largest input (≤ 1 here) and the number of levels.
			tol := 16 * float64(tc.n) * 0x1p-24
			checkClose(t, "adasum", bufs[0], want, func(int) float64 { return tol })
		})
	}
}
