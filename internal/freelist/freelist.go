// Package freelist keeps large buffers for reuse across garbage
// collections.
//
// A sync.Pool is emptied by the garbage collector (what it holds survives
// one collection at most), which is right for small, short-lived objects
// and wrong for the vector-sized buffers a parameter server receives
// pushes into and snapshots pulls from: a shard of the 25.4M-parameter
// model allocates one or more 50 MB buffers per request, a collection
// runs every few requests, and each buffer the pool lost is allocated
// again from memory the runtime has since returned to the kernel, one
// page fault and one zeroed page per 4 KiB (on this project's VMs about a
// tenth of a 25M training run's CPU). A List holds what was put back until
// it is taken again, up to a fixed number of buffers, so its size follows
// the most buffers ever in use at once, not the collector's schedule.
package freelist

import "sync"

// List is a bounded stack of buffers. The zero value keeps nothing; use
// New. A List is safe for concurrent use.
type List[T any] struct {
	mu   sync.Mutex
	free []*[]T
	max  int
}

// New returns a list that keeps at most max buffers.
func New[T any](max int) *List[T] {
	return &List[T]{max: max}
}

// Get returns a buffer of length n: the most recently put one whose
// capacity is at least n, or, when none is, nil (the caller allocates).
// Its contents are what the last user left.
func (l *List[T]) Get(n int) *[]T {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.free) - 1; i >= 0; i-- {
		if b := l.free[i]; cap(*b) >= n {
			l.free = append(l.free[:i], l.free[i+1:]...)
			*b = (*b)[:n]
			return b
		}
	}
	return nil
}

// Put keeps b for a later Get and reports whether it did: not when the
// list is full (b is left to the garbage collector then). The caller must
// not use b after a Put that kept it.
func (l *List[T]) Put(b *[]T) bool {
	if b == nil || cap(*b) == 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.free) >= l.max {
		return false
	}
	l.free = append(l.free, b)
	return true
}
