package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Finite-difference gradient checks.
//
// Every function checked here is computed in float32 and summed in
// float64. Central differences with a step of h = 1e-2 (the exact float32
// step is used in the quotient, not h) keep the float32 rounding of the
// function, a few 1e-7 relative, below about 1e-4 in the quotient, and the
// functions are piecewise linear (layers) or smooth with small third
// derivatives (the loss), so the truncation error is smaller still. Where a
// perturbation would move a ReLU across zero or change a pool's argmax the
// quotient means nothing; kinks detects that, and the check retries with
// smaller steps (noisier, still well inside the tolerances) and skips the
// coordinate if even the smallest crosses (at most a quarter may be).

// fdSteps are the steps tried, largest first, until one leaves the kink
// state unchanged.
var fdSteps = []float64{1e-2, 2.5e-3, 6.25e-4}

// kinks returns the discrete state that picks the linear piece the layers
// are on: the sign pattern of every ReLU output and every pool's argmax.
func kinks(ls ...layer) []int32 {
	var k []int32
	mask := func(y []float32) {
		for _, v := range y {
			if v > 0 {
				k = append(k, 1)
			} else {
				k = append(k, 0)
			}
		}
	}
	for _, l := range ls {
		switch l := l.(type) {
		case *reLU:
			mask(l.y)
		case *dense:
			if l.relu {
				mask(l.y)
			}
		case *conv2d:
			if l.relu {
				mask(l.y)
			}
		case *maxPool2D:
			k = append(k, l.arg...)
		}
	}
	return k
}

// tolerance accepts |got-want| <= atol + rtol·max(|got|, |want|), with
// atol scaled up by fdSteps[0]/h for a smaller step h.
type tolerance struct{ rtol, atol float64 }

// checkGrad compares grad[i] with the central difference of f in v[i] for
// each i in idx. f evaluates the function at the current v and returns it
// with its kink state.
func checkGrad(t *testing.T, what string, v, grad []float32, idx []int, f func() (float64, []int32), tol tolerance) {
	t.Helper()
	_, base := f()
	skipped, worst := 0, 0.0
	for _, i := range idx {
		orig := v[i]
		num, noise, ok := 0.0, 0.0, false
		for _, h := range fdSteps {
			vp := float32(float64(orig) + h)
			vm := float32(float64(orig) - h)
			v[i] = vp
			fp, kp := f()
			v[i] = vm
			fm, km := f()
			v[i] = orig
			if slices.Equal(kp, base) && slices.Equal(km, base) {
				num, ok = (fp-fm)/(float64(vp)-float64(vm)), true
				// Rounding noise in f turns into noise ∝ 1/h in num.
				noise = tol.atol * fdSteps[0] / h
				break
			}
		}
		if !ok {
			skipped++
			continue
		}
		got := float64(grad[i])
		diff := math.Abs(got - num)
		bound := noise + tol.rtol*max(math.Abs(got), math.Abs(num))
		worst = max(worst, diff/bound)
		if diff > bound {
			t.Errorf("%s[%d]: analytic gradient %.6g, finite difference %.6g (|diff| %.3g > %.3g)", what, i, got, num, diff, bound)
		}
	}
	require.LessOrEqual(t, skipped, len(idx)/4, "%s: %d of %d coordinates sit at a kink", what, skipped, len(idx))
	t.Logf("%s: %d coordinates, %d skipped at kinks, worst error %.2f of tolerance", what, len(idx), skipped, worst)
}

// sample returns all of [off, off+n) if n <= k, else k of them at random.
func sample(rng *rand.Rand, off, n, k int) []int {
	idx := make([]int, 0, min(n, k))
	if n <= k {
		for i := range n {
			idx = append(idx, off+i)
		}
		return idx
	}
	for _, i := range rng.Perm(n)[:k] {
		idx = append(idx, off+i)
	}
	return idx
}

func nanVec(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return v
}

func requireFinite(t *testing.T, what string, v []float32) {
	t.Helper()
	for i, x := range v {
		require.False(t, math.IsNaN(float64(x)) || math.IsInf(float64(x), 0), "%s[%d] = %v: not written or not finite", what, i, x)
	}
}

// uniformInput is U(-1, 1).
func uniformInput(rng *rand.Rand, n int) []float32 { return randVec(rng, n) }

