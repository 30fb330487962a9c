package collectivetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/shoalml/shoal/collective"
)

// silentDeadline is the deadline of the calls that wait on a silent peer.
const silentDeadline = 50 * time.Millisecond

// failKind is one collective as called by the failure tests.
type failKind struct {
	name string
	// direct: every rank exchanges data with every other, so each live
	// rank sees a dead one itself.
	direct bool
	// root is Broadcast's root, else −1. Ranks on the chain from the
	// root up to the failed rank only send, so they may finish.
	root int
	call func(ctx context.Context, c *collective.Communicator) error
	// alg is the Communicators' Config.Algorithm.
	alg collective.Algorithm
	// hosts, when set, puts the n ranks on fake hosts.
	hosts func(n int) []string
}

// config is the Communicators' Config for k.
func (k failKind) config() collective.Config {
	c := cfg(0, collective.None)
	c.Algorithm = k.alg
	return c
}

// mayFinish reports whether rank r may complete k although rank failed
// is dead or silent: only Broadcast's ranks upstream of it may.
func (k failKind) mayFinish(r, failed, n int) bool {
	if k.root < 0 {
		return false
	}
	pos := func(x int) int { return ((x-k.root)%n + n) % n }
	return pos(r) < pos(failed)
}

func failKinds(n int) []failKind {
	const size = 1000
	counts := make([]int, n)
	for i := range counts {
		counts[i] = 2
	}
	return []failKind{
		{name: "Barrier", direct: true, root: -1, call: func(ctx context.Context, c *collective.Communicator) error {
			return c.Barrier(ctx)
		}},
		{name: "Alltoall", direct: true, root: -1, call: func(ctx context.Context, c *collective.Communicator) error {
			return c.Alltoall(ctx, make([]float32, 2*n), counts, make([]float32, 2*n), counts)
		}},
		{name: "Allreduce", root: -1, call: func(ctx context.Context, c *collective.Communicator) error {
			return c.Allreduce(ctx, make([]float32, size), collective.Sum)
		}},
		{name: "Allreduce/tree", root: -1, alg: collective.Tree, call: func(ctx context.Context, c *collective.Communicator) error {
			return c.Allreduce(ctx, make([]float32, size), collective.Sum)
		}},
		{name: "Allreduce/auto", root: -1, alg: collective.Auto, call: func(ctx context.Context, c *collective.Communicator) error {
			return c.Allreduce(ctx, make([]float32, size), collective.Sum)
		}},
		{name: "Allreduce/hierarchical", root: -1, alg: collective.Hierarchical, call: func(ctx context.Context, c *collective.Communicator) error {
			return c.Allreduce(ctx, make([]float32, size), collective.Sum)
		}},
		{name: "Allreduce/hierarchical/2-a-host", root: -1, alg: collective.Hierarchical, hosts: twoAHost, call: func(ctx context.Context, c *collective.Communicator) error {
			return c.Allreduce(ctx, make([]float32, size), collective.Average)
		}},
		{name: "ReduceScatter", root: -1, call: func(ctx context.Context, c *collective.Communicator) error {
			return c.ReduceScatter(ctx, make([]float32, size), make([]float32, collective.Blocks(size, n)[c.Rank()]), collective.Average)
		}},
		{name: "Allgather", root: -1, call: func(ctx context.Context, c *collective.Communicator) error {
			return c.Allgather(ctx, make([]float32, 2), make([]float32, 2*n), counts)
		}},
		{name: "Broadcast/root=0", root: 0, call: func(ctx context.Context, c *collective.Communicator) error {
			return c.Broadcast(ctx, make([]float32, size), 0)
		}},
		{name: "Broadcast/root=last", root: n - 1, call: func(ctx context.Context, c *collective.Communicator) error {
			return c.Broadcast(ctx, make([]float32, size), n-1)
		}},
		{name: "Adasum", root: -1, call: func(ctx context.Context, c *collective.Communicator) error {
			return c.AllreduceAdasum(ctx, make([]float32, size))
		}},
	}
}

// twoAHost puts ranks 2h and 2h+1 on fake host h (with odd n the last
// host has one rank: hosts of different sizes).
func twoAHost(n int) []string {
	sizes := make([]int, 0, (n+1)/2)
	for r := 0; r < n; r += 2 {
		sizes = append(sizes, min(2, n-r))
	}
	return fakeHosts(sizes, false)
}

