package nn

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name    string
		spec    Spec
		wantErr string
	}{
		{"unknown arch", Spec{Arch: "xyz"}, `nn: invalid spec: unknown arch "xyz" (want mlp or cnn)`},
		{"empty arch", Spec{}, `nn: invalid spec: unknown arch "" (want mlp or cnn)`},
		{"zero hidden", Spec{Arch: "mlp", Hidden: []int{256, 0}}, "nn: invalid spec: hidden layer 2 has width 0, want 1 to 16777216"},
		{"negative hidden", Spec{Arch: "mlp", Hidden: []int{-5}}, "nn: invalid spec: hidden layer 1 has width -5, want 1 to 16777216"},
		{"one class", Spec{Arch: "mlp", Classes: 1}, "nn: invalid spec: 1 classes, want 2 to 16777216 (or 0 for 10)"},
		{"negative classes", Spec{Arch: "cnn", Classes: -3}, "nn: invalid spec: -3 classes, want 2 to 16777216 (or 0 for 10)"},
		{"negative channels", Spec{Arch: "mlp", Channels: -1}, "nn: invalid spec: input -1×28×28 (channels×height×width) has a negative dimension, want positive (or 0 for the default)"},
		{"huge input", Spec{Arch: "mlp", Channels: 1 << 20, Height: 1 << 20, Width: 1 << 20}, "nn: invalid spec: input 1048576×1048576×1048576 is too large, want at most 268435456 values per sample"},
		{"cnn too small", Spec{Arch: "cnn", Height: 3}, "nn: invalid spec: cnn input 3×28 is smaller than 4×4, the least its two 2×2 poolings accept"},
		{"too many parameters", Spec{Arch: "mlp", Hidden: []int{1 << 14, 1 << 14, 1 << 14, 1 << 14, 1 << 14, 1 << 14, 1 << 14, 1 << 14, 1 << 14}},
			"nn: invalid spec: mlp has 2160640010 parameters, more than the 2147483647 a flat vector may hold"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(tc.spec, NewCPU())
			require.Error(t, err)
			assert.Nil(t, m)
			assert.EqualError(t, err, tc.wantErr)
			assert.True(t, errors.Is(err, ErrInvalidSpec))
		})
	}

	t.Run("nil backend", func(t *testing.T) {
		_, err := New(Spec{Arch: "mlp"}, nil)
		assert.EqualError(t, err, "nn: New: nil Backend (want e.g. nn.NewCPU())")
	})
}

func TestNewDefaults(t *testing.T) {
	tests := []struct {
		spec      Spec
		name      string
		inputSize int
		classes   int
	}{
		{Spec{Arch: "mlp"}, "mlp", 784, 10},
		{Spec{Arch: "cnn"}, "cnn", 784, 10},
		{Spec{Arch: "mlp", Channels: 3, Height: 32, Width: 32, Classes: 100}, "mlp", 3072, 100},
		{Spec{Arch: "cnn", Width: 20, Hidden: []int{-1}}, "cnn", 560, 10}, // cnn ignores Hidden
		{DefaultSpec("mlp"), "mlp", 784, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(tc.spec, NewCPU())
			require.NoError(t, err)
			assert.Equal(t, tc.name, m.Name())
			assert.Equal(t, tc.inputSize, m.InputSize())
			assert.Equal(t, tc.classes, m.Classes())
		})
	}

	assert.Equal(t, Spec{Arch: "mlp", Hidden: []int{256, 128}, Channels: 1, Height: 28, Width: 28, Classes: 10}, DefaultSpec("mlp"))
	assert.Equal(t, Spec{Arch: "cnn", Channels: 1, Height: 28, Width: 28, Classes: 10}, DefaultSpec("cnn"))

	// New keeps no reference to the caller's Hidden.
	hidden := []int{8}
	m, err := New(Spec{Arch: "mlp", Hidden: hidden}, NewCPU())
	require.NoError(t, err)
	hidden[0] = 9
	_, ok := m.Layout().Find("fc1.weight")
	require.True(t, ok)
	assert.Equal(t, []int{8, 784}, m.Layout().Tensors[0].Shape)
}

