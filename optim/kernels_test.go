package optim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// kernelInput is n floats of every kind an update meets: ordinary values
// of many magnitudes, zeros of both signs, subnormals, the largest
// finite values, and (when special) infinities and NaNs.
func kernelInput(rng *rand.Rand, n int, special bool) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch r := rng.IntN(20); {
		case r == 0:
			v[i] = float32(math.Copysign(0, rng.NormFloat64()))
		case r == 1:
			v[i] = math.Float32frombits(rng.Uint32N(1<<23)) * float32(rng.IntN(2)*2-1) // subnormal
		case r == 2:
			v[i] = math.MaxFloat32 * float32(rng.IntN(2)*2-1)
		case r == 3 && special:
			v[i] = float32(math.Inf(rng.IntN(2)*2 - 1))
		case r == 4 && special:
			v[i] = float32(math.NaN())
		default:
			v[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(16)-8)))
		}
	}
	return v
}

// firstDiff reports the first index where a and b differ as bits (any two
// NaNs are the same), or -1.
func firstDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
			return i
		}
	}
	return -1
}

// TestVectorKernelsAreTheLoops checks the AVX2 kernels against the Go
// loops bit for bit, in place and into another slice, over lengths that
// leave every tail, with values of every kind.
func TestVectorKernelsAreTheLoops(t *testing.T) {
	if !vectorized {
		t.Skip("no vector kernels on this machine (not amd64 with AVX2, or built with purego): the Go loops do every float")
	}
	defer func(v bool) { vectorized = v }(vectorized)
	rng := rand.New(rand.NewPCG(3, 4))
	type kernel struct {
		name string
		run  func(d, p, g, buf []float32)
	}
	const lr, mu = 0.01, 0.9
	kernels := []kernel{
		{"momentum", func(d, p, g, buf []float32) { stepMomentum(d, p, g, buf, lr, 0, mu, false) }},
		{"sgd", func(d, p, g, _ []float32) { stepSGD(d, p, g, lr, 0) }},
	}
	for _, k := range kernels {
		for _, n := range []int{1, 15, 16, 17, 31, 32, 33, 63, 100, 1000, 4099} {
			for _, inPlace := range []bool{true, false} {
				p, g, buf := kernelInput(rng, n, true), kernelInput(rng, n, false), kernelInput(rng, n, true)
				var out [2][2][]float32 // [vectorized][p or d, buf]
				for i, vec := range []bool{false, true} {
					vectorized = vec
					pp, bb := slices.Clone(p), slices.Clone(buf)
					d := pp
					if !inPlace {
						d = make([]float32, n)
					}
					k.run(d, pp, g, bb)
					if !inPlace && firstDiff(pp, p) >= 0 {
						t.Fatalf("%s n=%d vectorized=%v: wrote into p, which it should only read", k.name, n, vec)
					}
					out[i] = [2][]float32{d, bb}
				}
				if i := firstDiff(out[0][0], out[1][0]); i >= 0 {
					t.Errorf("%s n=%d in place=%v: value %d is %g (%#x) from the kernel, %g (%#x) from the loop (p %g, g %g, buf %g)",
						k.name, n, inPlace, i, out[1][0][i], math.Float32bits(out[1][0][i]), out[0][0][i], math.Float32bits(out[0][0][i]), p[i], g[i], buf[i])
				}
				if i := firstDiff(out[0][1], out[1][1]); i >= 0 {
					t.Errorf("%s n=%d in place=%v: buffer %d is %g from the kernel, %g from the loop", k.name, n, inPlace, i, out[1][1][i], out[0][1][i])
				}
			}
		}
	}
}
