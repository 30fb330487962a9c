package collective

import (
	"context"
	"errors"
	"fmt"
)

// Transport moves bytes between the ranks of one group. Messages have no
// framing: the receiver always knows how many bytes the next message from
// a peer holds, because every collective is deterministic in its sizes.
//
// Send and Recv to/from one peer are each ordered (FIFO per direction).
// Calls for different peers, and a Send and a Recv for the same peer, may
// run concurrently from different goroutines; two concurrent Sends to the
// same peer (or two Recvs from it) are not allowed.
type Transport interface {
	// Rank is this process's rank in 0..Size()-1.
	Rank() int
	// Size is the number of ranks.
	Size() int
	// Send sends buf to peer. It may block until the peer receives (or
	// until the bytes are buffered); the caller may reuse buf when Send
	// returns. It returns ctx's error if ctx ends first, and a *PeerError
	// naming peer if the peer is gone.
	Send(ctx context.Context, peer int, buf []byte) error
	// Recv fills buf with the next len(buf) bytes from peer. Errors as
	// Send.
	Recv(ctx context.Context, peer int, buf []byte) error
	// Close releases the transport; calls in flight fail.
	Close() error
}

// ErrPeer marks an error caused by a peer that died, closed, or broke the
// protocol.
var ErrPeer = errors.New("peer failed")

// PeerError names the rank a transport failed to talk to.
type PeerError struct {
	Rank int
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("rank %d: %v", e.Rank, e.Err) }

// Unwrap lets errors.Is find ErrPeer and the cause.
func (e *PeerError) Unwrap() []error { return []error{ErrPeer, e.Err} }

// HostLocator is implemented by a Transport that knows which ranks share
// a machine: collnet's transport answers with the ranks' Config.HostID,
// the notion of host by which it links same-host pairs over shared
// memory. Hierarchical allreduce groups the ranks by it; a Transport
// without it counts as every rank on one host.
type HostLocator interface {
	// HostOf returns the id of the machine that rank runs on, for rank in
	// 0..Size()−1; ranks with equal ids share a machine. It does not
	// block, may be called concurrently, and answers the same for the
	// transport's life.
	HostOf(rank int) string
}
