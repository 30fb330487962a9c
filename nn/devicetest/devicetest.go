// Package devicetest is the conformance suite every nn.Device passes: each
// operation against a float64 (or bit-exact float32) reference written
// here, on awkward sizes (1, 255, 257, 4099) with its outputs poisoned with
// NaN first, and whole MLP and CNN steps against New's CPU model. nn runs
// it on the HostDevice; gpu runs it on CUDA where a GPU is found.
package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/wire"
	"github.com/stretchr/testify/require"
)

// Sizes are the awkward lengths the element-wise operations run on: one,
// and either side of the 256-thread block and of 4096.
var Sizes = []int{1, 255, 257, 4099}

// Run runs every check on dev.
func Run(t *testing.T, dev nn.Device) {
	t.Run("Gemm", func(t *testing.T) { testGemm(t, dev) })
	t.Run("BiasAct", func(t *testing.T) { testBiasAct(t, dev) })
	t.Run("BiasGrad", func(t *testing.T) { testBiasGrad(t, dev) })
	t.Run("ReLUBackward", func(t *testing.T) { testReLUBackward(t, dev) })
	t.Run("SoftmaxXent", func(t *testing.T) { testSoftmaxXent(t, dev) })
	t.Run("SGDMomentum", func(t *testing.T) { testSGDMomentum(t, dev) })
	t.Run("Adam", func(t *testing.T) { testAdam(t, dev) })
	t.Run("Im2Col", func(t *testing.T) { testIm2Col(t, dev) })
	t.Run("SwapAxes", func(t *testing.T) { testSwapAxes(t, dev) })
	t.Run("MaxPool", func(t *testing.T) { testMaxPool(t, dev) })
	t.Run("Half", func(t *testing.T) { testHalf(t, dev) })
	t.Run("Unscale", func(t *testing.T) { testUnscale(t, dev) })
	t.Run("Model", func(t *testing.T) { testModels(t, dev) })
	t.Run("TrainStep", func(t *testing.T) { testTrainStep(t, dev) })
	t.Run("KeptBatch", func(t *testing.T) { testKeptBatch(t, dev) })
	t.Run("MixedPrecision", func(t *testing.T) { testMixed(t, dev) })
	t.Run("LossScale", func(t *testing.T) { testLossScale(t, dev) })
	t.Run("Graph", func(t *testing.T) { testGraphs(t, dev) })
}

// buf is device memory with its length, freed at the end of the test.
type buf struct {
	m nn.Mem
	n int
}

func alloc(t *testing.T, dev nn.Device, n int) buf {
	t.Helper()
	m, err := dev.Alloc(4 * max(n, 1))
	require.NoError(t, err)
	t.Cleanup(func() { dev.Free(m) })
	return buf{m.Slice(0, n), n}
}

// put returns device memory holding v.
func put(t *testing.T, dev nn.Device, v []float32) buf {
	t.Helper()
	b := alloc(t, dev, len(v))
	dev.Upload(b.m, nn.F32Bytes(v))
	return b
}

func putI32(t *testing.T, dev nn.Device, v []int32) buf {
	t.Helper()
	b := alloc(t, dev, len(v))
	dev.Upload(b.m, nn.I32Bytes(v))
	return b
}

// poisoned returns device memory of n NaNs.
func poisoned(t *testing.T, dev nn.Device, n int) buf {
	t.Helper()
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return put(t, dev, v)
}

// get waits for the device and returns b's contents.
func get(t *testing.T, dev nn.Device, b buf) []float32 {
	t.Helper()
	v := make([]float32, b.n)
	dev.Download(nn.F32Bytes(v), b.m)
	require.NoError(t, dev.Sync())
	return v
}

func getI32(t *testing.T, dev nn.Device, b buf) []int32 {
	t.Helper()
	v := make([]int32, b.n)
	dev.Download(nn.I32Bytes(v), b.m)
	require.NoError(t, dev.Sync())
	return v
}

// randomBatch returns batch inputs of m, uniform in [0, 1), and labels.
func randomBatch(rng *rand.Rand, m nn.Model, batch int) ([]float32, []int32) {
	x := make([]float32, batch*m.InputSize())
	for i := range x {
		x[i] = rng.Float32()
	}
	return x, randomLabels(rng, m, batch)
}

// randomLabels returns n labels of m's classes.
func randomLabels(rng *rand.Rand, m nn.Model, n int) []int32 {
	labels := make([]int32, n)
	for i := range labels {
		labels[i] = int32(rng.IntN(m.Classes()))
	}
	return labels
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// near fails unless got[i] is within tol·(1+|want[i]|) of want[i] for
// every i, naming the first that is not.
func near(t *testing.T, what string, want []float64, got []float32, tol float64) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(g) || math.Abs(g-w) > tol*(1+math.Abs(w)) {
			t.Fatalf("%s: element %d of %d is %v, want %v (tolerance %g relative)", what, i, len(want), g, w, tol)
		}
	}
}

