package nn

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/shoalml/shoal/internal/dl"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/optim"
)

// envRequireOpenBLAS makes the OpenBLAS tests fail, instead of skipping,
// where the library cannot be loaded (CI machines that install it).
const envRequireOpenBLAS = "SHOAL_REQUIRE_OPENBLAS"

// openblasOrSkip returns the OpenBLAS backend on one thread, or skips the
// test saying why (fails with SHOAL_REQUIRE_OPENBLAS=1).
func openblasOrSkip(tb testing.TB) *OpenBLAS {
	tb.Helper()
	o, err := NewOpenBLAS(1)
	if err != nil {
		if os.Getenv(envRequireOpenBLAS) == "1" {
			tb.Fatalf("%s=1 but: %v", envRequireOpenBLAS, err)
		}
		tb.Skipf("SKIP: OpenBLAS not available (apt-get install libopenblas0-pthread; %s=1 makes this a failure): %v", envRequireOpenBLAS, err)
	}
	return o
}

// testBackend is one backend of the conformance tests.
type testBackend struct {
	name string
	be   func(testing.TB) Backend
}

// backends are the backends every conformance test runs on: gonum always,
// OpenBLAS where it loads (the test skips, saying why, where it does not).
func backends() []testBackend {
	return []testBackend{
		{"gonum", func(testing.TB) Backend { return NewCPU() }},
		{"openblas", func(tb testing.TB) Backend { return openblasOrSkip(tb) }},
	}
}

func TestBackendGemmMatchesNaive(t *testing.T) {
	type dims struct{ m, n, k int }
	// 1, 7, 63, 65 and 257 in every position, square and not (OpenBLAS
	// switches kernels and blockings at sizes like these), and a product
	// shaped like the MLP's first.
	shapes := []dims{
		{1, 1, 1}, {1, 7, 63}, {7, 1, 65}, {63, 65, 1}, {65, 63, 7}, {7, 65, 257},
		{257, 7, 63}, {63, 257, 65}, {257, 65, 63}, {64, 200, 784}, {2, 300, 3},
	}
	scalars := []struct{ alpha, beta float32 }{{1, 0}, {0.5, 1}, {-1.5, 0.25}}
	for _, bk := range backends() {
		t.Run(bk.name, func(t *testing.T) {
			be := bk.be(t)
			rng := rand.New(rand.NewPCG(17, 17))
			for _, d := range shapes {
				for _, tA := range []bool{false, true} {
					for _, tB := range []bool{false, true} {
						for pi, sc := range scalars {
							if pi > 0 && d.m*d.n*d.k > 1<<20 {
								break // the big product once: the reference is slow
							}
							name := fmt.Sprintf("%dx%dx%d/tA=%v/tB=%v/alpha=%v/beta=%v", d.m, d.n, d.k, tA, tB, sc.alpha, sc.beta)
							t.Run(name, func(t *testing.T) {
								checkGemmCase(t, be, rng, d.m, d.n, d.k, tA, tB, sc.alpha, sc.beta, 5*pi)
							})
						}
					}
				}
			}
		})
	}
}

// checkGemmCase runs one product on be against naiveGemm, with leading
// dimensions pad elements larger than the rows, C poisoned with NaN when
// beta is 0, and checks that C's padding is left alone.
func checkGemmCase(t *testing.T, be Backend, rng *rand.Rand, m, n, k int, tA, tB bool, alpha, beta float32, pad int) {
	t.Helper()
	ra, ca := m, k
	if tA {
		ra, ca = k, m
	}
	rb, cb := k, n
	if tB {
		rb, cb = n, k
	}
	lda, ldb, ldc := ca+pad, cb+pad, n+pad
	a := randVec(rng, (ra-1)*lda+ca)
	b := randVec(rng, (rb-1)*ldb+cb)
	c := randVec(rng, m*ldc) // with the padding of the last row
	if beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN()) // beta 0 must ignore C
		}
	}
	c0 := append([]float32(nil), c...)
	want := make([]float64, len(c))
	for i, v := range c {
		want[i] = float64(v)
	}
	naiveGemm(tA, tB, m, n, k, float64(alpha), a, lda, b, ldb, float64(beta), want, ldc)
	be.Gemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	// Entries are sums of k products of values in (-1, 1): float32
	// rounding is bounded by about k·2⁻²⁴ per unit of magnitude.
	tol := float64(k+2) * 0x1p-22
	for i := range m {
		for j := range n {
			// Checked by hand, as a testify call per element is slow.
			if got, w := float64(c[i*ldc+j]), want[i*ldc+j]; !(math.Abs(got-w) <= tol) {
				t.Fatalf("C[%d][%d] = %v, want %v ± %.3g", i, j, got, w, tol)
			}
		}
		for j := n; j < ldc; j++ {
			if got, w := c[i*ldc+j], c0[i*ldc+j]; got != w && !(math.IsNaN(float64(got)) && math.IsNaN(float64(w))) {
				t.Fatalf("padding C[%d][%d] changed from %v to %v", i, j, w, got)
			}
		}
	}
}

