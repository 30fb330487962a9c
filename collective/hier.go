package collective

import (
	"context"
	"fmt"
	"slices"
)

// Hierarchical allreduce (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE, with
// rings for NCCL's phases): the ranks of a host reduce-scatter the vector
// among themselves, local rank i keeping block i of Blocks(n, L); the
// ranks with local index i, one per host, allreduce block i over a ring
// of their own (all L such rings at once, each through the hosts' NICs);
// then each host allgathers its blocks. Average sums in the first phase
// and divides by N at the end of the second; with compression the second
// phase's result is rounded to the wire format, which the allgather then
// carries exactly, so every rank ends with the same bits.
//
// The phases run on two child Communicators over views of the same
// Transport (subTransport): one for this rank's host, one for its
// cross-host ring. No pair of ranks is in both (a cross-host ring has one
// rank per host), and each pair's byte stream is used in the same order
// on both sides, so the phases need no tags.

// hostLayout is how the ranks sit on hosts, as this rank sees it.
type hostLayout struct {
	hosts   int   // the number of hosts
	perHost int   // ranks on every host; 0 when hosts differ in size
	local   []int // the ranks on this rank's host, ascending
	cross   []int // the ranks with this rank's local index, one per host, in host order
}

// layoutOf groups size ranks by hostOf, hosts ordered by their lowest
// rank and the ranks of a host ascending, and returns rank's view. cross
// is nil when the hosts differ in size.
func layoutOf(hostOf func(rank int) string, size, rank int) hostLayout {
	index := map[string]int{}
	var groups [][]int
	for r := range size {
		h := hostOf(r)
		i, ok := index[h]
		if !ok {
			i = len(groups)
			index[h] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	l := hostLayout{hosts: len(groups), perHost: len(groups[0]), local: groups[index[hostOf(rank)]]}
	for _, g := range groups {
		if len(g) != l.perHost {
			l.perHost = 0
			return l
		}
	}
	me := slices.Index(l.local, rank)
	for _, g := range groups {
		l.cross = append(l.cross, g[me])
	}
	return l
}

// hierarchy is a Communicator's groups for Hierarchical.
type hierarchy struct {
	layout hostLayout
	// local and cross run the phases; nil when the hosts differ in size.
	local, cross *Communicator
	counts       []int     // Blocks(n, L) of the last call
	shard        []float32 // this rank's block, grow-only
}

// hierarchy returns c's groups, made at the first call from the
// transport's HostLocator (every rank on one host without it).
func (c *Communicator) hierarchy() (*hierarchy, error) {
	if c.hier != nil {
		return c.hier, nil
	}
	hostOf := func(int) string { return "" }
	if hl, ok := c.t.(HostLocator); ok {
		hostOf = hl.HostOf
	}
	h := &hierarchy{layout: layoutOf(hostOf, c.size, c.rank)}
	if h.layout.perHost > 0 {
		cfg := Config{SegmentBytes: c.cfg.SegmentBytes, Compression: c.cfg.Compression, Algorithm: Ring}
		var err error
		if h.local, err = New(newSubTransport(c.t, h.layout.local, c.rank), cfg); err != nil {
			return nil, err
		}
		if h.cross, err = New(newSubTransport(c.t, h.layout.cross, c.rank), cfg); err != nil {
			return nil, err
		}
		h.cross.avgN = c.size
		h.local.native, h.cross.native = c.native, c.native
	}
	c.hier = h
	return h, nil
}

// allreduceHier is Allreduce by hosts; c.hier has its groups.
func (c *Communicator) allreduceHier(ctx context.Context, name string, buf []float32, op Op) error {
	h := c.hier
	L := len(h.layout.local)
	if sum(h.counts) != len(buf) || len(h.counts) != L {
		h.counts = Blocks(len(buf), L)
	}
	me := h.local.rank
	h.shard = grow(h.shard, h.counts[me])
	shard := h.shard[:h.counts[me]]
	red := op
	if op == Average {
		red = Sum
	}
	if err := h.local.ReduceScatter(ctx, buf, shard, red); err != nil {
		return fmt.Errorf("%s: hierarchical: reduce-scatter among this host's ranks %v (numbered from 0 below): %w", name, h.layout.local, err)
	}
	if h.layout.hosts > 1 {
		if err := h.cross.Allreduce(ctx, shard, op); err != nil {
			return fmt.Errorf("%s: hierarchical: allreduce of block %d across hosts by ranks %v (numbered from 0 below): %w", name, me, h.layout.cross, err)
		}
	} else {
		if op == Average {
			scaleBy(shard, float32(1/float64(c.size)))
		}
		c.cfg.Compression.quantize(shard)
	}
	if err := h.local.Allgather(ctx, shard, buf, h.counts); err != nil {
		return fmt.Errorf("%s: hierarchical: allgather among this host's ranks %v (numbered from 0 below): %w", name, h.layout.local, err)
	}
	return nil
}

func sum(x []int) int {
	s := 0
	for _, v := range x {
		s += v
	}
	return s
}

// subTransport is the view of a Transport's ranks that a hierarchy's
// group sees: its rank i is the parent's ranks[i]. Errors are the
// parent's, so a *PeerError names the parent's rank. It does not own the
// parent: Close does nothing.
type subTransport struct {
	t     Transport
	ranks []int
	me    int
}

var _ Transport = (*subTransport)(nil)

func newSubTransport(t Transport, ranks []int, rank int) *subTransport {
	return &subTransport{t: t, ranks: ranks, me: slices.Index(ranks, rank)}
}

func (s *subTransport) Rank() int { return s.me }
func (s *subTransport) Size() int { return len(s.ranks) }
func (s *subTransport) Send(ctx context.Context, peer int, buf []byte) error {
	return s.t.Send(ctx, s.ranks[peer], buf)
}
func (s *subTransport) Recv(ctx context.Context, peer int, buf []byte) error {
	return s.t.Recv(ctx, s.ranks[peer], buf)
}
func (s *subTransport) Close() error { return nil }