// failN are the group sizes of the failure tests: every kind at 2, 3 and
// 5, and the hierarchical ones also at 4 and 6 (two and three hosts of
// two ranks).
var failN = []int{2, 3, 4, 5, 6}

// failKindsAt are the kinds the failure tests run on n ranks.
func failKindsAt(n int) []failKind {
	ks := failKinds(n)
	if n == 4 || n == 6 {
		ks = slices.DeleteFunc(ks, func(k failKind) bool { return k.alg != collective.Hierarchical })
	}
	return ks
}

// group makes k's group of n ranks.
func (k failKind) group(t *testing.T, mk NewGroupFunc, n int) *group {
	var hosts []string
	if k.hosts != nil {
		hosts = k.hosts(n)
	}
	return newHostGroup(t, mk, n, hosts, k.config())
}

// failRanks are the ranks the failure tests take down in a group of n.
func failRanks(n int) []int {
	r := []int{0}
	for _, x := range []int{n / 2, n - 1} {
		if !slices.Contains(r, x) {
			r = append(r, x)
		}
	}
	return r
}

func without(ranks []int, x int) []int {
	return slices.DeleteFunc(slices.Clone(ranks), func(r int) bool { return r == x })
}

// testDeadPeer closes one rank's transport, then runs a collective on the
// others. Each must fail with a *PeerError well before its deadline
// (except Broadcast's ranks upstream of the dead one, which may finish). For
// Barrier and Alltoall each must name the dead rank. For the ring-based
// collectives only the dead rank's neighbours can see it; the others
// learn of the failure when a neighbour, having failed, closes its own
// transport as a worker does, so each live rank closes on failure here,
// every error must be a *PeerError and at least one must name the dead
// rank.
func testDeadPeer(t *testing.T, mk NewGroupFunc) {
	for _, n := range failN {
		for _, dead := range failRanks(n) {
			for _, k := range failKindsAt(n) {
				t.Run(name("N=%d/dead=%d/%s", n, dead, k.name), func(t *testing.T) {
					g := k.group(t, mk, n)
					g.close(dead)
					live := without(allRanks(n), dead)
					errs := g.run(live, func(ctx context.Context, r int, c *collective.Communicator) error {
						err := k.call(ctx, c)
						if err != nil && !k.direct {
							g.close(r)
						}
						return err
					})
					named, mustFail := 0, 0
					for _, r := range live {
						err := errs[r]
						if k.mayFinish(r, dead, n) && err == nil {
							continue
						}
						if !k.mayFinish(r, dead, n) {
							mustFail++
						}
						if !assert.Error(t, err, "rank %d: a collective with a dead peer succeeded", r) {
							continue
						}
						assert.False(t, errors.Is(err, context.DeadlineExceeded), "rank %d failed only at its deadline: %v", r, err)
						assert.ErrorIs(t, err, collective.ErrPeer, "rank %d", r)
						var pe *collective.PeerError
						if !assert.ErrorAs(t, err, &pe, "rank %d: want a *collective.PeerError", r) {
							continue
						}
						if pe.Rank == dead {
							named++
						} else if k.direct {
							t.Errorf("rank %d: error names rank %d, want the dead rank %d: %v", r, pe.Rank, dead, err)
						}
					}
					if mustFail > 0 {
						assert.Positive(t, named, "no live rank's error names the dead rank %d", dead)
					}
				})
			}
		}
	}
}

// testSilentPeer runs a collective on every rank but one, which never
// calls: the others must return ctx's deadline error, soon after it.
func testSilentPeer(t *testing.T, mk NewGroupFunc) {
	for _, n := range failN {
		for _, silent := range []int{0, n - 1} {
			if n == 2 && silent == 0 {
				continue
			}
			for _, k := range failKindsAt(n) {
				t.Run(name("N=%d/silent=%d/%s", n, silent, k.name), func(t *testing.T) {
					g := k.group(t, mk, n)
					live := without(allRanks(n), silent)
					// A call that hung past its deadline would be caught by
					// the harness's own bound on every call.
					errs := g.run(live, func(ctx context.Context, r int, c *collective.Communicator) error {
						ctx, cancel := context.WithTimeout(ctx, silentDeadline)
						defer cancel()
						return k.call(ctx, c)
					})
					for _, r := range live {
						if k.mayFinish(r, silent, n) && errs[r] == nil {
							continue
						}
						assert.ErrorIs(t, errs[r], context.DeadlineExceeded, "rank %d", r)
					}
				})
			}
		}
	}
}