// requireClose fails unless got and want, of equal length, agree within
// tol everywhere, naming the first element that does not and its tensor.
func requireClose(t *testing.T, lay Layout, what string, want, got []float32, tol float64) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= tol) {
			t.Fatalf("%s[%d] (%s) = %v, want %v ± %g", what, i, tensorAt(lay, i), got[i], want[i], tol)
		}
	}
}

func TestBackendGemmDegenerate(t *testing.T) {
	tests := []struct {
		name        string
		m, n, k     int
		alpha, beta float32
		want        float32 // every element of C after, from C = 2
	}{
		{"k=0 scales C", 70, 200, 0, 1, 3, 6},
		{"k=0 beta 0 clears C", 70, 200, 0, 1, 0, 0},
		{"alpha 0 scales C", 70, 200, 5, 0, 0.5, 1},
		{"m=0 is a no-op", 0, 200, 5, 1, 0, 2},
	}
	for _, bk := range backends() {
		t.Run(bk.name, func(t *testing.T) {
			be := bk.be(t)
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					a := make([]float32, max(tc.m, 1)*max(tc.k, 1))
					b := make([]float32, max(tc.k, 1)*tc.n)
					c := make([]float32, max(tc.m, 1)*tc.n)
					for i := range c {
						c[i] = 2
					}
					be.Gemm(false, false, tc.m, tc.n, tc.k, tc.alpha, a, max(tc.k, 1), b, tc.n, tc.beta, c, tc.n)
					for i, v := range c {
						require.Equal(t, tc.want, v, "C[%d]", i)
					}
				})
			}
		})
	}
}

func TestBackendGemmPanicsOnBadArguments(t *testing.T) {
	for _, bk := range backends() {
		t.Run(bk.name, func(t *testing.T) {
			be := bk.be(t)
			a, b, c := make([]float32, 6), make([]float32, 6), make([]float32, 4)
			assert.PanicsWithValue(t, "nn: Gemm: len(a) = 5, want >= 6 for a 2×3 matrix with leading dimension 3",
				func() { be.Gemm(false, false, 2, 2, 3, 1, a[:5], 3, b, 2, 0, c, 2) })
			assert.PanicsWithValue(t, "nn: Gemm: ldb = 2, want >= 3",
				func() { be.Gemm(false, true, 2, 2, 3, 1, a, 3, b, 2, 0, c, 2) })
		})
	}
}

// TestBackendModelsMatchGonum runs the default MLP and CNN, and an MLP
// step with SGD momentum, on each backend and compares the loss, the
// gradients and the updated parameters with the gonum backend's.
func TestBackendModelsMatchGonum(t *testing.T) {
	forEachBackendModel(t, func(t *testing.T, be Backend, spec Spec) {
		ref, p := model(t, spec)
		m, err := New(spec, be)
		require.NoError(t, err)
		x, labels := benchBatch(ref, 8)
		gRef, g := make([]float32, len(p)), nanVec(len(p))
		lRef, cRef := ref.ForwardBackward(p, gRef, x, labels)
		l, c := m.ForwardBackward(p, g, x, labels)
		assert.InDelta(t, lRef, l, 1e-4)
		assert.Equal(t, cRef, c)
		requireClose(t, ref.Layout(), "grads", gRef, g, 1e-4)

		// One SGD-momentum step from each, then a second forward-backward
		// at the new parameters.
		pRef, p2 := append([]float32(nil), p...), append([]float32(nil), p...)
		oRef, o := momentum(t, len(p)), momentum(t, len(p))
		require.NoError(t, oRef.Step(pRef, gRef))
		require.NoError(t, o.Step(p2, g))
		requireClose(t, ref.Layout(), "params after a step", pRef, p2, 1e-4)
		lRef, _ = ref.ForwardBackward(pRef, gRef, x, labels)
		l, _ = m.ForwardBackward(p2, g, x, labels)
		assert.InDelta(t, lRef, l, 1e-4, "loss after a step")
		requireClose(t, ref.Layout(), "grads after a step", gRef, g, 1e-4)
	})
}

// computeSpecs are the models of `shoal bench compute`.
func computeSpecs() []Spec {
	return []Spec{{Arch: "mlp", Hidden: []int{512, 512}}, {Arch: "cnn"}}
}