// awayFromZero is ±U(0.1, 1.1), so a step of fdStep never crosses zero.
func awayFromZero(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 0.1 + rng.Float32()
		if rng.IntN(2) == 0 {
			v[i] = -v[i]
		}
	}
	return v
}

// distinct is a shuffle of 0.05·(i - n/2): values 0.05 apart, so a pool's
// argmax never changes under a step of fdStep.
func distinct(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i, p := range rng.Perm(n) {
		v[i] = 0.05 * float32(p-n/2)
	}
	return v
}

// denseLayer, convLayer and withReLU make the build funcs of
// TestLayerGradients' table.
func denseLayer(in, out int) func(Backend, *Layout) layer {
	return func(be Backend, lay *Layout) layer { return newDense(be, lay, "fc", in, out) }
}

func convLayer(in shape, outC, kh, kw, pad int) func(Backend, *Layout) layer {
	return func(be Backend, lay *Layout) layer { return newConv2D(be, lay, "conv", in, outC, kh, kw, pad) }
}

// withReLU fuses a ReLU into the layer build makes.
func withReLU(build func(Backend, *Layout) layer) func(Backend, *Layout) layer {
	return func(be Backend, lay *Layout) layer {
		l := build(be, lay)
		l.(actLayer).fuseReLU()
		return l
	}
}

func TestLayerGradients(t *testing.T) {
	tests := []struct {
		name  string
		build func(be Backend, lay *Layout) layer
		n     int
		input func(*rand.Rand, int) []float32
	}{
		{"dense", denseLayer(5, 3), 4, uniformInput},
		{"dense batch 1", denseLayer(9, 6), 1, uniformInput},
		{"dense+relu", withReLU(denseLayer(6, 4)), 3, uniformInput},
		{"relu", func(Backend, *Layout) layer { return newReLU(shape{2, 3, 3}) }, 2, awayFromZero},
		{"flatten", func(Backend, *Layout) layer { return newFlatten(shape{2, 3, 4}) }, 2, uniformInput},
		{"conv 3x3 pad 1", convLayer(shape{2, 5, 6}, 3, 3, 3, 1), 2, uniformInput},
		{"conv 3x3 no pad", convLayer(shape{2, 6, 5}, 2, 3, 3, 0), 2, uniformInput},
		{"conv 2x3 pad 2", convLayer(shape{1, 4, 5}, 2, 2, 3, 2), 3, uniformInput},
		{"conv 1x1", convLayer(shape{3, 4, 4}, 2, 1, 1, 0), 2, uniformInput},
		{"conv 3x3 pad 1 +relu", withReLU(convLayer(shape{2, 5, 5}, 3, 3, 3, 1)), 2, uniformInput},
		{"maxpool 2", func(Backend, *Layout) layer { return newMaxPool2D(shape{2, 6, 7}, 2) }, 2, distinct},
		{"maxpool 3", func(Backend, *Layout) layer { return newMaxPool2D(shape{1, 7, 6}, 3) }, 2, distinct},
	}
	for ti, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ti), 99))
			var lay Layout
			l := tc.build(NewCPU(), &lay)
			require.NoError(t, lay.Validate())
			n := tc.n
			x := tc.input(rng, n*l.in().size())
			p := randVec(rng, lay.Size())
			r := randVec(rng, n*l.out().size()) // f = Σ r·y, so dy = r

			y := slices.Clone(l.forward(p, x, n))
			require.Len(t, y, len(r))
			g := nanVec(lay.Size())
			dx := slices.Clone(l.backward(p, g, x, y, slices.Clone(r), n, true))
			require.Len(t, dx, len(x))
			requireFinite(t, "param gradient", g)

			// Without the input gradient the parameter gradients are the same.
			if lay.Size() > 0 {
				l.forward(p, x, n)
				g2 := nanVec(lay.Size())
				assert.Nil(t, l.backward(p, g2, x, y, slices.Clone(r), n, false))
				assert.Equal(t, g, g2)
			}

			f := func() (float64, []int32) {
				var s float64
				for i, v := range l.forward(p, x, n)[:len(r)] {
					s += float64(r[i]) * float64(v)
				}
				return s, kinks(l)
			}
			tol := tolerance{rtol: 1e-3, atol: 1e-4}
			checkGrad(t, "x", x, dx, sample(rng, 0, len(x), 60), f, tol)
			for _, tn := range lay.Tensors {
				checkGrad(t, tn.Name, p, g, sample(rng, tn.Offset, tn.Size(), 40), f, tol)
			}
		})
	}
}

