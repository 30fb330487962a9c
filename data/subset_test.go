package data

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
)

// seen runs world ranks over ds for steps steps each (all steps: -1) and
// returns the samples they took, by label.
func seen(t *testing.T, ds Dataset, world, batch int, seed uint64, epoch int, steps int) []int {
	t.Helper()
	var got []int
	for rank := range world {
		s, err := NewSampler(ds.Len(), rank, world, seed, true)
		if err != nil {
			t.Fatal(err)
		}
		l, err := NewLoader(LoaderConfig{Batch: batch, Depth: 1}, ds, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Start(context.Background(), epoch); err != nil {
			t.Fatal(err)
		}
		for k := 0; steps < 0 || k < steps; k++ {
			b, err := l.Next(context.Background())
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for k := range b.Len() {
				got = append(got, int(b.X[k]))
			}
			l.Release(b)
		}
		l.Close()
	}
	slices.Sort(got)
	return got
}

// An epoch that three ranks start and two finish, over the subset the
// first three left, covers every sample exactly once but for the
// sampler's padding.
func TestRemainingReshardsTheRestOfAnEpoch(t *testing.T) {
	const n, batch, seed, epoch = 600, 8, 7, 3
	ds := seqDataset{n: n, size: 1}
	first := seen(t, ds, 3, batch, seed, epoch, 10) // 240 samples
	rest := Remaining(n, seed, epoch, 10, batch, 3)
	if len(rest) != n-240 {
		t.Fatalf("Remaining: %d samples left, want %d", len(rest), n-240)
	}
	sub, err := Subset(ds, rest)
	if err != nil {
		t.Fatal(err)
	}
	second := seen(t, sub, 2, batch, seed+epoch, 0, -1)
	all := append(first, second...)
	slices.Sort(all)
	if want := n; len(all) != want { // 360 split over 2 ranks: no padding
		t.Fatalf("%d samples seen, want %d", len(all), want)
	}
	for i, v := range all {
		if v != i {
			t.Fatalf("sample %d seen where %d was expected: some sample was seen twice or skipped", v, i)
		}
	}
	if r := Remaining(n, seed, epoch, 25, batch, 3); r != nil {
		t.Errorf("Remaining after the whole epoch: %d samples, want none", len(r))
	}
}

func TestSubsetRefusesBadIndices(t *testing.T) {
	ds := seqDataset{n: 10, size: 1}
	for _, idx := range [][]int{nil, {0, 10}, {-1}} {
		if _, err := Subset(ds, idx); err == nil {
			t.Errorf("Subset(%v): no error", idx)
		}
	}
}
