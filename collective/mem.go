package collective

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrClosed is returned by a transport's calls made on it after (or in
// flight during) its own Close.
var ErrClosed = errors.New("transport closed")

// errPeerClosed is the cause inside the *PeerError that NewMemGroup's
// transports return for a peer that closed.
var errPeerClosed = errors.New("peer closed its transport")

// NewMemGroup returns n connected in-memory transports, ranks 0..n−1, for
// tests and benchmarks. Each direction between two ranks is an unbounded
// byte stream: Send copies buf into it and never blocks, Recv takes the
// next len(buf) bytes however they were split into Sends. Closing rank k
// makes its peers' Recv from k (once what k sent is drained) and Send to k
// fail with a *PeerError naming k; k's own calls then fail with ErrClosed.
// A peer that simply never calls is a silent peer: Recv from it blocks
// until ctx ends. It panics if n < 1.
func NewMemGroup(n int) []Transport {
	if n < 1 {
		panic(fmt.Sprintf("collective.NewMemGroup(%d): want at least 1 rank", n))
	}
	g := &memGroup{pipes: make([][]*memPipe, n)}
	for i := range g.pipes {
		g.pipes[i] = make([]*memPipe, n)
		for j := range g.pipes[i] {
			if i != j {
				g.pipes[i][j] = &memPipe{wake: make(chan struct{}, 1)}
			}
		}
	}
	ts := make([]Transport, n)
	for i := range ts {
		ts[i] = &memTransport{g: g, rank: i}
	}
	return ts
}

var _ Transport = (*memTransport)(nil)

type memGroup struct {
	pipes [][]*memPipe // pipes[i][j] carries bytes from rank i to rank j
}

// memPipe is one direction between two ranks: a byte stream with a
// single reader.
type memPipe struct {
	mu         sync.Mutex
	data       []byte // unread bytes are data[head:]
	head       int
	fromClosed bool          // the sending rank closed
	toClosed   bool          // the receiving rank closed
	wake       chan struct{} // cap 1; the one reader waits on it
}

func (p *memPipe) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

type memTransport struct {
	g         *memGroup
	rank      int
	closeOnce sync.Once
}

func (t *memTransport) Rank() int { return t.rank }
func (t *memTransport) Size() int { return len(t.g.pipes) }

// check fails a call to peer when peer is not one or ctx is done.
func (t *memTransport) check(ctx context.Context, peer int) error {
	if peer < 0 || peer >= len(t.g.pipes) || peer == t.rank {
		return fmt.Errorf("mem transport: rank %d cannot talk to peer %d (want 0..%d, not itself)", t.rank, peer, len(t.g.pipes)-1)
	}
	return ctx.Err()
}

// Send appends a copy of buf to the stream to peer; it never blocks.
func (t *memTransport) Send(ctx context.Context, peer int, buf []byte) error {
	if err := t.check(ctx, peer); err != nil {
		return err
	}
	p := t.g.pipes[t.rank][peer]
	p.mu.Lock()
	switch {
	case p.fromClosed:
		p.mu.Unlock()
		return ErrClosed
	case p.toClosed:
		p.mu.Unlock()
		return &PeerError{Rank: peer, Err: errPeerClosed}
	}
	if p.head > 0 && (p.head >= len(p.data)-p.head || len(p.data)+len(buf) > cap(p.data)) {
		// More consumed than live, or no room left: move the unread bytes
		// to the front, so the buffer stays bounded by what is in flight
		// and a warm stream does not allocate.
		p.data = p.data[:copy(p.data, p.data[p.head:])]
		p.head = 0
	}
	p.data = append(p.data, buf...)
	p.mu.Unlock()
	p.signal()
	return nil
}

// Recv fills buf from the stream from peer, waiting for bytes as needed.
func (t *memTransport) Recv(ctx context.Context, peer int, buf []byte) error {
	if err := t.check(ctx, peer); err != nil {
		return err
	}
	p := t.g.pipes[peer][t.rank]
	for {
		p.mu.Lock()
		if p.toClosed {
			p.mu.Unlock()
			return ErrClosed
		}
		n := copy(buf, p.data[p.head:])
		p.head += n
		if p.head == len(p.data) {
			p.data, p.head = p.data[:0], 0
		}
		buf = buf[n:]
		fromClosed := p.fromClosed
		p.mu.Unlock()
		if len(buf) == 0 {
			return nil
		}
		if fromClosed {
			return &PeerError{Rank: peer, Err: errPeerClosed}
		}
		select {
		case <-p.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close closes this rank's end of every stream; it is idempotent.
func (t *memTransport) Close() error {
	t.closeOnce.Do(func() {
		for peer := range t.g.pipes {
			if peer == t.rank {
				continue
			}
			out := t.g.pipes[t.rank][peer]
			out.mu.Lock()
			out.fromClosed = true
			out.mu.Unlock()
			out.signal()

			in := t.g.pipes[peer][t.rank]
			in.mu.Lock()
			in.toClosed = true
			in.data, in.head = nil, 0
			in.mu.Unlock()
			in.signal()
		}
	})
	return nil
}