func TestSoftmaxCrossEntropy(t *testing.T) {
	t.Run("gradient", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 5))
		const n, classes = 5, 4
		l := newSoftmaxCE(classes)
		z := randVec(rng, n*classes)
		for i := range z {
			z[i] *= 3
		}
		labels := []int32{0, 3, 1, 1, 2}
		sum, _, dz := l.forward(z, labels, true)
		dz = slices.Clone(dz)

		// The loss against a direct float64 evaluation.
		var want float64
		for s, lab := range labels {
			var e float64
			for _, v := range z[s*classes : (s+1)*classes] {
				e += math.Exp(float64(v))
			}
			want += math.Log(e) - float64(z[s*classes+int(lab)])
		}
		assert.InEpsilon(t, want, sum, 1e-12)

		f := func() (float64, []int32) {
			s, _, _ := l.forward(z, labels, false)
			return s / n, nil
		}
		checkGrad(t, "z", z, dz, sample(rng, 0, len(z), 100), f, tolerance{rtol: 1e-4, atol: 1e-6})
	})

	t.Run("stable for large logits", func(t *testing.T) {
		l := newSoftmaxCE(3)
		z := []float32{1000, -1000, 999, -5e4, 5e4, 0}
		sum, correct, dz := l.forward(z, []int32{2, 1}, true)
		// Sample 0: logsumexp ≈ 1000 + log(1 + e⁻¹), minus 999.
		want := 1 + math.Log1p(math.Exp(-1))
		assert.InDelta(t, want, sum, 1e-9)
		assert.Equal(t, 1, correct)
		p0 := 1 / (1 + math.Exp(-1))
		assert.InDelta(t, p0/2, float64(dz[0]), 1e-7)
		assert.InDelta(t, 0, float64(dz[1]), 1e-7)
		assert.InDelta(t, (1-p0-1)/2, float64(dz[2]), 1e-7)
		assert.InDelta(t, 0, float64(dz[4]), 1e-7)
		for _, v := range dz {
			assert.False(t, math.IsNaN(float64(v)))
		}
	})

	t.Run("correct counts first max on ties", func(t *testing.T) {
		l := newSoftmaxCE(3)
		z := []float32{1, 1, 0, 0, 2, 2, 5, 1, 5}
		_, correct, _ := l.forward(z, []int32{0, 2, 0}, false)
		assert.Equal(t, 2, correct) // sample 1 picks class 1, not 2
	})

	t.Run("gradient of the mean sums to zero per row", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(6, 6))
		l := newSoftmaxCE(10)
		z := randVec(rng, 8*10)
		labels := []int32{0, 1, 2, 3, 4, 5, 6, 9}
		_, _, dz := l.forward(z, labels, true)
		for s := range labels {
			var sum float64
			for _, v := range dz[s*10 : (s+1)*10] {
				sum += float64(v)
			}
			assert.InDelta(t, 0, sum, 1e-7)
			assert.Less(t, dz[s*10+int(labels[s])], float32(0))
		}
	})
}

// smallModels are models small enough to check every tensor.
func smallModels() []struct {
	name string
	m    func(be Backend, fuse bool) *net
	n    int
} {
	return []struct {
		name string
		m    func(be Backend, fuse bool) *net
		n    int
	}{
		{"mlp 12-7-5-4", func(be Backend, fuse bool) *net {
			return newMLP(be, Spec{Arch: "mlp", Hidden: []int{7, 5}, Channels: 1, Height: 3, Width: 4, Classes: 4}, fuse)
		}, 3},
		{"mlp one hidden", func(be Backend, fuse bool) *net {
			return newMLP(be, Spec{Arch: "mlp", Hidden: []int{6}, Channels: 2, Height: 2, Width: 2, Classes: 3}, fuse)
		}, 2},
		{"cnn 2x8x8", func(be Backend, fuse bool) *net {
			return newCNN(be, Spec{Arch: "cnn", Channels: 2, Height: 8, Width: 8, Classes: 3}, cnnSize{3, 4, 6}, fuse)
		}, 2},
		{"cnn 1x9x10", func(be Backend, fuse bool) *net {
			return newCNN(be, Spec{Arch: "cnn", Channels: 1, Height: 9, Width: 10, Classes: 5}, cnnSize{4, 3, 5}, fuse)
		}, 3},
	}
}

