package collbench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoalml/shoal/collective"
)

// Ops are the collectives Case knows.
var Ops = []string{"allreduce", "reducescatter", "allgather", "broadcast", "alltoall"}

// Measure runs op on bytes per rank through c: warmup untimed calls, a
// barrier, iters timed calls, then one call on fresh inputs that each rank
// checks. Every rank calls it with the same arguments; all of them return
// the slowest rank's mean time per call and whether every rank's check
// passed.
func Measure(ctx context.Context, c *collective.Communicator, op string, bytes int64, iters, warmup int) (seconds float64, correct bool, err error) {
	if !slices.Contains(Ops, op) {
		return 0, false, fmt.Errorf("collective %q: want one of %v", op, Ops)
	}
	fill, run, check := Case(c, op, int(bytes/4))
	fill()
	for range warmup {
		if err := run(ctx); err != nil {
			return 0, false, err
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return 0, false, err
	}
	start := time.Now()
	for range iters {
		if err := run(ctx); err != nil {
			return 0, false, err
		}
	}
	secs := []float32{float32(time.Since(start).Seconds() / float64(iters))}
	// The slowest rank's time is the collective's time.
	if err := c.Allreduce(ctx, secs, collective.Max); err != nil {
		return 0, false, err
	}
	// One more call on fresh inputs, checked.
	fill()
	if err := run(ctx); err != nil {
		return 0, false, err
	}
	ok := []float32{0}
	if check() {
		ok[0] = 1
	}
	if err := c.Allreduce(ctx, ok, collective.Min); err != nil {
		return 0, false, err
	}
	return float64(secs[0]), ok[0] == 1, nil
}

// BusFactor is nccl-tests' factor from algorithm to bus bandwidth.
func BusFactor(op string, n int) float64 {
	switch op {
	case "allreduce":
		return 2 * float64(n-1) / float64(n)
	case "reducescatter", "allgather", "alltoall":
		return float64(n-1) / float64(n)
	}
	return 1 // broadcast
}

// Case returns, for op on n floats per rank: a fill of the inputs, one
// call, and a check of the result of one call after a fill. The timed
// calls do not refill (reductions then grow, harmlessly), as nccl-tests
// and the PyTorch peer do not.
func Case(c *collective.Communicator, op string, n int) (fill func(), run func(context.Context) error, check func() bool) {
	rank, size := c.Rank(), c.Size()
	// Small integers: sums are exact in float32, so the check is exact.
	val := func(r, i int) float32 { return float32((r+1)*(i%7) + r) }
	buf := make([]float32, n)
	fill = func() {
		for i := range buf {
			buf[i] = val(rank, i)
		}
	}
	switch op {
	case "allreduce":
		return fill, func(ctx context.Context) error { return c.Allreduce(ctx, buf, collective.Sum) },
			func() bool {
				for i, v := range buf {
					var want float32
					for r := range size {
						want += val(r, i)
					}
					if v != want {
						return false
					}
				}
				return true
			}
	case "reducescatter":
		blocks := collective.Blocks(n, size)
		off := 0
		for r := range rank {
			off += blocks[r]
		}
		out := make([]float32, blocks[rank])
		return fill, func(ctx context.Context) error { return c.ReduceScatter(ctx, buf, out, collective.Sum) },
			func() bool {
				for j, v := range out {
					var want float32
					for r := range size {
						want += val(r, off+j)
					}
					if v != want {
						return false
					}
				}
				return true
			}
	case "allgather":
		per := n / size
		in := make([]float32, per)
		out := make([]float32, per*size)
		counts := make([]int, size)
		for i := range counts {
			counts[i] = per
		}
		return func() {
				for i := range in {
					in[i] = val(rank, i)
				}
			}, func(ctx context.Context) error { return c.Allgather(ctx, in, out, counts) },
			func() bool {
				for r := range size {
					for i := range per {
						if out[r*per+i] != val(r, i) {
							return false
						}
					}
				}
				return true
			}
	case "broadcast":
		return fill, func(ctx context.Context) error { return c.Broadcast(ctx, buf, 0) },
			func() bool {
				for i, v := range buf {
					if v != val(0, i) {
						return false
					}
				}
				return true
			}
	default: // alltoall: each rank sends n/size floats to every rank
		per := n / size
		counts := make([]int, size)
		for i := range counts {
			counts[i] = per
		}
		in := make([]float32, per*size)
		out := make([]float32, per*size)
		return func() {
				for d := range size {
					for i := range per {
						in[d*per+i] = val(rank, d*per+i)
					}
				}
			}, func(ctx context.Context) error { return c.Alltoall(ctx, in, counts, out, counts) },
			func() bool {
				for s := range size {
					for i := range per {
						if out[s*per+i] != val(s, rank*per+i) {
							return false
						}
					}
				}
				return true
			}
	}
}

// ParseSizes reads message sizes per rank, e.g. "1MiB,4MiB,512KiB,100"
// (bytes, in whole float32s), as shoal bench allreduce's --sizes gives
// them.
func ParseSizes(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := int64(1)
		for _, u := range []struct {
			suffix string
			m      int64
		}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
			if strings.HasSuffix(f, u.suffix) {
				f, mult = strings.TrimSuffix(f, u.suffix), u.m
				break
			}
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 || n*mult%4 != 0 {
			return nil, fmt.Errorf("--sizes %q: want sizes like 1MiB,4MiB,16MiB (whole float32s)", s)
		}
		out = append(out, n*mult)
	}
	return out, nil
}