func TestInit(t *testing.T) {
	for _, arch := range []string{"mlp", "cnn"} {
		t.Run(arch, func(t *testing.T) {
			m, err := New(Spec{Arch: arch}, NewCPU())
			require.NoError(t, err)
			size := m.Layout().Size()
			a, b, c := make([]float32, size), make([]float32, size), nanVec(size)
			m.Init(a, 42)
			m.Init(b, 43)
			m.Init(c, 42)
			assert.Equal(t, a, c, "same seed, same vector")
			assert.NotEqual(t, a, b, "different seeds")

			// A second model of the same spec draws the same.
			m2, err := New(Spec{Arch: arch}, NewCPU())
			require.NoError(t, err)
			d := make([]float32, size)
			m2.Init(d, 42)
			assert.Equal(t, a, d)

			tensors := m.Layout().Tensors
			for ti, tn := range tensors {
				v := tn.View(a)
				if len(tn.Shape) == 1 {
					for _, x := range v {
						require.Zero(t, x, "%s: biases start at zero", tn.Name)
					}
					continue
				}
				fanIn := tn.Size() / tn.Shape[0]
				bound := math.Sqrt(6 / float64(fanIn)) // He: a ReLU follows
				if ti == len(tensors)-2 {
					bound = 1 / math.Sqrt(float64(fanIn)) // the logits' layer
				}
				var maxAbs, sum, sumSq float64
				for _, x := range v {
					maxAbs = max(maxAbs, math.Abs(float64(x)))
					sum += float64(x)
					sumSq += float64(x) * float64(x)
				}
				n := float64(len(v))
				assert.LessOrEqual(t, maxAbs, bound, "%s: |w| <= %.4g", tn.Name, bound)
				assert.Greater(t, maxAbs, 0.9*bound, "%s: spans the interval", tn.Name)
				// U(-b, b) has mean 0 and variance b²/3.
				assert.InDelta(t, 0, sum/n, 5*bound/math.Sqrt(3*n), "%s: mean", tn.Name)
				assert.InEpsilon(t, bound*bound/3, sumSq/n, 0.2, "%s: variance", tn.Name)
			}
		})
	}
}

// eachArch runs f as a subtest per architecture, mlp and cnn, on a model
// of spec with that Arch (see model).
func eachArch(t *testing.T, spec Spec, f func(t *testing.T, m Model, p []float32)) {
	for _, arch := range []string{"mlp", "cnn"} {
		t.Run(arch, func(t *testing.T) {
			s := spec
			s.Arch = arch
			m, p := model(t, s)
			f(t, m, p)
		})
	}
}

// model returns the model spec describes on the gonum CPU backend and its
// parameters, initialised with seed 1.
func model(tb testing.TB, spec Spec) (Model, []float32) {
	tb.Helper()
	return modelOn(tb, NewCPU(), spec)
}

// modelOn is model on the backend be.
func modelOn(tb testing.TB, be Backend, spec Spec) (Model, []float32) {
	tb.Helper()
	m, err := New(spec, be)
	require.NoError(tb, err)
	p := make([]float32, m.Layout().Size())
	m.Init(p, 1)
	return m, p
}