// perturbedInit returns params from Init(seed) plus U(-0.1, 0.1), so that
// biases are not all zero and every path carries gradient.
func perturbedInit(m Model, seed uint64, rng *rand.Rand) []float32 {
	p := make([]float32, m.Layout().Size())
	m.Init(p, seed)
	for i := range p {
		p[i] += 0.1 * (2*rng.Float32() - 1)
	}
	return p
}

// randBatch returns n inputs for m with values in [-1, 1) and n labels.
func randBatch(rng *rand.Rand, n int, m Model) ([]float32, []int32) {
	return randVec(rng, n*m.InputSize()), randLabels(rng, n, m.Classes())
}

func randLabels(rng *rand.Rand, n, classes int) []int32 {
	l := make([]int32, n)
	for i := range l {
		l[i] = int32(rng.IntN(classes))
	}
	return l
}

func TestModelGradients(t *testing.T) {
	for ti, tc := range smallModels() {
		for _, fuse := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fused=%v", tc.name, fuse), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ti), 7))
				m := tc.m(NewCPU(), fuse)
				p := perturbedInit(m, 1, rng)
				x, labels := randBatch(rng, tc.n, m)

				g := nanVec(len(p))
				loss, _ := m.ForwardBackward(p, g, x, labels)
				requireFinite(t, "grads", g)

				f := func() (float64, []int32) {
					s, _ := m.Evaluate(p, x, labels)
					return s / float64(tc.n), kinks(m.layers...)
				}
				l0, _ := f()
				assert.InDelta(t, l0, loss, 1e-12, "ForwardBackward and Evaluate disagree on the loss")
				for _, tn := range m.Layout().Tensors {
					checkGrad(t, tn.Name, p, g, sample(rng, tn.Offset, tn.Size(), 25), f, tolerance{rtol: 1e-2, atol: 2e-4})
				}
			})
		}
	}
}

// TestFusedMatchesUnfused checks that fusing a ReLU into the layer before
// it changes nothing but speed.
func TestFusedMatchesUnfused(t *testing.T) {
	for ti, tc := range smallModels() {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ti), 8))
			fused, plain := tc.m(NewCPU(), true), tc.m(NewCPU(), false)
			require.Less(t, len(fused.layers), len(plain.layers))
			require.True(t, fused.Layout().Equal(plain.Layout()))
			p := perturbedInit(fused, 2, rng)
			x, labels := randBatch(rng, tc.n, fused)
			g1, g2 := make([]float32, len(p)), make([]float32, len(p))
			l1, c1 := fused.ForwardBackward(p, g1, x, labels)
			l2, c2 := plain.ForwardBackward(p, g2, x, labels)
			assert.Equal(t, l2, l1)
			assert.Equal(t, c2, c1)
			assert.Equal(t, g2, g1)

			// Init does not depend on fusion either.
			i1, i2 := make([]float32, len(p)), make([]float32, len(p))
			fused.Init(i1, 9)
			plain.Init(i2, 9)
			assert.Equal(t, i2, i1)
		})
	}
}

// TestLayersEmptyBatch checks that a layer given no samples still
// overwrites its parameter gradients (with zeros).
func TestLayersEmptyBatch(t *testing.T) {
	for _, build := range []func(*Layout) layer{
		func(lay *Layout) layer { return newDense(NewCPU(), lay, "fc", 3, 2) },
		func(lay *Layout) layer { return newConv2D(NewCPU(), lay, "conv", shape{2, 4, 4}, 3, 3, 3, 1) },
		func(lay *Layout) layer { return newConv2D(NewCPU(), lay, "conv", shape{2, 4, 4}, 3, 1, 1, 0) },
	} {
		var lay Layout
		l := build(&lay)
		p := make([]float32, lay.Size())
		y := l.forward(p, nil, 0)
		assert.Empty(t, y)
		g := nanVec(lay.Size())
		dx := l.backward(p, g, nil, y, nil, 0, true)
		assert.Empty(t, dx)
		assert.Equal(t, make([]float32, lay.Size()), g, lay.String())
	}
}
