package ps

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// barrier is the synchronous step of one shard as a plain state machine:
// it collects the gradients of the workers expected at the current step
// and says when the step is complete. It holds no lock and starts no
// goroutine; the Server drives it under its mutex and passes the step.
type barrier struct {
	backup int
	// entry holds, for each live worker, the first step it takes part in:
	// 0 for the workers of the run's start, later for a worker that
	// (re)joined during the run.
	entry map[int64]int64
	// arrived are the workers that pushed for the current step; acc is
	// the sum of their gradients.
	arrived []int64
	acc     []float32
	gmax    float64 // the largest magnitude in their gradients
	// short: a worker expected at the current step left after the step
	// had begun and before it pushed.
	short bool
}

func newBarrier(workers []int64, backup, floats int) *barrier {
	b := &barrier{backup: backup, entry: make(map[int64]int64, len(workers)), acc: make([]float32, floats)}
	for _, w := range workers {
		b.entry[w] = 0
	}
	return b
}

// member says whether live worker w takes part in step.
func (b *barrier) member(w, step int64) bool {
	e, ok := b.entry[w]
	return ok && e <= step
}

// expected counts who step waits for: the live members, and those that
// pushed it and left since.
func (b *barrier) expected(step int64) int {
	n := 0
	for w := range b.entry {
		if b.member(w, step) && !b.has(w) {
			n++
		}
	}
	return n + len(b.arrived)
}

func (b *barrier) need(step int64) int { return max(b.expected(step)-b.backup, 1) }

func (b *barrier) has(w int64) bool { return slices.Contains(b.arrived, w) }

func (b *barrier) complete(step int64) bool {
	return len(b.arrived) > 0 && len(b.arrived) >= b.need(step)
}

// add adds w's gradient, of the floats from at on (a fragment's), to
// step and reports whether the step is now complete. The caller has
// checked that w is a member of step and has not pushed it.
func (b *barrier) add(w, step int64, at int, grads []float32, gmax float64) bool {
	acc := b.acc[at : at+len(grads)]
	for i, g := range grads {
		acc[i] += g
	}
	b.gmax = max(b.gmax, gmax)
	b.arrived = append(b.arrived, w)
	return b.complete(step)
}

// remove takes w out (it died or left) and reports whether step is now
// complete: a step held up only by w goes on with the pushes that arrived.
func (b *barrier) remove(w, step int64) bool {
	if b.member(w, step) && !b.has(w) && len(b.arrived) > 0 {
		b.short = true
	}
	delete(b.entry, w)
	return b.complete(step)
}

// admit makes w take part from step entry on (never in a step it cannot
// join any more: the caller computes entry) and reports whether the
// current step is now complete, which it can be when w was expected at
// step and now enters later.
func (b *barrier) admit(w, entry, step int64) bool {
	b.entry[w] = entry
	return b.complete(step)
}

// mean turns the sum into the mean over the pushes that arrived and
// returns it; the caller applies it and then calls reset.
func (b *barrier) mean() []float32 {
	inv := 1 / float32(len(b.arrived))
	for i := range b.acc {
		b.acc[i] *= inv
	}
	return b.acc
}

// reset starts the next step.
func (b *barrier) reset() {
	clear(b.acc)
	b.gmax = 0
	b.arrived = b.arrived[:0]
	b.short = false
}

// waitingFor lists the workers step still waits for, in order.
func (b *barrier) waitingFor(step int64) []int64 {
	var wait []int64
	for _, w := range slices.Sorted(maps.Keys(b.entry)) {
		if b.member(w, step) && !b.has(w) {
			wait = append(wait, w)
		}
	}
	return wait
}

// missing describes step's state for an error message, e.g.
// "pushes from workers [0 2] of 4 arrived (4 needed), waiting for worker(s) 1, 3".
func (b *barrier) missing(step int64) string {
	var wait []string
	for _, w := range b.waitingFor(step) {
		wait = append(wait, fmt.Sprint(w))
	}
	got := slices.Clone(b.arrived)
	slices.Sort(got)
	return fmt.Sprintf("pushes from workers %v of %d arrived (%d needed), waiting for worker(s) %s",
		got, b.expected(step), b.need(step), strings.Join(wait, ", "))
}