// same fails unless got and want are bit-identical (NaN payloads aside).
func same(t *testing.T, what string, want, got []float32) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
			t.Fatalf("%s: element %d of %d is %v (%#08x), want %v (%#08x)", what, i, len(want), got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// testGemm checks Gemm, and GemmHalf on operands rounded to float16 and
// bfloat16 (the reference multiplies the rounded values).
func testGemm(t *testing.T, dev nn.Device) {
	for _, enc := range []wire.Encoding{wire.Float32, wire.Float16, wire.BFloat16} {
		t.Run(enc.String(), func(t *testing.T) { testGemmIn(t, dev, enc) })
	}
}

// putIn returns device memory holding v in enc (float32, or halves from
// Mem.Halves), and v rounded to enc.
func putIn(t *testing.T, dev nn.Device, v []float32, enc wire.Encoding) (nn.Mem, []float32) {
	t.Helper()
	if enc == wire.Float32 {
		return put(t, dev, v).m, v
	}
	b := make([]byte, 2*len(v))
	enc.Put(b, v)
	m := alloc(t, dev, (len(v)+1)/2).m.Halves(0, len(v))
	dev.Upload(m, b)
	r := make([]float32, len(v))
	require.NoError(t, enc.Decode(r, b))
	return m, r
}

func testGemmIn(t *testing.T, dev nn.Device, enc wire.Encoding) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sz := range [][3]int{{1, 1, 1}, {255, 257, 1}, {257, 1, 255}, {4099, 3, 2}, {3, 4099, 5}, {65, 33, 257}} {
		m, n, k := sz[0], sz[1], sz[2]
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for _, beta := range []float32{0, 0.5} {
				tA, tB := tr[0], tr[1]
				name := fmt.Sprintf("%dx%dx%d tA=%v tB=%v beta=%v", m, n, k, tA, tB, beta)
				a, b := randVec(rng, m*k), randVec(rng, k*n)
				lda, ldb := k, n
				if tA {
					lda = m
				}
				if tB {
					ldb = k
				}
				c0 := randVec(rng, m*n)
				var dc buf
				if beta == 0 {
					dc = poisoned(t, dev, m*n) // beta 0 must not read C
				} else {
					dc = put(t, dev, c0)
				}
				da, a := putIn(t, dev, a, enc)
				db, b := putIn(t, dev, b, enc)
				if enc == wire.Float32 {
					dev.Gemm(tA, tB, m, n, k, 1.5, da, lda, db, ldb, beta, dc.m, n)
				} else {
					dev.GemmHalf(tA, tB, m, n, k, 1.5, da, lda, db, ldb, beta, dc.m, n, enc == wire.BFloat16)
				}
				want := make([]float64, m*n)
				for i := range m {
					for j := range n {
						var s float64
						for l := range k {
							av, bv := a[i*k+l], b[l*n+j]
							if tA {
								av = a[l*m+i]
							}
							if tB {
								bv = b[j*k+l]
							}
							s += float64(av) * float64(bv)
						}
						want[i*n+j] = 1.5 * s
						if beta != 0 {
							want[i*n+j] += float64(beta) * float64(c0[i*n+j])
						}
					}
				}
				// Float32 accumulation over k terms of unit size.
				near(t, name, want, get(t, dev, dc), 2e-6*float64(k+4))
			}
		}
	}
}

func testBiasAct(t *testing.T, dev nn.Device) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, sh := range [][3]int{{1, 1, 1}, {255, 1, 1}, {3, 257, 1}, {2, 3, 4099}, {4099, 10, 1}, {5, 7, 255}} {
		n, ch, hw := sh[0], sh[1], sh[2]
		for _, relu := range []bool{false, true} {
			y, b := randVec(rng, n*ch*hw), randVec(rng, ch)
			y[0] = float32(math.NaN()) // a NaN stays a NaN, ReLU or not
			dy := put(t, dev, y)
			dev.BiasAct(dy.m, put(t, dev, b).m, n, ch, hw, relu)
			got := get(t, dev, dy)
			require.True(t, math.IsNaN(float64(got[0])), "NaN through BiasAct (relu %v) became %v", relu, got[0])
			want := make([]float64, len(y))
			for i := range y {
				v := float64(y[i] + b[(i/hw)%ch])
				if relu && v < 0 {
					v = 0
				}
				want[i] = v
			}
			near(t, fmt.Sprintf("n=%d ch=%d hw=%d relu=%v", n, ch, hw, relu), want[1:], got[1:], 0)
		}
	}
}

func testBiasGrad(t *testing.T, dev nn.Device) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, sh := range [][3]int{{1, 1, 1}, {255, 1, 1}, {257, 3, 1}, {2, 3, 4099}, {4099, 10, 1}, {64, 16, 196}} {
		n, ch, hw := sh[0], sh[1], sh[2]
		dy := randVec(rng, n*ch*hw)
		db := poisoned(t, dev, ch)
		dev.BiasGrad(db.m, put(t, dev, dy).m, nn.Mem{}, n, ch, hw)
		want := make([]float64, ch)
		for i, v := range dy {
			want[(i/hw)%ch] += float64(v)
		}
		name := fmt.Sprintf("n=%d ch=%d hw=%d", n, ch, hw)
		near(t, name, want, get(t, dev, db), 1e-6*float64(n*hw+4))

		// Fused with the ReLU's backward: what ReLUBackward then
		// BiasGrad give, bit for bit, dy masked in place.
		y := randVec(rng, n*ch*hw)
		y[0] = 0
		dy1, dy2, db1, db2 := put(t, dev, dy), put(t, dev, dy), poisoned(t, dev, ch), poisoned(t, dev, ch)
		yd := put(t, dev, y)
		dev.ReLUBackward(dy1.m, yd.m, n*ch*hw)
		dev.BiasGrad(db1.m, dy1.m, nn.Mem{}, n, ch, hw)
		dev.BiasGrad(db2.m, dy2.m, yd.m, n, ch, hw)
		same(t, name+" fused: dy", get(t, dev, dy1), get(t, dev, dy2))
		same(t, name+" fused: db", get(t, dev, db1), get(t, dev, db2))
	}
}

