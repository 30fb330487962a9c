package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// naiveConv is the direct float64 definition of conv2d's forward pass:
// y[s][o][oy][ox] = b[o] + Σ w[o][c][i][j]·x[s][c][oy+i-pad][ox+j-pad],
// with x zero outside the image. It also returns, per output, Σ|terms|,
// which bounds its float32 rounding.
func naiveConv(x, w, b []float32, n int, in shape, outC, kh, kw, pad int) (y, mag []float64) {
	oh, ow := in.h+2*pad-kh+1, in.w+2*pad-kw+1
	y = make([]float64, n*outC*oh*ow)
	mag = make([]float64, len(y))
	for s := range n {
		for o := range outC {
			for oy := range oh {
				for ox := range ow {
					sum, m := float64(b[o]), math.Abs(float64(b[o]))
					for c := range in.c {
						for i := range kh {
							for j := range kw {
								iy, ix := oy+i-pad, ox+j-pad
								if iy < 0 || iy >= in.h || ix < 0 || ix >= in.w {
									continue
								}
								t := float64(w[((o*in.c+c)*kh+i)*kw+j]) * float64(x[((s*in.c+c)*in.h+iy)*in.w+ix])
								sum += t
								m += math.Abs(t)
							}
						}
					}
					at := ((s*outC+o)*oh+oy)*ow + ox
					y[at], mag[at] = sum, m
				}
			}
		}
	}
	return y, mag
}

func TestConv2DForwardMatchesNaive(t *testing.T) {
	tests := []struct {
		in              shape
		outC, kh, kw, p int
		n               int
	}{
		{shape{1, 1, 1}, 1, 1, 1, 0, 1},
		{shape{1, 1, 1}, 2, 3, 3, 1, 2},  // only the centre tap lands
		{shape{3, 7, 5}, 4, 3, 3, 1, 3},  // odd sizes
		{shape{2, 9, 13}, 3, 5, 5, 2, 2}, // wide kernel
		{shape{4, 6, 11}, 5, 2, 3, 0, 2}, // non-square kernel, no padding
		{shape{1, 3, 3}, 2, 3, 3, 3, 1},  // padding larger than the kernel reach
		{shape{2, 5, 4}, 3, 5, 4, 0, 2},  // kernel as large as the image width
		{shape{3, 4, 4}, 2, 1, 1, 0, 3},  // 1×1: the direct path
		{shape{2, 4, 4}, 2, 1, 1, 1, 2},  // 1×1 with padding: im2col path
		{shape{1, 28, 28}, cnnConv1, 3, 3, 1, 2},
		{shape{cnnConv1, 14, 14}, cnnConv2, 3, 3, 1, 2},
	}
	for ti, tc := range tests {
		for _, relu := range []bool{false, true} {
			name := fmt.Sprintf("%v out %d k %dx%d pad %d n %d relu %v", tc.in, tc.outC, tc.kh, tc.kw, tc.p, tc.n, relu)
			t.Run(name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ti), 3))
				var lay Layout
				cv := newConv2D(NewCPU(), &lay, "conv", tc.in, tc.outC, tc.kh, tc.kw, tc.p)
				if relu {
					cv.fuseReLU()
				}
				p := randVec(rng, lay.Size())
				x := randVec(rng, tc.n*tc.in.size())
				y := cv.forward(p, x, tc.n)
				want, mag := naiveConv(x, cv.w.View(p), cv.b.View(p), tc.n, tc.in, tc.outC, tc.kh, tc.kw, tc.p)
				require.Len(t, y, len(want))
				require.Equal(t, shape{tc.outC, tc.in.h + 2*tc.p - tc.kh + 1, tc.in.w + 2*tc.p - tc.kw + 1}, cv.out())
				terms := float64(tc.in.c*tc.kh*tc.kw + 1)
				for i, w := range want {
					if relu {
						w = max(w, 0)
					}
					require.InDelta(t, w, float64(y[i]), terms*mag[i]*0x1p-24+1e-30, "y[%d]", i)
				}
			})
		}
	}
}

