package data

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// Sampler picks one rank's share of a dataset for each epoch, with the
// semantics of PyTorch's DistributedSampler (drop_last=False):
//
//   - PerRank() = ⌈n/world⌉ and Total() = PerRank()·world;
//   - each epoch orders [0, n): with shuffle, one permutation drawn from a
//     math/rand/v2 PCG seeded with (seed+epoch, a fixed constant), the same
//     on every rank; without, 0, 1, …, n−1;
//   - that order is padded to Total() by repeating it from its start;
//   - rank r takes the padded order's positions r, r+world, r+2·world, …
//
// So rank r's local position j is global position j·world + r. A batch of
// b samples, local positions [k·b, (k+1)·b), is made of the global
// positions k·b·world + i·world + r for i in [0, b); the world ranks' k-th
// batches together cover exactly the global positions
// [k·b·world, (k+1)·b·world) (up to PerRank()·world for the last, short
// batch). When world divides n there is no padding, and a world-1 sampler
// with the same n, seed and shuffle has the same order, so its k-th batch
// of world·b samples holds exactly the samples of the world ranks' k-th
// batches of b — as a multiset, in a different order. That is why N
// synchronous workers with batch b follow the same trajectory as one
// worker with batch N·b. When world does not divide n, the last global
// batch holds padding (repeated samples) and the equivalence does not
// hold.
//
// The permutation is not PyTorch's (torch.randperm's generator differs);
// only the structure is the same.
//
// A Sampler is immutable and safe for concurrent use.
type Sampler struct {
	n, rank, world int
	perRank        int
	seed           uint64
	shuffle        bool
}

// samplerStream is the PCG's second seed word; the first is seed+epoch.
const samplerStream = 0x5add_1e5a_4d1e_0001

// NewSampler returns rank's sampler over n samples shared by world ranks.
// It requires n ≥ 1, world ≥ 1 and rank in [0, world).
func NewSampler(n, rank, world int, seed uint64, shuffle bool) (*Sampler, error) {
	var errs []error
	if n < 1 {
		errs = append(errs, fmt.Errorf("dataset size %d, want ≥ 1", n))
	}
	if world < 1 {
		errs = append(errs, fmt.Errorf("world size %d, want ≥ 1", world))
	} else if rank < 0 || rank >= world {
		errs = append(errs, fmt.Errorf("rank %d, want [0, %d)", rank, world))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sampler: %w", err)
	}
	return &Sampler{n: n, rank: rank, world: world, perRank: (n + world - 1) / world, seed: seed, shuffle: shuffle}, nil
}

// Len is the dataset size n.
func (s *Sampler) Len() int { return s.n }

// Rank is this sampler's rank.
func (s *Sampler) Rank() int { return s.rank }

// World is the number of ranks.
func (s *Sampler) World() int { return s.world }

// Shuffle reports whether each epoch is a fresh permutation.
func (s *Sampler) Shuffle() bool { return s.shuffle }

// PerRank is the number of indices each rank gets per epoch, ⌈n/world⌉.
func (s *Sampler) PerRank() int { return s.perRank }

// Total is PerRank()·world, the padded length of an epoch's order.
func (s *Sampler) Total() int { return s.perRank * s.world }

// Steps is the number of batches of size batch (≥ 1) in each rank's epoch:
// ⌈PerRank()/batch⌉, or ⌊PerRank()/batch⌋ with dropLast. It is the same
// on every rank.
func (s *Sampler) Steps(batch int, dropLast bool) int {
	if batch < 1 {
		panic(fmt.Sprintf("data: Sampler.Steps: batch %d, want ≥ 1", batch))
	}
	if dropLast {
		return s.perRank / batch
	}
	return (s.perRank + batch - 1) / batch
}

// Indices returns this rank's PerRank() dataset indices for epoch, in the
// order to visit them. It uses dst's storage as scratch space, growing it
// to Total() if its capacity is smaller, so a caller that passes the
// previous result back allocates nothing for the order itself.
func (s *Sampler) Indices(epoch int, dst []int) []int {
	total := s.Total()
	if cap(dst) < total {
		dst = make([]int, total)
	}
	dst = dst[:total]
	order := dst[:s.n]
	for i := range order {
		order[i] = i
	}
	if s.shuffle {
		rng := rand.New(rand.NewPCG(s.seed+uint64(epoch), samplerStream))
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	// Pad by repeating the order from its start (cyclically, when world > n).
	for i := s.n; i < total; i++ {
		dst[i] = dst[i-s.n]
	}
	// Keep positions rank, rank+world, …; in place, as j·world+rank ≥ j.
	for j := range s.perRank {
		dst[j] = dst[j*s.world+s.rank]
	}
	return dst[:s.perRank]
}
