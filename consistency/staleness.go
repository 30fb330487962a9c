package consistency

import (
	"fmt"
	"iter"
	"maps"
	"math"
	"slices"
	"strings"
)

// Staleness counts pushes by their staleness: how many updates the server
// had applied since the pull the pushed gradient was computed from. A key
// is a staleness, its value the pushes that had it. Entries with a
// negative staleness or a count below 1 count for nothing (a results file
// may hold zero counts).
//
// Its JSON is that of a map[int64]int64, an object keyed by the decimal
// staleness in string order, {"0":12,"1":40,"12":1,"2":3}, as the --json
// output and results files have always written it.
//
// Add and Merge allocate the map on first use; the other methods read a
// nil Staleness as empty. It is not safe for concurrent use.
type Staleness map[int64]int64

// Add counts one push of staleness s.
func (h *Staleness) Add(s int64) {
	if *h == nil {
		*h = Staleness{}
	}
	(*h)[s]++
}

// Merge adds the counts of o.
func (h *Staleness) Merge(o Staleness) {
	if len(o) == 0 {
		return
	}
	if *h == nil {
		*h = make(Staleness, len(o))
	}
	for s, n := range o {
		(*h)[s] += n
	}
}

// All yields the stalenesses that count and their pushes, in increasing
// staleness.
func (h Staleness) All() iter.Seq2[int64, int64] {
	return func(yield func(int64, int64) bool) {
		for _, s := range slices.Sorted(maps.Keys(h)) {
			if n := h[s]; s >= 0 && n > 0 && !yield(s, n) {
				return
			}
		}
	}
}

// Pushes is the number of pushes counted.
func (h Staleness) Pushes() int64 {
	var total int64
	for _, n := range h.All() {
		total += n
	}
	return total
}

// Mean is the mean staleness of a push, 0 when none was counted.
func (h Staleness) Mean() float64 {
	var sum, total float64
	for s, n := range h.All() {
		sum += float64(s) * float64(n)
		total += float64(n)
	}
	if total == 0 {
		return 0
	}
	return sum / total
}

// Worst is the largest staleness counted, -1 when none was.
func (h Staleness) Worst() int64 {
	worst := int64(-1)
	for s := range h.All() {
		worst = s
	}
	return worst
}

// Quantile is the smallest staleness that at least the share q (0 to 1)
// of the pushes had or stayed under, -1 when none was counted.
func (h Staleness) Quantile(q float64) int64 {
	want := int64(math.Ceil(q * float64(h.Pushes())))
	var acc int64
	last := int64(-1)
	for s, n := range h.All() {
		acc += n
		if acc >= want {
			return s
		}
		last = s
	}
	return last
}

// Fresh is the share of the pushes with staleness 0, 0 when none was
// counted.
func (h Staleness) Fresh() float64 {
	total := h.Pushes()
	if total == 0 {
		return 0
	}
	return float64(max(h[0], 0)) / float64(total)
}

// String lists the counts as "staleness:pushes" in increasing staleness:
// "0:12 1:40 2:3".
func (h Staleness) String() string {
	var b strings.Builder
	for s, n := range h.All() {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%d", s, n)
	}
	return b.String()
}