// TestConv2DBatchSizes runs batches of changing size through one layer and
// checks each against the layer run on its samples one at a time.
func TestConv2DBatchSizes(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	var lay Layout
	in := shape{2, 5, 6}
	cv := newConv2D(NewCPU(), &lay, "conv", in, 3, 3, 3, 1)
	one := newConv2D(NewCPU(), &Layout{}, "conv", in, 3, 3, 3, 1)
	p := randVec(rng, lay.Size())
	for _, n := range []int{4, 1, 7, 2} {
		x := randVec(rng, n*in.size())
		y := cv.forward(p, x, n)
		require.Len(t, y, n*cv.out().size())
		for s := range n {
			ys := one.forward(p, x[s*in.size():(s+1)*in.size()], 1)
			assert.Equal(t, ys, y[s*cv.out().size():(s+1)*cv.out().size()], "batch %d sample %d", n, s)
		}
	}
}

// naivePool is the direct definition of k×k, stride k max pooling (floor
// mode) and of its backward pass: each window's gradient goes to its first
// maximum.
func naivePool(x, dy []float32, n int, in shape, k int) (y, dx []float32) {
	oh, ow := in.h/k, in.w/k
	y = make([]float32, n*in.c*oh*ow)
	dx = make([]float32, len(x))
	for s := range n {
		for c := range in.c {
			for oy := range oh {
				for ox := range ow {
					best := -1
					for i := range k {
						for j := range k {
							at := ((s*in.c+c)*in.h+oy*k+i)*in.w + ox*k + j
							if best < 0 || x[at] > x[best] {
								best = at
							}
						}
					}
					o := ((s*in.c+c)*oh+oy)*ow + ox
					y[o] = x[best]
					dx[best] += dy[o]
				}
			}
		}
	}
	return y, dx
}

func TestMaxPoolMatchesNaive(t *testing.T) {
	tests := []struct {
		in shape
		k  int
		n  int
	}{
		{shape{1, 2, 2}, 2, 1},
		{shape{3, 7, 9}, 2, 2}, // odd: last row and column dropped
		{shape{2, 28, 28}, 2, 3},
		{shape{2, 10, 8}, 3, 2},
		{shape{1, 3, 5}, 3, 1},
		{shape{2, 4, 4}, 1, 2},
	}
	for ti, tc := range tests {
		t.Run(fmt.Sprintf("%v k %d n %d", tc.in, tc.k, tc.n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ti), 5))
			mp := newMaxPool2D(tc.in, tc.k)
			x := randVec(rng, tc.n*tc.in.size())
			// Ties, as after a ReLU: the first maximum wins.
			for i := range x {
				if x[i] < 0 {
					x[i] = 0
				}
			}
			dy := randVec(rng, tc.n*mp.out().size())
			wantY, wantDx := naivePool(x, dy, tc.n, tc.in, tc.k)
			y := mp.forward(nil, x, tc.n)
			assert.Equal(t, wantY, y)
			dx := mp.backward(nil, nil, x, y, dy, tc.n, true)
			assert.Equal(t, wantDx, dx)
		})
	}
}

func TestIm2colCol2imAdjoint(t *testing.T) {
	// col2im is the transpose of im2col: <im2col(x), c> = <x, col2im(c)>.
	rng := rand.New(rand.NewPCG(8, 8))
	for _, tc := range []struct {
		in          shape
		kh, kw, pad int
	}{
		{shape{2, 5, 7}, 3, 3, 1},
		{shape{1, 4, 4}, 2, 3, 2},
		{shape{3, 6, 5}, 3, 2, 0},
	} {
		out := shape{1, tc.in.h + 2*tc.pad - tc.kh + 1, tc.in.w + 2*tc.pad - tc.kw + 1}
		rows := tc.in.c * tc.kh * tc.kw
		x := randVec(rng, tc.in.size())
		c := randVec(rng, rows*out.h*out.w)
		col := make([]float32, len(c))
		im2col(col, x, tc.in, out, tc.kh, tc.kw, tc.pad)
		back := make([]float32, len(x))
		col2im(back, c, tc.in, out, tc.kh, tc.kw, tc.pad)
		var lhs, rhs float64
		for i := range c {
			lhs += float64(col[i]) * float64(c[i])
		}
		for i := range x {
			rhs += float64(x[i]) * float64(back[i])
		}
		assert.InDelta(t, lhs, rhs, 1e-4, "%v k %dx%d pad %d", tc.in, tc.kh, tc.kw, tc.pad)
	}
}
