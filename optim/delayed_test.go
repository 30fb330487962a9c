package optim_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/optim"
)

// TestDelayedNesterovByHand: delayed Nesterov on one float from 0, each
// step checked against values worked out by hand from Liu et al.'s
// Algorithm 3 (arXiv 2401.09135, c = 0: Δ += g; on every N-th step m =
// β·m + Δ/N, p −= lr·(β·m + g/N), Δ = 0; on the others p −= lr·g/N). Every
// value is a short binary fraction, so float32 holds it exactly and the
// comparison is exact. next is the optimizer's next_momentum_buffer, β·m +
// Δ/N.
func TestDelayedNesterovByHand(t *testing.T) {
	type after struct{ p, buf, next float32 }
	tests := []struct {
		name   string
		lr, mu float64
		delay  int
		grads  []float32
		want   []after
	}{
		{
			// t=1: Δ=1, p = −0.5·1/2 = −0.25; next = 1/2.
			// t=2: Δ=3, m = 0 + 3/2 = 1.5, p = −0.25 − 0.5·(0.5·1.5 + 2/2) = −1.125; next = 0.75.
			// t=3: Δ=3, p = −1.125 − 0.5·3/2 = −1.875; next = 0.75 + 1.5 = 2.25.
			// t=4: Δ=7, m = 0.5·1.5 + 7/2 = 4.25, p = −1.875 − 0.5·(0.5·4.25 + 4/2) = −3.9375; next = 2.125.
			name: "delay 2", lr: 0.5, mu: 0.5, delay: 2, grads: []float32{1, 2, 3, 4},
			want: []after{{-0.25, 0, 0.5}, {-1.125, 1.5, 0.75}, {-1.875, 1.5, 2.25}, {-3.9375, 4.25, 2.125}},
		},
		{
			// t=1: p = −3/3 = −1; next = 1. t=2: p = −2; next = 2.
			// t=3: Δ=9, m = 9/3 = 3, p = −2 − (0.5·3 + 1) = −4.5; next = 1.5.
			// t=4: Δ=6, p = −4.5 − 6/3 = −6.5; next = 1.5 + 2 = 3.5.
			name: "delay 3", lr: 1, mu: 0.5, delay: 3, grads: []float32{3, 3, 3, 6},
			want: []after{{-1, 0, 1}, {-2, 0, 2}, {-4.5, 3, 1.5}, {-6.5, 3, 3.5}},
		},
		{
			// Nesterov: b = 0.5·b + g, p −= lr·(g + 0.5·b).
			// t=1: b = 2, p = −(2 + 1) = −3. t=2: b = 1 + 2 = 3, p = −3 − (2 + 1.5) = −6.5.
			name: "delay 1 (nesterov)", lr: 1, mu: 0.5, delay: 1, grads: []float32{2, 2},
			want: []after{{-3, 2, 1}, {-6.5, 3, 1.5}},
		},
		{
			// Without momentum every step is p −= lr·g/N, and the
			// momentum update changes nothing: m = Δ/N, applied ×0.
			name: "momentum 0", lr: 1, mu: 0, delay: 2, grads: []float32{2, 4, 6},
			want: []after{{-1, 0, 1}, {-3, 3, 0}, {-6, 3, 3}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := optim.Config{Algorithm: optim.DelayedNesterov, LR: tt.lr, Momentum: tt.mu, Delay: tt.delay}
			o := newOpt(t, cfg, 1)
			p := []float32{0}
			for k, g := range tt.grads {
				require.NoError(t, o.Step(p, []float32{g}))
				st := o.State()
				got := after{p[0], st.Slots[optim.SlotMomentumBuffer][0], st.Slots[optim.SlotNextMomentum][0]}
				assert.Equal(t, tt.want[k], got, "after step %d (p, momentum_buffer, next_momentum_buffer)", k+1)
			}
		})
	}
}

// TestDelayedNesterovOfDelayOneIsNesterov: at delay 1 every step updates
// the momentum, and delayed Nesterov is Nesterov bit for bit (the same
// operations in the same order), with and without weight decay, and its
// momentum buffer is Nesterov's.
func TestDelayedNesterovOfDelayOneIsNesterov(t *testing.T) {
	for _, wd := range []float64{0, 0.01} {
		for _, delay := range []int{0, 1} { // 0 is 1
			t.Run(fmt.Sprintf("wd=%v/delay=%d", wd, delay), func(t *testing.T) {
				const n = 37
				nes := newOpt(t, optim.Config{Algorithm: optim.Nesterov, LR: 0.7, Momentum: 0.9, WeightDecay: wd}, n)
				dn := newOpt(t, optim.Config{Algorithm: optim.DelayedNesterov, LR: 0.7, Momentum: 0.9, WeightDecay: wd, Delay: delay}, n)
				rng := rand.New(rand.NewPCG(3, 5))
				p := randomVector(rng, n, 1)
				q := slices.Clone(p)
				for step := range 10 {
					g := randomVector(rng, n, 0.1)
					require.NoError(t, nes.Step(p, g))
					require.NoError(t, dn.Step(q, g))
					for i := range p {
						require.Equal(t, math.Float32bits(p[i]), math.Float32bits(q[i]), "step %d, float %d: nesterov %v, delayed %v", step, i, p[i], q[i])
					}
				}
				assert.Equal(t, nes.State().Slots[optim.SlotMomentumBuffer], dn.State().Slots[optim.SlotMomentumBuffer])
			})
		}
	}
}

// TestADelayedNesterovRoundIsANesterovStepOnTheMean: N steps of delayed
// Nesterov at delay N move the weights as one Nesterov step on the mean
// of their N gradients (what a sync outer step is), round after round;
// the rounding differs, within float32 tolerance. In between, the weights
// have moved by lr/N of each gradient alone.
func TestADelayedNesterovRoundIsANesterovStepOnTheMean(t *testing.T) {
	for _, delay := range []int{2, 4, 8} {
		t.Run(fmt.Sprintf("delay=%d", delay), func(t *testing.T) {
			const n, rounds, lr = 64, 6, 0.7
			nes := newOpt(t, optim.Config{Algorithm: optim.Nesterov, LR: lr, Momentum: 0.9}, n)
			dn := newOpt(t, optim.Config{Algorithm: optim.DelayedNesterov, LR: lr, Momentum: 0.9, Delay: delay}, n)
			rng := rand.New(rand.NewPCG(11, uint64(delay)))
			p := randomVector(rng, n, 1)
			q := slices.Clone(p)
			for r := range rounds {
				mean := make([]float32, n)
				for k := range delay {
					g := randomVector(rng, n, 0.1)
					before := slices.Clone(q)
					require.NoError(t, dn.Step(q, g))
					if k < delay-1 {
						for i := range q {
							assert.InDelta(t, float64(before[i])-lr*float64(g[i])/float64(delay), float64(q[i]), 1e-6, "round %d, step %d, float %d", r, k, i)
						}
					}
					for i := range mean {
						mean[i] += g[i] / float32(delay)
					}
				}
				require.NoError(t, nes.Step(p, mean))
				assertClose(t, widen(p), q, 4*float32Rel*float64(delay), 1, fmt.Sprintf("round %d", r))
			}
		})
	}
}