func testReLUBackward(t *testing.T, dev nn.Device) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range Sizes {
		y, g := randVec(rng, n), randVec(rng, n)
		y[0] = 0 // the boundary: no gradient
		dg := put(t, dev, g)
		dev.ReLUBackward(dg.m, put(t, dev, y).m, n)
		want := make([]float32, n)
		for i := range y {
			if y[i] > 0 {
				want[i] = g[i]
			}
		}
		same(t, fmt.Sprintf("n=%d", n), want, get(t, dev, dg))
	}
}

func testSoftmaxXent(t *testing.T, dev nn.Device) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, sh := range [][2]int{{1, 1}, {1, 10}, {255, 10}, {257, 3}, {3, 255}, {2, 257}, {1, 4099}, {4099, 10}} {
		rows, classes := sh[0], sh[1]
		z := randVec(rng, rows*classes)
		for i := range z {
			z[i] *= 4
		}
		if classes > 2 { // a tie for the largest: the first wins
			z[1], z[2] = 50, 50
		}
		labels := make([]int32, rows)
		for r := range labels {
			labels[r] = int32(rng.IntN(classes))
		}
		labels[0] = min(2, int32(classes-1))
		scale := float32(1 / float64(rows))
		for _, grad := range []bool{true, false} {
			name := fmt.Sprintf("rows=%d classes=%d grad=%v", rows, classes, grad)
			loss, correct := poisoned(t, dev, rows), putI32(t, dev, make([]int32, rows))
			for i := range rows {
				dev.Upload(correct.m.Slice(i, 1), nn.I32Bytes([]int32{-7}))
			}
			var dz buf
			if grad {
				dz = poisoned(t, dev, rows*classes)
			}
			dev.SoftmaxXent(put(t, dev, z).m, putI32(t, dev, labels).m, dz.m, loss.m, correct.m, rows, classes, scale)
			wantLoss := make([]float64, rows)
			wantDz := make([]float64, rows*classes)
			wantCorrect := make([]int32, rows)
			for r := range rows {
				row := z[r*classes : (r+1)*classes]
				arg := 0
				for j, v := range row {
					if v > row[arg] {
						arg = j
					}
				}
				if arg == int(labels[r]) {
					wantCorrect[r] = 1
				}
				var sum float64
				for _, v := range row {
					sum += math.Exp(float64(v - row[arg]))
				}
				lse := float64(row[arg]) + math.Log(sum)
				wantLoss[r] = lse - float64(row[labels[r]])
				for j, v := range row {
					q := math.Exp(float64(v) - lse)
					if j == int(labels[r]) {
						q--
					}
					wantDz[r*classes+j] = q * float64(scale)
				}
			}
			near(t, name+" loss", wantLoss, get(t, dev, loss), 1e-5)
			require.Equal(t, wantCorrect, getI32(t, dev, correct), name+" correct")
			if grad {
				near(t, name+" dz", wantDz, get(t, dev, dz), 1e-5)
			}
		}
	}
}

func testSGDMomentum(t *testing.T, dev nn.Device) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range Sizes {
		for _, c := range []struct {
			wd       float32
			nesterov bool
		}{{0, false}, {1e-4, false}, {1e-4, true}} {
			p, g, b := randVec(rng, n), randVec(rng, n), randVec(rng, n)
			dp, db := put(t, dev, p), put(t, dev, b)
			const lr, mu = 0.01, 0.9
			dev.SGDMomentum(dp.m, db.m, put(t, dev, g).m, n, lr, mu, c.wd, c.nesterov)
			// The reference, written out: every product rounded to
			// float32 before the sum, as optim does.
			for i := range p {
				gi := g[i]
				if c.wd != 0 {
					gi += float32(c.wd * p[i])
				}
				bi := float32(mu*b[i]) + gi
				b[i] = bi
				if c.nesterov {
					gi += float32(mu * bi)
				} else {
					gi = bi
				}
				p[i] -= float32(lr * gi)
			}
			name := fmt.Sprintf("n=%d wd=%v nesterov=%v", n, c.wd, c.nesterov)
			same(t, name+" params", p, get(t, dev, dp))
			same(t, name+" buffer", b, get(t, dev, db))
		}
	}
}

// adamTol is testAdam's relative tolerance: 16 float32 ulps (2⁻²⁰). The
// kernel rounds every operation as optim does, so it should be exact; the
// test asks only what float32 arithmetic in another order would keep.
const adamTol = 1.0 / (1 << 20)