// TestBatchSizeChanges runs batches of changing sizes through one model and
// checks each against a fresh model, and that a batch's mean gradient is
// the average of its halves'.
func TestBatchSizeChanges(t *testing.T) {
	for _, arch := range []string{"mlp", "cnn"} {
		t.Run(arch, func(t *testing.T) {
			spec := Spec{Arch: arch, Hidden: []int{32, 16}, Height: 12, Width: 12, Classes: 5}
			m, p := model(t, spec)
			rng := rand.New(rand.NewPCG(11, 11))
			size := len(p)
			for _, n := range []int{16, 3, 1, 16, 23, 8} {
				x, labels := randBatch(rng, n, m)
				g := nanVec(size)
				loss, correct := m.ForwardBackward(p, g, x, labels)
				requireFinite(t, "grads", g)

				fresh, _ := model(t, spec)
				gf := make([]float32, size)
				lf, cf := fresh.ForwardBackward(p, gf, x, labels)
				assert.Equal(t, lf, loss, "batch %d: loss", n)
				assert.Equal(t, cf, correct, "batch %d: correct", n)
				assert.Equal(t, gf, g, "batch %d: grads", n)

				sum, ec := m.Evaluate(p, x, labels)
				assert.InDelta(t, loss*float64(n), sum, 1e-9*float64(n))
				assert.Equal(t, correct, ec)

				if n < 2 {
					continue
				}
				// Split the batch in two: the mean over the whole is the
				// weighted mean of the halves.
				h := n / 2
				ga, gb := make([]float32, size), make([]float32, size)
				la, ca := m.ForwardBackward(p, ga, x[:h*m.InputSize()], labels[:h])
				lb, cb := m.ForwardBackward(p, gb, x[h*m.InputSize():], labels[h:])
				wa, wb := float64(h)/float64(n), float64(n-h)/float64(n)
				assert.InDelta(t, loss, wa*la+wb*lb, 1e-6)
				assert.Equal(t, correct, ca+cb)
				var gmax float64
				for _, v := range g {
					gmax = max(gmax, math.Abs(float64(v)))
				}
				for i := range g {
					want := wa*float64(ga[i]) + wb*float64(gb[i])
					require.InDelta(t, want, float64(g[i]), 1e-5*gmax+1e-7, "batch %d: grads[%d]", n, i)
				}
			}
		})
	}
}

func TestZeroAllocsWhenWarm(t *testing.T) {
	eachArch(t, Spec{}, func(t *testing.T, m Model, p []float32) {
		const batch = 64
		g := make([]float32, len(p))
		x, labels := benchBatch(m, batch)
		m.ForwardBackward(p, g, x, labels) // warm up
		allocs := testing.AllocsPerRun(3, func() { m.ForwardBackward(p, g, x, labels) })
		assert.Zero(t, allocs, "ForwardBackward")
		allocs = testing.AllocsPerRun(3, func() { m.Evaluate(p, x, labels) })
		assert.Zero(t, allocs, "Evaluate")
		// A smaller batch (the last of an epoch) fits in the buffers.
		allocs = testing.AllocsPerRun(3, func() { m.ForwardBackward(p, g, x[:10*m.InputSize()], labels[:10]) })
		assert.Zero(t, allocs, "ForwardBackward, smaller batch")
	})
}

func TestCallerErrorsPanic(t *testing.T) {
	m, p := model(t, Spec{Arch: "mlp", Hidden: []int{4}, Height: 2, Width: 2, Classes: 3})
	g := make([]float32, len(p))
	x := make([]float32, 2*4)
	tests := []struct {
		name string
		call func()
		msg  string
	}{
		{"label too large", func() { m.ForwardBackward(p, g, x, []int32{0, 3}) }, "nn: label 3 of sample 1 is outside [0, 3)"},
		{"negative label", func() { m.Evaluate(p, x, []int32{-1, 0}) }, "nn: label -1 of sample 0 is outside [0, 3)"},
		{"short x", func() { m.ForwardBackward(p, g, x[:7], []int32{0, 1}) },
			"nn: mlp.ForwardBackward: len(x) = 7, want 8 (len(labels) = 2 samples of 4 values)"},
		{"short params", func() { m.Evaluate(p[:3], x, []int32{0, 1}) }, "nn: mlp.Evaluate: len(params) = 3, want 35 (Layout().Size())"},
		{"long grads", func() { m.ForwardBackward(p, append(g, 0), x, []int32{0, 1}) },
			"nn: mlp.ForwardBackward: len(grads) = 36, want 35 (Layout().Size())"},
		{"init", func() { m.Init(p[1:], 1) }, "nn: mlp.Init: len(params) = 34, want 35 (Layout().Size())"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tc.msg, tc.call)
		})
	}
}

