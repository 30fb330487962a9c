package collective

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
)

// The latency-logarithmic allreduce: recursive doubling (MPICH's choice
// for short messages, Thakur, Rabenseifner and Gropp 2005). In round k
// every rank swaps its whole vector with the rank whose number differs
// in bit k and both combine the two, so after log2(N) rounds every rank
// holds the reduction: log2(N) latencies against the ring's 2(N−1), at
// the price of the whole vector a round (the ring sends 2(N−1)/N of it
// in all). Where N is not a power of two, the first 2·rem ranks (rem = N
// less the largest power of two p below it) pair up first: each even
// one hands its vector to the odd one above it, sits out the p-rank
// doubling and gets the result back at the end: two more latencies.
//
// Every rank ends with the same bits: each combine is a op b on one side
// and b op a on the other, and +, min and max commute in IEEE 754 (Go's
// min and max propagate NaN either way round). With compression each
// rank first rounds its own vector to the wire format, as its partner
// receives it, so both combine the same two values.

// treePeer is the rank of the doubling's rank v (0..p−1) when the first
// 2·rem ranks folded in pairs onto their odd member.
func treePeer(v, rem int) int {
	if v < rem {
		return 2*v + 1
	}
	return v + rem
}

// allreduceTree is Allreduce by recursive doubling.
func (c *Communicator) allreduceTree(ctx context.Context, name string, buf []float32, op Op) error {
	N, r := c.size, c.rank
	p := 1 << (bits.Len(uint(N)) - 1)
	rem := N - p
	k := codec{comp: c.cfg.Compression, native: c.native}
	c.vec = grow(c.vec, len(buf))
	mine := c.vec[:len(buf)]
	if r < 2*rem && r%2 == 0 {
		// Folded: hand the vector to r+1, take the result back.
		if err := c.sendAll(ctx, k, r+1, buf); err != nil {
			return fmt.Errorf("%s: fold to rank %d: %w", name, r+1, err)
		}
		if err := c.recvAll(ctx, k, r+1, buf); err != nil {
			return fmt.Errorf("%s: result from rank %d: %w", name, r+1, err)
		}
		return nil
	}
	if r < 2*rem {
		copy(mine, buf)
		k.comp.quantize(mine)
		if err := c.recvAll(ctx, k, r-1, buf); err != nil {
			return fmt.Errorf("%s: fold from rank %d: %w", name, r-1, err)
		}
		reduce(op, buf, mine, buf)
	}
	v := r - rem
	if r < 2*rem {
		v = r / 2
	}
	for mask, round := 1, 1; mask < p; mask, round = mask<<1, round+1 {
		peer := treePeer(v^mask, rem)
		copy(mine, buf)
		k.comp.quantize(mine)
		if err := c.swap(ctx, k, peer, mine, buf, op); err != nil {
			return fmt.Errorf("%s: round %d of %d with rank %d: %w", name, round, bits.Len(uint(p))-1, peer, err)
		}
	}
	if op == Average {
		scaleBy(buf, float32(1/float64(N)))
	}
	k.comp.quantize(buf)
	if r < 2*rem {
		if err := c.sendAll(ctx, k, r-1, buf); err != nil {
			return fmt.Errorf("%s: result to rank %d: %w", name, r-1, err)
		}
	}
	return nil
}

// sendAll sends x to peer segment by segment.
func (c *Communicator) sendAll(ctx context.Context, k codec, peer int, x []float32) error {
	c.sendBuf = growBytes(c.sendBuf, c.segElems*4)
	for off := 0; off < len(x); off += c.segElems {
		if err := c.t.Send(ctx, peer, k.encode(c.sendBuf, x[off:min(off+c.segElems, len(x))])); err != nil {
			return fmt.Errorf("send to rank %d: %w", peer, err)
		}
	}
	return nil
}

// recvAll fills x from peer segment by segment.
func (c *Communicator) recvAll(ctx context.Context, k codec, peer int, x []float32) error {
	c.recvBuf = growBytes(c.recvBuf, c.segElems*4)
	for off := 0; off < len(x); off += c.segElems {
		seg := x[off:min(off+c.segElems, len(x))]
		w, direct := k.wire(c.recvBuf, seg)
		if err := c.t.Recv(ctx, peer, w); err != nil {
			return fmt.Errorf("recv from rank %d: %w", peer, err)
		}
		if !direct {
			k.decode(seg, w)
		}
	}
	return nil
}

// swap sends mine to peer while it receives peer's vector, segment by
// segment, and sets buf = mine op theirs. The sends run on a goroutine
// of their own (a transport's Send may wait for the receiver, and the
// peer sends at the same time); a failure on either side ends the other
// (the call's ctx is cancelled for it) and the first failure is returned.
func (c *Communicator) swap(ctx context.Context, k codec, peer int, mine, buf []float32, op Op) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sendErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		if sendErr = c.sendAll(ctx, k, peer, mine); sendErr != nil {
			cancel()
		}
	})
	c.recvF32 = grow(c.recvF32, c.segElems)
	c.recvBuf = growBytes(c.recvBuf, c.segElems*4)
	var recvErr error
	for off := 0; off < len(buf); off += c.segElems {
		end := min(off+c.segElems, len(buf))
		in := c.recvF32[:end-off]
		w, direct := k.wire(c.recvBuf, in)
		if err := c.t.Recv(ctx, peer, w); err != nil {
			recvErr = fmt.Errorf("recv from rank %d: %w", peer, err)
			cancel()
			break
		}
		if !direct {
			k.decode(in, w)
		}
		reduce(op, buf[off:end], mine[off:end], in)
	}
	wg.Wait()
	if recvErr != nil && (sendErr == nil || !errors.Is(recvErr, context.Canceled)) {
		return recvErr
	}
	return sendErr
}