// testAdam runs three Adam (AdamW) steps on the device, with the scalars
// optim.Optimizer.Advance gives, against optim's CPU Adam stepping a copy.
func testAdam(t *testing.T, dev nn.Device) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, n := range Sizes {
		for _, c := range []struct {
			name string
			cfg  optim.Config
		}{
			{"adam", optim.Config{Algorithm: optim.Adam, LR: 1e-3, Beta1: 0.9, Beta2: 0.999}},
			{"adam wd", optim.Config{Algorithm: optim.Adam, LR: 1e-3, Beta1: 0.9, Beta2: 0.999, WeightDecay: 1e-2}},
			{"adamw wd", optim.Config{Algorithm: optim.AdamW, LR: 1e-2, Beta1: 0.9, Beta2: 0.99, WeightDecay: 1e-1}},
			{"adam beta1 0.3", optim.Config{Algorithm: optim.Adam, LR: 1e-2, Beta1: 0.3, Beta2: 0.9, Epsilon: 1e-6}}, // the lerp's other branch
		} {
			name := fmt.Sprintf("%s n=%d", c.name, n)
			ref, err := optim.New(c.cfg, n)
			require.NoError(t, err, name)
			steps, err := optim.New(c.cfg, n)
			require.NoError(t, err, name)
			p := randVec(rng, n)
			dp := put(t, dev, p)
			dm, dv := alloc(t, dev, n), alloc(t, dev, n)
			dev.Zero(dm.m, n)
			dev.Zero(dv.m, n)
			for range 3 {
				g := randVec(rng, n)
				require.NoError(t, ref.Step(p, g), name)
				s, err := steps.Advance()
				require.NoError(t, err, name)
				require.Equal(t, c.cfg.Algorithm, s.Algorithm, name)
				dev.Adam(dp.m, dm.m, dv.m, put(t, dev, g).m, n, s.Adam)
			}
			slots := ref.LiveSlots()
			near(t, name+" params", widen(p), get(t, dev, dp), adamTol)
			near(t, name+" exp_avg", widen(slots[optim.SlotExpAvg]), get(t, dev, dm), adamTol)
			near(t, name+" exp_avg_sq", widen(slots[optim.SlotExpAvgSq]), get(t, dev, dv), adamTol)
		}
	}
}

// widen returns v in float64.
func widen(v []float32) []float64 {
	w := make([]float64, len(v))
	for i, x := range v {
		w[i] = float64(x)
	}
	return w
}

func testIm2Col(t *testing.T, dev nn.Device) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, s := range [][7]int{{1, 1, 1, 1, 1, 1, 0}, {2, 3, 5, 7, 3, 3, 1}, {3, 2, 16, 17, 3, 3, 1}, {1, 1, 4, 4, 5, 5, 2}, {5, 16, 14, 14, 3, 3, 1}, {257, 1, 3, 3, 3, 3, 1}, {2, 1, 9, 3, 1, 3, 0}} {
		n, c, h, w, kh, kw, pad := s[0], s[1], s[2], s[3], s[4], s[5], s[6]
		oh, ow := h+2*pad-kh+1, w+2*pad-kw+1
		k, cols, isz := c*kh*kw, n*oh*ow, c*h*w
		name := fmt.Sprintf("n=%d c=%d %dx%d k=%dx%d pad=%d", n, c, h, w, kh, kw, pad)
		x := randVec(rng, n*isz)
		col := poisoned(t, dev, k*cols)
		dev.Im2Col(put(t, dev, x).m, col.m, n, c, h, w, kh, kw, pad, oh, ow)
		wantCol := make([]float64, k*cols)
		dcol := randVec(rng, len(wantCol))
		wantDx := make([]float64, n*isz)
		for si := range n {
			for ci := range c {
				for i := range kh {
					for j := range kw {
						for oy := range oh {
							for ox := range ow {
								at := ((ci*kh+i)*kw+j)*cols + si*oh*ow + oy*ow + ox
								iy, ix := oy+i-pad, ox+j-pad
								if iy >= 0 && iy < h && ix >= 0 && ix < w {
									wantCol[at] = float64(x[si*isz+ci*h*w+iy*w+ix])
									wantDx[si*isz+ci*h*w+iy*w+ix] += float64(dcol[at])
								}
							}
						}
					}
				}
			}
		}
		near(t, name+" im2col", wantCol, get(t, dev, col), 0)
		dx := poisoned(t, dev, n*isz)
		dev.Col2Im(put(t, dev, dcol).m, dx.m, n, c, h, w, kh, kw, pad, oh, ow)
		near(t, name+" col2im", wantDx, get(t, dev, dx), 1e-6*float64(kh*kw))
	}
}

func testSwapAxes(t *testing.T, dev nn.Device) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, s := range [][3]int{{1, 1, 1}, {1, 7, 3}, {5, 1, 9}, {3, 4, 5}, {32, 17, 196}, {2, 257, 1}} {
		a, b, c := s[0], s[1], s[2]
		src := randVec(rng, a*b*c)
		dst := poisoned(t, dev, a*b*c)
		dev.SwapAxes(dst.m, put(t, dev, src).m, a, b, c)
		want := make([]float64, len(src))
		for i := range a {
			for j := range b {
				for k := range c {
					want[(j*a+i)*c+k] = float64(src[(i*b+j)*c+k])
				}
			}
		}
		near(t, fmt.Sprintf("%dx%dx%d", a, b, c), want, get(t, dev, dst), 0)
	}
}