func TestEmptyBatch(t *testing.T) {
	m, p := model(t, Spec{Arch: "cnn", Height: 8, Width: 8})
	g := nanVec(len(p))
	loss, correct := m.ForwardBackward(p, g, nil, nil)
	assert.Zero(t, loss)
	assert.Zero(t, correct)
	assert.Equal(t, make([]float32, len(p)), g)
	sum, correct := m.Evaluate(p, nil, nil)
	assert.Zero(t, sum)
	assert.Zero(t, correct)
}

// TestInputsUnmodified checks that ForwardBackward and Evaluate leave
// params, x and labels alone and keep no reference to them.
func TestInputsUnmodified(t *testing.T) {
	eachArch(t, Spec{Height: 8, Width: 8}, func(t *testing.T, m Model, p []float32) {
		rng := rand.New(rand.NewPCG(2, 2))
		x, labels := randBatch(rng, 5, m)
		p0, x0, l0 := slices.Clone(p), slices.Clone(x), slices.Clone(labels)
		g := make([]float32, len(p))
		m.ForwardBackward(p, g, x, labels)
		m.Evaluate(p, x, labels)
		assert.Equal(t, p0, p)
		assert.Equal(t, x0, x)
		assert.Equal(t, l0, labels)
		for _, a := range m.(*net).acts {
			assert.Nil(t, a)
		}
	})
}

