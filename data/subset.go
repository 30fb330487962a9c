package data

import (
	"fmt"
	"sync"
)

// Subset is the samples idx of ds, in that order: sample k of the subset
// is sample idx[k] of ds. Elastic training uses it for what is left of an
// epoch after the world changed size mid-epoch. idx is copied; it must be
// non-empty and every index in [0, ds.Len()).
func Subset(ds Dataset, idx []int) (Dataset, error) {
	if len(idx) == 0 {
		return nil, fmt.Errorf("data: subset of %s: no samples", ds.Name())
	}
	for k, i := range idx {
		if i < 0 || i >= ds.Len() {
			return nil, fmt.Errorf("data: subset of %s: index %d (position %d) outside [0, %d)", ds.Name(), i, k, ds.Len())
		}
	}
	return &subset{Dataset: ds, idx: append([]int(nil), idx...)}, nil
}

type subset struct {
	Dataset
	idx  []int
	pool sync.Pool // *[]int scratch for Gather's mapped indices
}

func (s *subset) Name() string {
	return fmt.Sprintf("%s[%d of %d]", s.Dataset.Name(), len(s.idx), s.Dataset.Len())
}
func (s *subset) Len() int { return len(s.idx) }

func (s *subset) Gather(idx []int, x []float32, y []int32) {
	p, _ := s.pool.Get().(*[]int)
	if p == nil {
		p = new([]int)
	}
	m := (*p)[:0]
	for k, i := range idx {
		if uint(i) >= uint(len(s.idx)) {
			panic(fmt.Sprintf("data: %s.Gather: index %d (position %d) outside [0, %d)", s.Name(), i, k, len(s.idx)))
		}
		m = append(m, s.idx[i])
	}
	s.Dataset.Gather(m, x, y)
	*p = m
	s.pool.Put(p)
}

// Remaining returns the samples of an epoch that world ranks taking
// batches of batch samples have not reached after steps steps: ranks
// sampling n samples with NewSampler(n, rank, world, seed, true) take,
// together, the first steps·batch·world positions of the epoch's order
// (see Sampler), so what is left is the rest of that order, as indices
// into [0, n). It is nil when the epoch is done.
func Remaining(n int, seed uint64, epoch int, steps int64, batch, world int) []int {
	used := steps * int64(batch) * int64(world)
	if used >= int64(n) {
		return nil
	}
	s, err := NewSampler(n, 0, 1, seed, true)
	if err != nil {
		panic(err) // n >= 1 here
	}
	order := s.Indices(epoch, nil)
	return append([]int(nil), order[used:]...)
}
