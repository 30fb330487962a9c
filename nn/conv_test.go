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

// naiveIm2col is im2col's definition, element by element.
func naiveIm2col(x []float32, in, out shape, kh, kw, pad int) []float32 {
	hw := out.h * out.w
	col := make([]float32, in.c*kh*kw*hw)
	for c := range in.c {
		for i := range kh {
			for j := range kw {
				for oy := range out.h {
					for ox := range out.w {
						iy, ix := oy+i-pad, ox+j-pad
						if iy >= 0 && iy < in.h && ix >= 0 && ix < in.w {
							col[((c*kh+i)*kw+j)*hw+oy*out.w+ox] = x[(c*in.h+iy)*in.w+ix]
						}
					}
				}
			}
		}
	}
	return col
}

// TestIm2colCol2imMatchNaive checks im2col exactly, and col2im in float64
// against the definition, on the general path and on the one-copy path of
// convolutions whose output rows are as wide as their input's (including
// taps that fall entirely off narrow images, and outputs taller or shorter
// than the input).
func TestIm2colCol2imMatchNaive(t *testing.T) {
	tests := []struct {
		in          shape
		kh, kw, pad int
	}{
		{shape{2, 5, 7}, 3, 3, 1},   // same width and height
		{shape{1, 28, 28}, 3, 3, 1}, // the cnn's conv1
		{shape{3, 14, 14}, 3, 3, 1}, // conv2's size
		{shape{2, 6, 9}, 5, 5, 2},   // |dj| up to 2
		{shape{1, 4, 2}, 5, 5, 2},   // taps off a 2-wide image entirely
		{shape{2, 3, 1}, 3, 3, 1},   // 1-wide
		{shape{2, 4, 5}, 1, 3, 1},   // out.h = in.h+2
		{shape{2, 6, 5}, 3, 1, 0},   // out.h = in.h-2, no padding
		{shape{1, 1, 1}, 1, 1, 0},
		{shape{1, 4, 4}, 2, 3, 2}, // general path
		{shape{3, 6, 5}, 3, 2, 0}, // general path
	}
	for ti, tc := range tests {
		out := shape{1, tc.in.h + 2*tc.pad - tc.kh + 1, tc.in.w + 2*tc.pad - tc.kw + 1}
		t.Run(fmt.Sprintf("%v k %dx%d pad %d", tc.in, tc.kh, tc.kw, tc.pad), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ti), 9))
			x := randVec(rng, tc.in.size())
			want := naiveIm2col(x, tc.in, out, tc.kh, tc.kw, tc.pad)
			col := nanVec(len(want))
			im2col(col, x, tc.in, out, tc.kh, tc.kw, tc.pad)
			assert.Equal(t, want, col, "im2col")

			// col2im(c) = Σ over the entries of im2col's pattern: the
			// transpose, computed from the index map of naiveIm2col.
			c := randVec(rng, len(want))
			idx := make([]float32, len(x))
			for i := range idx {
				idx[i] = float32(i + 1)
			}
			where := naiveIm2col(idx, tc.in, out, tc.kh, tc.kw, tc.pad)
			wantDx := make([]float64, len(x))
			for r, k := range where {
				if k != 0 {
					wantDx[int(k)-1] += float64(c[r])
				}
			}
			dx := randVec(rng, len(x)) // col2im adds to dx
			dx0 := append([]float32(nil), dx...)
			col2im(dx, c, tc.in, out, tc.kh, tc.kw, tc.pad)
			for i := range dx {
				assert.InDelta(t, float64(dx0[i])+wantDx[i], float64(dx[i]), 1e-5, "dx[%d]", i)
			}
		})
	}
}

func TestSum32(t *testing.T) {
	for n := range 40 {
		v := make([]float32, n)
		var want float32
		for i := range v {
			v[i] = float32(i + 1)
			want += v[i]
		}
		assert.Equal(t, want, sum32(v), "n=%d", n) // small integers: exact
	}
}

// TestBranchFreeReLU checks the conditional-move ReLU loops against their
// definitions, NaN, infinities and signed zeros included.
func TestBranchFreeReLU(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	vals := []float32{-2, -0.5, negZero, 0, 1e-30, 0.5, 3, inf, -inf, nan}

	// addBias with relu: max(v+b, 0), NaN kept.
	y := append([]float32(nil), vals...)
	addBias(y, []float32{0}, 1, len(vals), true)
	for i, v := range vals {
		want := max(v, 0)
		if math.IsNaN(float64(want)) {
			assert.True(t, math.IsNaN(float64(y[i])), "relu(%v) = %v, want NaN", v, y[i])
			continue
		}
		assert.Equal(t, want, y[i], "relu(%v)", v)
	}

	// reluGrad: dy where y > 0, else 0 (NaN y included).
	dy := make([]float32, len(vals))
	for i := range dy {
		dy[i] = float32(i + 1)
	}
	dx := nanVec(len(vals))
	reluGrad(dx, dy, vals)
	for i, v := range vals {
		want := float32(0)
		if v > 0 {
			want = dy[i]
		}
		assert.Equal(t, want, dx[i], "reluGrad at y = %v", v)
	}
}