// TestModelsShareParams runs two models on one params vector from two
// goroutines (run with -race): params are only read.
func TestModelsShareParams(t *testing.T) {
	spec := Spec{Arch: "cnn", Height: 8, Width: 8}
	m1, p := model(t, spec)
	m2, _ := model(t, spec)
	rng := rand.New(rand.NewPCG(3, 3))
	x, labels := randBatch(rng, 8, m1)
	g1, g2 := make([]float32, len(p)), make([]float32, len(p))
	var wg sync.WaitGroup
	for _, w := range []struct {
		m Model
		g []float32
	}{{m1, g1}, {m2, g2}} {
		wg.Go(func() {
			for range 3 {
				w.m.ForwardBackward(p, w.g, x, labels)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, g1, g2)
}

// TestLearns trains small models with plain SGD on synthetic problems they
// can solve and checks that the loss falls well below its start.
func TestLearns(t *testing.T) {
	tests := []struct {
		name  string
		spec  Spec
		m     func() Model
		data  func(rng *rand.Rand, n int, m Model) ([]float32, []int32)
		steps int
		lr    float32
	}{
		{
			name: "mlp on gaussian blobs",
			spec: Spec{Arch: "mlp", Hidden: []int{16}, Channels: 1, Height: 4, Width: 4, Classes: 4},
			data: blobs,
			// 4 classes around random centres in 16 dimensions.
			steps: 150,
			lr:    0.2,
		},
		{
			name:  "cnn on bright quadrants",
			m:     func() Model { return newCNN(NewCPU(), specWith("cnn", 1, 8, 8, 4), cnnSize{4, 8, 16}, true) },
			data:  quadrants,
			steps: 150,
			lr:    0.1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m Model
			if tc.m != nil {
				m = tc.m()
			} else {
				var err error
				m, err = New(tc.spec, NewCPU())
				require.NoError(t, err)
			}
			p := make([]float32, m.Layout().Size())
			g := make([]float32, len(p))
			m.Init(p, 5)
			rng := rand.New(rand.NewPCG(21, 21))
			testX, testL := tc.data(rng, 256, m)
			before, _ := m.Evaluate(p, testX, testL)
			for range tc.steps {
				x, labels := tc.data(rng, 32, m)
				m.ForwardBackward(p, g, x, labels)
				for i := range p {
					p[i] -= tc.lr * g[i]
				}
			}
			after, correct := m.Evaluate(p, testX, testL)
			t.Logf("loss %.4f → %.4f, accuracy %d/256", before/256, after/256, correct)
			assert.Less(t, after, before/5, "loss should fall by far more than 5×")
			assert.GreaterOrEqual(t, correct, 240)
		})
	}
}

// specWith is DefaultSpec(arch) with another input shape and class
// count.
func specWith(arch string, c, h, w, classes int) Spec {
	s := DefaultSpec(arch)
	s.Channels, s.Height, s.Width, s.Classes = c, h, w, classes
	return s
}

// blobs draws samples around one fixed centre per class (the centres come
// from a fixed seed, so every call agrees on them).
func blobs(rng *rand.Rand, n int, m Model) ([]float32, []int32) {
	crng := rand.New(rand.NewPCG(99, 99))
	d := m.InputSize()
	centres := randVec(crng, m.Classes()*d)
	x := make([]float32, n*d)
	labels := randLabels(rng, n, m.Classes())
	for s, l := range labels {
		for i := range d {
			x[s*d+i] = centres[int(l)*d+i] + 0.5*float32(rng.NormFloat64())
		}
	}
	return x, labels
}

// quadrants draws noisy images whose label is the quadrant that is bright.
func quadrants(rng *rand.Rand, n int, m Model) ([]float32, []int32) {
	const h, w = 8, 8
	x := make([]float32, n*h*w)
	labels := randLabels(rng, n, 4)
	for s, l := range labels {
		qy, qx := int(l)/2, int(l)%2
		for y := range h {
			for xx := range w {
				v := 0.3 * float32(rng.NormFloat64())
				if y/4 == qy && xx/4 == qx {
					v += 1
				}
				x[s*h*w+y*w+xx] = v
			}
		}
	}
	return x, labels
}

// TestForwardBackwardNotify checks that the notifying backward computes
// the same gradient as ForwardBackward, that its offsets fall from layer
// to layer down to 0 at each parameter layer's first tensor, and that when
// ready(off) is called grads[off:] already holds its final values.
func TestForwardBackwardNotify(t *testing.T) {
	eachArch(t, Spec{Height: 8, Width: 8}, func(t *testing.T, m Model, p []float32) {
		rng := rand.New(rand.NewPCG(3, 3))
		x, labels := randBatch(rng, 6, m)
		want := make([]float32, len(p))
		wantLoss, wantCorrect := m.ForwardBackward(p, want, x, labels)

		g := randVec(rng, len(p)) // garbage: every value must be overwritten
		var offs []int
		loss, correct := m.(GradNotifier).ForwardBackwardNotify(p, g, x, labels, func(off int) {
			end := len(p)
			if len(offs) > 0 {
				end = offs[len(offs)-1]
			}
			require.Less(t, off, end, "offsets must fall")
			assert.Equal(t, want[off:end], g[off:end], "grads[%d:%d] not final at ready(%d)", off, end, off)
			offs = append(offs, off)
		})
		assert.Equal(t, wantLoss, loss)
		assert.Equal(t, wantCorrect, correct)
		assert.Equal(t, want, g)
		var firsts []int // the offset of each layer's weight, last layer first
		for _, tn := range m.Layout().Tensors {
			if len(tn.Shape) > 1 {
				firsts = append([]int{tn.Offset}, firsts...)
			}
		}
		assert.Equal(t, firsts, offs)
		assert.Equal(t, 0, offs[len(offs)-1])

		offs = offs[:0]
		m.(GradNotifier).ForwardBackwardNotify(p, g, x[:0], labels[:0], func(off int) { offs = append(offs, off) })
		assert.Equal(t, []int{0}, offs, "an empty batch reports the whole vector at once")
		assert.Equal(t, make([]float32, len(p)), g)
	})
}
