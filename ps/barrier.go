package ps

import (
	"fmt"
	"slices"
	"strings"
)

// barrier is the synchronous step of one shard as a plain state machine:
// it collects the gradients of the expected workers for the current step
// and says when the step is complete. It holds no lock and starts no
// goroutine; the Server drives it under its mutex.
type barrier struct {
	// workers is the live set; need is how many of them complete a step
	// (len(workers) − backup workers).
	workers []int64
	backup  int
	// arrived are the workers that pushed for the current step; acc is
	// the sum of their gradients.
	arrived []int64
	acc     []float32
	// pending holds a new live set that takes effect at the next step
	// boundary.
	pending []int64
}

func newBarrier(workers []int64, backup, floats int) *barrier {
	return &barrier{workers: slices.Clone(workers), backup: backup, acc: make([]float32, floats)}
}

func (b *barrier) need() int { return max(len(b.workers)-b.backup, 1) }

func (b *barrier) has(w int64) bool { return slices.Contains(b.arrived, w) }

// member says whether w belongs to the current step's set.
func (b *barrier) member(w int64) bool { return slices.Contains(b.workers, w) }

// add adds w's gradient to the step and reports whether the step is now
// complete. The caller has checked that w is one of the configured
// workers and has not pushed this step.
func (b *barrier) add(w int64, grads []float32) bool {
	for i, g := range grads {
		b.acc[i] += g
	}
	b.arrived = append(b.arrived, w)
	return len(b.arrived) >= b.need()
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

// reset starts the next step, adopting a pending live set.
func (b *barrier) reset() {
	clear(b.acc)
	b.arrived = b.arrived[:0]
	if b.pending != nil {
		b.workers, b.pending = b.pending, nil
	}
}

// setWorkers changes the live set at the next step boundary. If no push
// of the current step arrived yet, it takes effect at once; it reports
// whether the current step is now complete (a shrunk set may already be
// covered by the pushes that arrived).
func (b *barrier) setWorkers(ws []int64) bool {
	b.pending = slices.Clone(ws)
	if len(b.arrived) == 0 {
		b.workers, b.pending = b.pending, nil
		return false
	}
	// Workers that left no longer hold up the step in progress.
	live := 0
	for _, w := range b.workers {
		if slices.Contains(ws, w) || b.has(w) {
			live++
		}
	}
	return len(b.arrived) >= max(live-b.backup, 1)
}

// missing describes the step's state for an error message, e.g.
// "pushes from workers [0 2] of 4 arrived, waiting for [1 3]".
func (b *barrier) missing() string {
	var wait []string
	for _, w := range b.workers {
		if !b.has(w) {
			wait = append(wait, fmt.Sprint(w))
		}
	}
	got := slices.Clone(b.arrived)
	slices.Sort(got)
	return fmt.Sprintf("pushes from workers %v of %d arrived (%d needed), waiting for worker(s) %s",
		got, len(b.workers), b.need(), strings.Join(wait, ", "))
}