func testMaxPool(t *testing.T, dev nn.Device) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, s := range [][5]int{{1, 1, 1, 1, 1}, {2, 3, 5, 7, 2}, {3, 2, 16, 16, 2}, {1, 1, 9, 9, 3}, {257, 1, 2, 2, 2}, {1, 255, 4, 4, 2}} {
		n, c, h, w, k := s[0], s[1], s[2], s[3], s[4]
		oh, ow := h/k, w/k
		name := fmt.Sprintf("n=%d c=%d %dx%d k=%d", n, c, h, w, k)
		x := make([]float32, n*c*h*w)
		for i := range x {
			x[i] = float32(rng.IntN(4)) // small integers: ties
		}
		y, arg := poisoned(t, dev, n*c*oh*ow), putI32(t, dev, make([]int32, n*c*oh*ow))
		dev.MaxPoolForward(put(t, dev, x).m, y.m, arg.m, n, c, h, w, k)
		wantY := make([]float64, n*c*oh*ow)
		wantArg := make([]int32, len(wantY))
		dy := randVec(rng, len(wantY))
		wantDx := make([]float64, len(x))
		o := 0
		for si := range n {
			for ci := range c {
				for oy := range oh {
					for ox := range ow {
						best := ci*h*w + oy*k*w + ox*k
						for i := range k {
							for j := range k {
								if at := ci*h*w + (oy*k+i)*w + ox*k + j; x[si*c*h*w+at] > x[si*c*h*w+best] {
									best = at
								}
							}
						}
						wantY[o], wantArg[o] = float64(x[si*c*h*w+best]), int32(best)
						wantDx[si*c*h*w+best] += float64(dy[o])
						o++
					}
				}
			}
		}
		near(t, name+" y", wantY, get(t, dev, y), 0)
		require.Equal(t, wantArg, getI32(t, dev, arg), name+" arg")
		dx := poisoned(t, dev, len(x))
		dev.MaxPoolBackward(put(t, dev, dy).m, arg.m, dx.m, n, c, h, w, k)
		near(t, name+" dx", wantDx, get(t, dev, dx), 0)
	}
}

func testHalf(t *testing.T, dev nn.Device) {
	rng := rand.New(rand.NewPCG(17, 18))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65519, 65520, 1e9, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 6e-8, 3e-8, 2.98e-8, 1e-45, 5.96e-8, 0.1, 1.0009765625, 1.00048828125, 3.3895314e38}
	for _, n := range Sizes {
		v := randVec(rng, n)
		for i := range v {
			v[i] *= float32(math.Pow(2, float64(rng.IntN(60)-30)))
		}
		copy(v, special)
		src := put(t, dev, v)
		for _, enc := range []wire.Encoding{wire.Float16, wire.BFloat16} {
			name := fmt.Sprintf("n=%d %s", n, enc)
			bf := enc == wire.BFloat16
			h := poisoned(t, dev, (n+1)/2)
			dev.ToHalf(h.m, src.m, n, bf)
			got := make([]uint16, n)
			dev.Download(nn.U16Bytes(got), h.m)
			require.NoError(t, dev.Sync())
			want := make([]byte, 2*n)
			enc.Put(want, v)
			for i := range n {
				w := uint16(want[2*i]) | uint16(want[2*i+1])<<8
				if got[i] != w {
					t.Fatalf("%s: element %d (%v) is %#04x, want %#04x", name, i, v[i], got[i], w)
				}
			}
			back := poisoned(t, dev, n)
			dev.FromHalf(back.m, h.m, n, bf)
			wantBack := make([]float32, n)
			require.NoError(t, enc.Decode(wantBack, want))
			same(t, name+" back", wantBack, get(t, dev, back))
		}
	}
}

// testModels checks whole steps against New's CPU model: the same loss,
// correct count and gradients within 1e-4, batches growing and shrinking.
func testModels(t *testing.T, dev nn.Device) {
	for _, spec := range []nn.Spec{{Arch: "mlp", Hidden: []int{257, 31}}, {Arch: "mlp"}, {Arch: "cnn"}} {
		t.Run(fmt.Sprintf("%s%v", spec.Arch, spec.Hidden), func(t *testing.T) {
			cpu, err := nn.New(spec, nn.NewCPU())
			require.NoError(t, err)
			dm, err := nn.NewOnDevice(spec, dev)
			require.NoError(t, err)
			defer dm.Close()
			size := cpu.Layout().Size()
			params := make([]float32, size)
			cpu.Init(params, 7)
			rng := rand.New(rand.NewPCG(19, 20))
			for _, batch := range []int{5, 1, 17} {
				x, labels := randomBatch(rng, cpu, batch)
				wantG, gotG := make([]float32, size), make([]float32, size)
				for i := range gotG {
					gotG[i] = float32(math.NaN())
				}
				wantLoss, wantCorrect := cpu.ForwardBackward(params, wantG, x, labels)
				gotLoss, gotCorrect := dm.ForwardBackward(params, gotG, x, labels)
				require.NoError(t, dm.Err())
				name := fmt.Sprintf("batch %d", batch)
				require.InDelta(t, wantLoss, gotLoss, 1e-4*(1+math.Abs(wantLoss)), name+" loss")
				require.Equal(t, wantCorrect, gotCorrect, name+" correct")
				scale := 0.0
				for _, g := range wantG {
					scale = max(scale, math.Abs(float64(g)))
				}
				for i := range wantG {
					if d := math.Abs(float64(gotG[i] - wantG[i])); !(d <= 1e-4*scale) {
						tensor := ""
						for _, tt := range cpu.Layout().Tensors {
							if i >= tt.Offset && i < tt.Offset+tt.Size() {
								tensor = tt.Name
							}
						}
						t.Fatalf("%s: gradient %d (%s) is %v, want %v (largest gradient %v)", name, i, tensor, gotG[i], wantG[i], scale)
					}
				}
				wantSum, wantC := cpu.Evaluate(params, x, labels)
				gotSum, gotC := dm.Evaluate(params, x, labels)
				require.InDelta(t, wantSum, gotSum, 1e-4*(1+math.Abs(wantSum)), name+" evaluate")
				require.Equal(t, wantC, gotC, name+" evaluate correct")
				// The next batch with other weights.
				for i := range params {
					params[i] -= 0.1 * wantG[i]
				}
			}
		})
	}
}

