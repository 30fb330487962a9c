package optim_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/optim"
)

// StepBound's bounds hold for what Step then does, for every algorithm, from ordinary gradients
// to the largest finite float32, both from exact maxima and chained from its own earlier bounds;
// and a gradient near float32's limit is never called safe.
func TestStepBoundHoldsForStep(t *testing.T) {
	const limit = 0x1p100
	for _, alg := range optim.Algorithms() {
		for _, wd := range []float64{0, 0.01} {
			for _, scale := range []float64{1e-3, 1, 1e10, 1e18, 1e30, math.MaxFloat32 / 4} {
				t.Run(fmt.Sprintf("%s wd %g grads %g", alg, wd, scale), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(1, uint64(scale)))
					cfg := config(alg, 0.1, wd)
					o := newOpt(t, cfg, 256)
					params := randomVector(rng, 256, 1)
					chainP, chainS := optim.MaxAbs(params), o.StateMaxAbs()
					for step := range 6 {
						grads := randomVector(rng, 256, scale/4)
						grads[step] = float32(scale) // the largest, exactly
						g := optim.MaxAbs(grads)
						p2, s2, peak := o.StepBound(optim.MaxAbs(params), o.StateMaxAbs(), g)
						cp2, cs2, cpeak := o.StepBound(chainP, chainS, g)
						require.NoError(t, o.Step(params, grads))
						p, s := optim.MaxAbs(params), o.StateMaxAbs()
						// A bound within float32's range promises finite values
						// below it; beyond, the values may well be ±Inf.
						within := func(got, bound float64, what string) {
							if bound <= math.MaxFloat32 {
								assert.LessOrEqual(t, got, bound, "step %d: %s", step, what)
							}
						}
						within(p, p2, "|params|")
						within(s, s2, "|state|")
						within(p, cp2, "|params|, chained bound")
						within(s, cs2, "|state|, chained bound")
						if peak <= math.MaxFloat64 { // the exact maxima were finite
							assert.LessOrEqual(t, peak, cpeak, "step %d: a chained bound is no tighter than the exact one", step)
						}
						if scale > 1e30 {
							assert.False(t, peak <= limit, "step %d: a gradient of %g called safe (peak %g)", step, scale, peak)
						}
						if scale <= 1 {
							assert.LessOrEqual(t, cpeak, limit, "step %d: an ordinary gradient refused", step)
						}
						chainP, chainS = cp2, cs2
					}
				})
			}
		}
	}
}

// Bounds that are NaN or negative, or a learning rate that overflows, give a peak no limit
// accepts.
func TestStepBoundRefusesNonsense(t *testing.T) {
	o := newOpt(t, config(optim.Momentum, 0.1, 0), 4)
	for _, in := range [][3]float64{{math.NaN(), 0, 1}, {1, -1, 1}, {1, 0, math.Inf(1)}} {
		_, _, peak := o.StepBound(in[0], in[1], in[2])
		assert.False(t, peak <= math.MaxFloat64, "inputs %v: peak %v", in, peak)
	}
	huge := newOpt(t, config(optim.SGD, 1e300, 0), 4)
	_, _, peak := huge.StepBound(1, 0, 1e10)
	assert.False(t, peak <= math.MaxFloat64, "lr 1e300: peak %v", peak)
}

func TestMaxAbs(t *testing.T) {
	assert.Equal(t, 0.0, optim.MaxAbs(nil))
	assert.Equal(t, 3.0, optim.MaxAbs([]float32{1, -3, 2}))
	assert.Equal(t, math.Inf(1), optim.MaxAbs([]float32{1, float32(math.NaN()), 2}))
	assert.Equal(t, math.Inf(1), optim.MaxAbs([]float32{float32(math.Inf(-1))}))
	assert.Equal(t, float64(math.MaxFloat32), optim.MaxAbs([]float32{-math.MaxFloat32}))
}

// Over many steps whose gradients jump between scales, from ones whose squares underflow to
// large, the chained bounds still hold (Adam's rests on its moving averages' history).
func TestStepBoundHoldsOverLongRuns(t *testing.T) {
	for _, alg := range optim.Algorithms() {
		t.Run(alg, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 7))
			o := newOpt(t, config(alg, 0.01, 0.001), 64)
			params := randomVector(rng, 64, 1)
			p, s := optim.MaxAbs(params), o.StateMaxAbs()
			for step := range 500 {
				grads := randomVector(rng, 64, math.Pow(10, float64(rng.IntN(41)-30)))
				p2, s2, peak := o.StepBound(p, s, optim.MaxAbs(grads))
				require.LessOrEqual(t, peak, 0x1p100, "step %d", step)
				require.NoError(t, o.Step(params, grads))
				require.LessOrEqual(t, optim.MaxAbs(params), p2, "step %d: |params|", step)
				require.LessOrEqual(t, o.StateMaxAbs(), s2, "step %d: |state|", step)
				p, s = p2, s2
			}
			t.Logf("%s: after 500 steps |params| %.3g, bound %.3g", alg, optim.MaxAbs(params), p)
		})
	}
}
