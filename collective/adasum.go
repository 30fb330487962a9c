package collective

import (
	"context"
	"fmt"
)

// AllreduceAdasum combines every rank's buf with AdaSum (Horovod's
// adaptive summation), in place: on return every rank's buf holds the
// same result. Two gradients combine as
//
//	adasum(a, b) = (1 − a·b / (2‖a‖²))·a + (1 − a·b / (2‖b‖²))·b
//
// (a zero vector's coefficient is taken as 1, so adasum(0, b) = b), which
// is a+b for orthogonal gradients and a for equal ones. The pairs form a
// binary tree over the ranks: at distance d = 1, 2, 4, … rank r with
// r mod 2d = 0 combines its vector with rank r+d's, if that rank exists;
// an unpaired rank passes its vector up unchanged, so any N works. Rank 0
// then broadcasts the result. Dot products and norms are float64; vectors
// are float32 and travel uncompressed. Every rank must pass the same
// len(buf).
func (c *Communicator) AllreduceAdasum(ctx context.Context, buf []float32) error {
	const name = "allreduce_adasum"
	ctx, err := c.begin(ctx, name)
	if err != nil {
		return err
	}
	return c.end(c.adasum(ctx, name, buf))
}

func (c *Communicator) adasum(ctx context.Context, name string, buf []float32) error {
	N, r := c.size, c.rank
	if N == 1 {
		return nil
	}
	c.vec = grow(c.vec, len(buf))
	other := c.vec[:len(buf)]
	for d := 1; d < N; d *= 2 {
		if r%(2*d) == d {
			if err := c.sendFloats(ctx, r-d, buf); err != nil {
				return fmt.Errorf("%s: tree distance %d: send to rank %d: %w", name, d, r-d, err)
			}
			break
		}
		if r+d < N {
			if err := c.recvFloats(ctx, r+d, other); err != nil {
				return fmt.Errorf("%s: tree distance %d: recv from rank %d: %w", name, d, r+d, err)
			}
			adasumInto(buf, other)
		}
	}
	return c.broadcast(ctx, name, buf, 0)
}

// adasumInto sets a = adasum(a, b).
func adasumInto(a, b []float32) {
	b = b[:len(a)]
	var dot, na, nb float64
	for i, x := range a {
		x, y := float64(x), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
	}
	ca, cb := 1.0, 1.0
	if na > 0 {
		ca = 1 - dot/(2*na)
	}
	if nb > 0 {
		cb = 1 - dot/(2*nb)
	}
	for i, x := range a {
		a[i] = float32(ca*float64(x) + cb*float64(b[i]))
	}
}