// testTrainStep checks the resident step (Load, TrainStep, Store) against
// New's CPU model and optim.StepMomentum, step for step: the same losses
// and, after three steps, the same weights within 1e-4.
func testTrainStep(t *testing.T, dev nn.Device) {
	const lr, mu = 0.05, 0.9
	for _, spec := range []nn.Spec{{Arch: "mlp", Hidden: []int{257, 31}}, {Arch: "cnn"}} {
		t.Run(spec.Arch, func(t *testing.T) {
			cpu, err := nn.New(spec, nn.NewCPU())
			require.NoError(t, err)
			dm, err := nn.NewOnDevice(spec, dev)
			require.NoError(t, err)
			defer dm.Close()
			require.Panics(t, func() { dm.TrainStep(nil, nil, lr, mu) }, "TrainStep before Load")
			size := cpu.Layout().Size()
			want := make([]float32, size)
			cpu.Init(want, 3)
			require.NoError(t, dm.Load(want))
			grads, mom := make([]float32, size), make([]float32, size)
			rng := rand.New(rand.NewPCG(5, 6))
			for step, batch := range []int{9, 1, 33} {
				x := randVec(rng, batch*cpu.InputSize())
				labels := randomLabels(rng, cpu, batch)
				wantLoss, wantCorrect := cpu.ForwardBackward(want, grads, x, labels)
				optim.StepMomentum(want, grads, mom, lr, 0, mu, false)
				gotLoss, gotCorrect := dm.TrainStep(x, labels, lr, mu)
				require.NoError(t, dm.Err())
				require.InDelta(t, wantLoss, gotLoss, 1e-4*(1+math.Abs(wantLoss)), "step %d loss", step)
				require.Equal(t, wantCorrect, gotCorrect, "step %d correct", step)
			}
			got := make([]float32, size)
			for i := range got {
				got[i] = float32(math.NaN())
			}
			require.NoError(t, dm.Store(got))
			scale := 0.0
			for _, w := range want {
				scale = max(scale, math.Abs(float64(w)))
			}
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); !(d <= 1e-4*scale) {
					t.Fatalf("weight %d after 3 steps: %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
}

// testKeptBatch checks TrainKept against TrainStep on the same batch:
// the same kernels in the same order, so the same bits, captured as a
// graph or not.
func testKeptBatch(t *testing.T, dev nn.Device) {
	const lr, mu = 0.05, 0.9
	for _, spec := range []nn.Spec{{Arch: "mlp", Hidden: []int{257, 31}}, {Arch: "cnn"}} {
		t.Run(spec.Arch, func(t *testing.T) {
			up, err := nn.NewOnDevice(spec, dev)
			require.NoError(t, err)
			defer up.Close()
			kept, err := nn.NewOnDevice(spec, dev)
			require.NoError(t, err)
			defer kept.Close()
			size := up.Layout().Size()
			w := make([]float32, size)
			up.Init(w, 4)
			require.NoError(t, up.Load(w))
			require.NoError(t, kept.Load(w))
			rng := rand.New(rand.NewPCG(7, 8))
			const batch = 17
			x := randVec(rng, batch*up.InputSize())
			labels := randomLabels(rng, up, batch)
			require.Panics(t, func() { kept.TrainKept(lr, mu) }, "TrainKept before KeepBatch")
			require.Error(t, kept.KeepBatch(x[1:], labels), "a batch whose inputs do not match its labels")
			require.NoError(t, kept.KeepBatch(x, labels))
			for step := range 4 { // the third and fourth replay a graph where the device has them
				wantLoss, wantCorrect := up.TrainStep(x, labels, lr, mu)
				gotLoss, gotCorrect := kept.TrainKept(lr, mu)
				require.NoError(t, kept.Err())
				require.Equal(t, wantLoss, gotLoss, "step %d loss", step)
				require.Equal(t, wantCorrect, gotCorrect, "step %d correct", step)
			}
			want, got := make([]float32, size), make([]float32, size)
			require.NoError(t, up.Store(want))
			require.NoError(t, kept.Store(got))
			same(t, "weights after 4 steps", want, got)
			// Another batch replaces the kept one.
			kept.TrainStep(x, labels, lr, mu)
			require.Panics(t, func() { kept.TrainKept(lr, mu) }, "TrainKept after TrainStep")
		})
	}
}

func testUnscale(t *testing.T, dev nn.Device) {
	rng := rand.New(rand.NewPCG(21, 22))
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, n := range Sizes {
		for _, tc := range []struct {
			name  string
			bad   float32 // put last, when not 0
			s     float32
			flag  int32 // found before the call
			found int32
		}{
			{"finite", 0, 1.0 / 1024, 0, 0},
			{"finite, found already set", 0, 0.5, 1, 1},
			{"infinity", inf, 1.0 / 1024, 0, 1},
			{"NaN", nan, 1.0 / 1024, 0, 1},
			{"overflow in the product", 3e38, 4, 0, 1},
		} {
			name := fmt.Sprintf("n=%d %s", n, tc.name)
			g := randVec(rng, n)
			if tc.bad != 0 {
				g[n-1] = tc.bad
			}
			dg, found := put(t, dev, g), putI32(t, dev, []int32{tc.flag})
			dev.Unscale(dg.m, n, tc.s, found.m)
			want := make([]float32, n)
			for i, v := range g {
				want[i] = v * tc.s
			}
			same(t, name, want, get(t, dev, dg))
			require.Equal(t, []int32{tc.found}, getI32(t, dev, found), name+" found")
		}
	}
}

// mixedSpecs are the models the mixed-precision checks train.
var mixedSpecs = []nn.Spec{{Arch: "mlp", Hidden: []int{257, 31}}, {Arch: "cnn"}}

// onDevice returns spec's model on dev computing in p.
func onDevice(t *testing.T, spec nn.Spec, dev nn.Device, p nn.Precision) *nn.DeviceModel {
	t.Helper()
	m, err := nn.NewOnDevice(spec, dev)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	require.NoError(t, m.SetPrecision(p))
	require.Equal(t, p, m.Precision())
	return m
}

// maxAbs is the largest magnitude in v.
func maxAbs(v []float32) float64 {
	var m float64
	for _, x := range v {
		m = max(m, math.Abs(float64(x)))
	}
	return m
}

// close fails unless got is within tol·max|want| of want, element by element.
func close(t *testing.T, what string, want, got []float32, tol float64) {
	t.Helper()
	scale := maxAbs(want)
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); !(d <= tol*scale) {
			t.Fatalf("%s: element %d is %v, want %v (tolerance %g of the largest, %v)", what, i, got[i], want[i], tol, scale)
		}
	}
}

// relDist is ‖got − want‖ / ‖want‖.
func relDist(want, got []float32) float64 {
	var d, w float64
	for i := range want {
		d += (float64(got[i]) - float64(want[i])) * (float64(got[i]) - float64(want[i]))
		w += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(d / w)
}

// mixedTol is how far a half-precision step may stray from the float32
// CPU model and from the HostDevice reference in the same precision.
type mixedTol struct {
	// Against float32: the loss (relative), and the relative distance of
	// the gradient vectors. Every GEMM operand is rounded to 8 (bf16) or
	// 11 (fp16) significant bits; through three layers of backward the
	// first layer's gradient moves by 3-4% in bf16 and 0.05% in fp16, and
	// where a rounding moves a pre-activation across a ReLU's kink a
	// whole row of it changes (2% of the vector in one fp16 case seen),
	// so elements are not compared.
	loss, grads float64
	// Against the reference, element by element: the same roundings, but a
	// float32 sum in another order can round an operand the other way.
	ref float64
}

func mixedTolerance(p nn.Precision) mixedTol {
	if p == nn.BF16 {
		return mixedTol{loss: 5e-3, grads: 0.1, ref: 2e-2}
	}
	return mixedTol{loss: 1e-3, grads: 0.05, ref: 3e-3}
}

// testMixed checks BF16 and FP16 steps against the HostDevice reference
// in the same precision and against the float32 CPU model: ForwardBackward,
// Evaluate, and three resident steps.
func testMixed(t *testing.T, dev nn.Device) {
	for _, p := range []nn.Precision{nn.BF16, nn.FP16} {
		tol := mixedTolerance(p)
		for _, spec := range mixedSpecs {
			t.Run(fmt.Sprintf("%s %s%v", p, spec.Arch, spec.Hidden), func(t *testing.T) {
				cpu, err := nn.New(spec, nn.NewCPU())
				require.NoError(t, err)
				ref, dm := onDevice(t, spec, nn.NewHostDevice(nil), p), onDevice(t, spec, dev, p)
				size := cpu.Layout().Size()
				params := make([]float32, size)
				cpu.Init(params, 11)
				rng := rand.New(rand.NewPCG(23, 24))
				for _, batch := range []int{5, 1, 17} {
					x, labels := randomBatch(rng, cpu, batch)
					name := fmt.Sprintf("batch %d", batch)
					want, wantRef, got := make([]float32, size), make([]float32, size), make([]float32, size)
					for i := range got {
						got[i] = float32(math.NaN())
					}
					wantLoss, _ := cpu.ForwardBackward(params, want, x, labels)
					refLoss, refCorrect := ref.ForwardBackward(params, wantRef, x, labels)
					gotLoss, gotCorrect := dm.ForwardBackward(params, got, x, labels)
					require.NoError(t, dm.Err())
					require.InDelta(t, wantLoss, gotLoss, tol.loss*(1+math.Abs(wantLoss)), name+" loss against fp32")
					require.InDelta(t, refLoss, gotLoss, tol.ref*(1+math.Abs(refLoss)), name+" loss")
					require.InDelta(t, refCorrect, gotCorrect, 1, name+" correct")
					require.Less(t, relDist(want, got), tol.grads, name+" gradient against fp32")
					close(t, name+" gradient", wantRef, got, tol.ref)
					refSum, _ := ref.Evaluate(params, x, labels)
					gotSum, _ := dm.Evaluate(params, x, labels)
					require.InDelta(t, refSum, gotSum, tol.ref*(1+math.Abs(refSum)), name+" evaluate")
					for i := range params {
						params[i] -= 0.1 * want[i]
					}
				}
				// The resident step: three steps, the same weights.
				const lr, mu = 0.05, 0.9
				require.NoError(t, ref.Load(params))
				require.NoError(t, dm.Load(params))
				for step, batch := range []int{9, 1, 33} {
					x, labels := randomBatch(rng, cpu, batch)
					refLoss, _ := ref.TrainStep(x, labels, lr, mu)
					gotLoss, _ := dm.TrainStep(x, labels, lr, mu)
					require.NoError(t, dm.Err())
					require.InDelta(t, refLoss, gotLoss, tol.ref*(1+math.Abs(refLoss)), "resident step %d loss", step)
				}
				want, got := make([]float32, size), make([]float32, size)
				require.NoError(t, ref.Store(want))
				require.NoError(t, dm.Store(got))
				close(t, "weights after 3 resident steps", want, got, tol.ref)
			})
		}
	}
}

// testLossScale drives FP16's loss scaling into an overflow it recovers
// from and one it cannot. Both use an MLP 784-4-10 with weights set by
// hand and one sample, so the scaled output gradient is as large as it
// gets: (softmax − one-hot)·scale.
func testLossScale(t *testing.T, dev nn.Device) {
	spec := nn.Spec{Arch: "mlp", Hidden: []int{4}}
	cpu, err := nn.New(spec, nn.NewCPU())
	require.NoError(t, err)
	ts := cpu.Layout().Tensors // fc1.weight, fc1.bias, fc2.weight, fc2.bias
	require.Len(t, ts, 4)
	size := cpu.Layout().Size()
	x := make([]float32, cpu.InputSize())
	for i := range x {
		x[i] = 1
	}
	labels := []int32{1}

	t.Run("recovers", func(t *testing.T) {
		// Zero weights and an output bias that makes class 0 certain: the
		// gradient of the logit of class 1 is −1, −65,536 at the first
		// scale, which float16 (largest 65,504) cannot hold. Taken again
		// at 2^15 the step is exact.
		dm := onDevice(t, spec, dev, nn.FP16)
		params := make([]float32, size)
		params[ts[3].Offset] = 30
		want, got := make([]float32, size), make([]float32, size)
		wantLoss, _ := cpu.ForwardBackward(params, want, x, labels)
		gotLoss, _ := dm.ForwardBackward(params, got, x, labels)
		require.NoError(t, dm.Err())
		scale, overflows := dm.LossScale()
		require.Equal(t, float32(1<<15), scale, "the scale after one overflow")
		require.Equal(t, 1, overflows)
		require.InDelta(t, wantLoss, gotLoss, 1e-4*(1+math.Abs(wantLoss)))
		close(t, "gradient", want, got, 1e-4)
		// The next step starts from 2^15 and does not overflow.
		gotLoss, _ = dm.ForwardBackward(params, got, x, labels)
		require.InDelta(t, wantLoss, gotLoss, 1e-4*(1+math.Abs(wantLoss)))
		scale, overflows = dm.LossScale()
		require.Equal(t, float32(1<<15), scale)
		require.Equal(t, 1, overflows)
	})

	t.Run("cannot recover", func(t *testing.T) {
		// Hidden units of 0.784 and output weights of ±60,000 for classes 0
		// and 1: the gradient reaching the hidden layer is 120,000 even at
		// a scale of 1, past float16's range, so no scale helps.
		dm := onDevice(t, spec, dev, nn.FP16)
		params := make([]float32, size)
		for i := range ts[0].Size() {
			params[ts[0].Offset+i] = 1e-3
		}
		for h := range 4 {
			params[ts[2].Offset+h] = 6e4    // class 0
			params[ts[2].Offset+4+h] = -6e4 // class 1
		}
		grads := make([]float32, size)
		loss, _ := dm.ForwardBackward(params, grads, x, labels)
		require.True(t, math.IsNaN(loss), "loss %v", loss)
		require.ErrorIs(t, dm.Err(), nn.ErrOverflow)
		scale, overflows := dm.LossScale()
		require.Equal(t, float32(1), scale)
		require.Equal(t, 17, overflows, "2^16 down to 1, each overflowing")
		// BF16 has float32's range: the same step is fine there.
		bf := onDevice(t, spec, dev, nn.BF16)
		loss, _ = bf.ForwardBackward(params, grads, x, labels)
		require.NoError(t, bf.Err())
		require.False(t, math.IsNaN(loss) || math.IsInf(loss, 0), "bf16 loss %v", loss)
	})
}