// forEachBackendModel runs f as subtest backend/arch for each backend and
// each of computeSpecs.
func forEachBackendModel(t *testing.T, f func(t *testing.T, be Backend, spec Spec)) {
	for _, bk := range backends() {
		t.Run(bk.name, func(t *testing.T) {
			be := bk.be(t)
			for _, spec := range computeSpecs() {
				t.Run(spec.Arch, func(t *testing.T) { f(t, be, spec) })
			}
		})
	}
}

func tensorAt(l Layout, i int) string {
	for _, t := range l.Tensors {
		if i >= t.Offset && i < t.Offset+t.Size() {
			return t.Name
		}
	}
	return "?"
}

func momentum(t testing.TB, n int) *optim.Optimizer {
	cfg := optim.DefaultConfig()
	cfg.Algorithm = optim.Momentum
	o, err := optim.New(cfg, n)
	require.NoError(t, err)
	return o
}

// TestTrainingStepZeroAllocs checks that a warm training step, a
// ForwardBackward and an optimizer step, allocates nothing on every
// backend.
func TestTrainingStepZeroAllocs(t *testing.T) {
	forEachBackendModel(t, func(t *testing.T, be Backend, spec Spec) {
		m, p := modelOn(t, be, spec)
		g := make([]float32, len(p))
		o := momentum(t, len(p))
		x, labels := benchBatch(m, 16)
		step := func() {
			m.ForwardBackward(p, g, x, labels)
			if err := o.Step(p, g); err != nil {
				t.Fatal(err)
			}
		}
		step() // warm up
		assert.Zero(t, testing.AllocsPerRun(3, step), "allocations per training step")
	})
}

func TestBLASSearchOrder(t *testing.T) {
	root := t.TempDir()
	mk := func(rel string) string {
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("not a library"), 0o644))
		return p
	}
	envFile := mk("custom/libmyblas.so")
	envDir := filepath.Join(root, "envdir")
	envDirLib := mk("envdir/libopenblas.so.0")
	pthread := mk("usr/lib/openblas-pthread/libopenblas.so.0")
	pthreadBlas := mk("usr/lib/openblas-pthread/libblas.so.3")
	lib64 := mk("usr/lib64/libopenblasp.so.0")
	empty := filepath.Join(root, "usr/local/lib") // holds nothing
	require.NoError(t, os.MkdirAll(empty, 0o755))
	missing := filepath.Join(root, "opt/none")
	sonames := []string{"libopenblas.so.0", "libopenblasp.so.0", "libblas.so.3"}
	dirs := []string{filepath.Dir(pthread), empty, filepath.Dir(lib64), missing}

	// A fake dlopen that refuses everything records the order tried.
	refuseAll := func(tried *[]string) func(dl.Candidate) (*blasLib, error) {
		return func(c dl.Candidate) (*blasLib, error) {
			*tried = append(*tried, c.Arg)
			return nil, fmt.Errorf("fake refusal of %s", filepath.Base(c.Arg))
		}
	}
	tests := []struct {
		name      string
		env       string
		wantTried []string
	}{
		{"no env", "", []string{
			"libopenblas.so.0", "libopenblasp.so.0", "libblas.so.3", // the loader's search
			pthread, pthreadBlas, lib64,
		}},
		{"env file first", envFile, []string{
			envFile, "libopenblas.so.0", "libopenblasp.so.0", "libblas.so.3", pthread, pthreadBlas, lib64,
		}},
		{"env directory first", envDir, []string{
			envDirLib, "libopenblas.so.0", "libopenblasp.so.0", "libblas.so.3", pthread, pthreadBlas, lib64,
		}},
		{"env missing path still tried", filepath.Join(root, "nope.so"), []string{
			filepath.Join(root, "nope.so"), "libopenblas.so.0", "libopenblasp.so.0", "libblas.so.3", pthread, pthreadBlas, lib64,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tried []string
			s := dl.Search{Env: tc.env, Names: sonames, Dirs: dirs}
			lib, err := searchBLAS(s, dl.FileExists, refuseAll(&tried))
			require.Error(t, err)
			assert.Nil(t, lib)
			assert.Equal(t, tc.wantTried, tried)
			assert.True(t, errors.Is(err, ErrUnavailable))
			var be *OpenBLASError
			require.True(t, errors.As(err, &be))
			assert.Equal(t, []string{empty, missing}, be.Empty)
			for _, p := range tc.wantTried {
				assert.Contains(t, err.Error(), p+": fake refusal of "+filepath.Base(p), "the error lists every path tried")
			}
		})
	}

	t.Run("first success wins; libblas.so.3 must be OpenBLAS", func(t *testing.T) {
		var tried []string
		s := dl.Search{Names: sonames, Dirs: dirs}
		lib, err := searchBLAS(s, dl.FileExists, func(c dl.Candidate) (*blasLib, error) {
			tried = append(tried, c.Arg)
			assert.Equal(t, strings.HasSuffix(c.Arg, "libblas.so.3"), openblasOnly(c), c.Arg)
			if c.Arg == pthreadBlas {
				return &blasLib{path: c.Arg}, nil
			}
			return nil, errors.New("no")
		})
		require.NoError(t, err)
		assert.Equal(t, pthreadBlas, lib.path)
		assert.Equal(t, []string{"libopenblas.so.0", "libopenblasp.so.0", "libblas.so.3", pthread, pthreadBlas}, tried)
	})
}

// TestLoadFakeLibrary dlopens files that are not libraries: the search
// fails with an error naming each, and does not crash.
func TestLoadFakeLibrary(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "libopenblas.so.0")
	require.NoError(t, os.WriteFile(fake, []byte("not an ELF file"), 0o644))
	lib, err := loadOpenBLAS(dl.Search{Env: fake})
	require.Error(t, err)
	assert.Nil(t, lib)
	assert.True(t, errors.Is(err, ErrUnavailable))
	var be *OpenBLASError
	require.True(t, errors.As(err, &be))
	if be.Reason != "" { // a build without cgo searches nothing
		t.Logf("no search: %v", err)
		return
	}
	require.Len(t, be.Tried, 1)
	assert.Equal(t, fake, be.Tried[0].Path)
	assert.NotEmpty(t, be.Tried[0].Err)
	t.Log(err)

	// A real library that is not a BLAS: found, but without cblas_sgemm.
	_, err = loadOpenBLAS(dl.Search{Names: []string{"libm.so.6"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cblas_sgemm")
}

func TestNewBestCPU(t *testing.T) {
	be, why := NewBestCPU(1)
	require.NotNil(t, be)
	require.NotEmpty(t, why)
	t.Logf("%s: %s", be.Name(), why)
	switch b := be.(type) {
	case *OpenBLAS:
		assert.Equal(t, "cpu/openblas", b.Name())
		assert.True(t, strings.HasPrefix(why, "openblas: "), why)
		assert.NotEmpty(t, b.Path())
		if b.Threads() != 0 {
			assert.Equal(t, 1, b.Threads())
		}
	case *CPU:
		if os.Getenv(envRequireOpenBLAS) == "1" {
			t.Fatalf("%s=1 but NewBestCPU chose gonum: %s", envRequireOpenBLAS, why)
		}
		assert.True(t, strings.HasPrefix(why, "gonum: nn: OpenBLAS unavailable"), why)
	default:
		t.Fatalf("unexpected backend %T", be)
	}
	_, err := NewOpenBLAS(-1)
	assert.EqualError(t, err, "nn: NewOpenBLAS: threads -1, want >= 0 (0 keeps the library's setting)")
}

// BenchmarkTrainStep measures a training step (ForwardBackward and an
// SGD-momentum update) at batch 64 on each backend, on one thread, for the
// models of `shoal bench compute`.
func BenchmarkTrainStep(b *testing.B) {
	for _, bk := range backends() {
		for _, spec := range computeSpecs() {
			b.Run(bk.name+"/"+spec.Arch, func(b *testing.B) {
				m, p := modelOn(b, bk.be(b), spec)
				const batch = 64
				g := make([]float32, len(p))
				o := momentum(b, len(p))
				x, labels := benchBatch(m, batch)
				m.ForwardBackward(p, g, x, labels)
				for b.Loop() {
					m.ForwardBackward(p, g, x, labels)
					_ = o.Step(p, g)
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "samples/s")
			})
		}
	}
}

// TestOpenBLASConcurrentGemm runs products on one OpenBLAS backend from
// several goroutines at once (as several models in one process would) and
// checks every result: the library is called from many OS threads.
func TestOpenBLASConcurrentGemm(t *testing.T) {
	be := openblasOrSkip(t)
	const m, n, k = 65, 130, 257
	rng := rand.New(rand.NewPCG(5, 5))
	a, b := randVec(rng, m*k), randVec(rng, k*n)
	want := make([]float64, m*n)
	naiveGemm(false, false, m, n, k, 1, a, k, b, n, 0, want, n)
	errs := make(chan string, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			c := make([]float32, m*n)
			for range 20 {
				be.Gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
				for i, w := range want {
					if math.Abs(float64(c[i])-w) > float64(k)*0x1p-22 {
						errs <- fmt.Sprintf("C[%d] = %v, want %v", i, c[i], w)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
