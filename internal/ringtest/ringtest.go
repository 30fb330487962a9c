// Package ringtest checks the device-resident ring step
// (worker.RingConfig.Resident) on an nn.Device: a ring whose weights and
// optimizer state stay on the device ends at the weights of the same
// ring stepping on the host, and what reads the weights mid-run (an
// evaluation, the desync hash) sees the device's current ones. Package
// worker runs it on nn.HostDevice with two ranks; package gpu runs it on
// the CUDA Device (the emulator where no GPU is found) with one.
package ringtest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/collective"
	"github.com/shoalml/shoal/data"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/optim"
	"github.com/shoalml/shoal/worker"
)

// Tol is the relative (L2) distance allowed between the resident and the
// host ring's weights: float32 sums in another order, about n·2⁻²⁴ for
// the few hundred terms of a step. (The kernels round every operation as
// optim does, so on the emulator and the host device the two agree bit
// for bit; the test does not ask that of a GPU's cuBLAS.)
const Tol = 1e-5

// Steps, batch and the evaluations of each run.
const (
	steps     = 10
	batch     = 16
	evalEvery = 4
	desync    = 3
)

// Optimizers are the configurations the runs step with: every
// algorithm a device runs.
var Optimizers = []optim.Config{
	{Algorithm: optim.SGD, LR: 0.1},
	{Algorithm: optim.Momentum, LR: 0.05, Momentum: 0.9},
	{Algorithm: optim.Nesterov, LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3},
	{Algorithm: optim.Adam, LR: 1e-3, Beta1: 0.9, Beta2: 0.999},
	{Algorithm: optim.AdamW, LR: 1e-2, Beta1: 0.9, Beta2: 0.99, WeightDecay: 1e-2},
}

// Run runs the checks with a ring of ranks ranks, rank r's model on
// dev(r) (a device per rank: a Device is used by one goroutine at a
// time).
func Run(t *testing.T, ranks int, dev func(rank int) nn.Device) {
	cfg := data.DefaultSyntheticConfig()
	cfg.Train, cfg.Test = 600, 50
	train, test, err := data.Synthetic(cfg)
	require.NoError(t, err)
	for _, o := range Optimizers {
		t.Run("SameWeights/"+o.Algorithm, func(t *testing.T) {
			host := run(t, ranks, dev, o, false, train, test)
			res := run(t, ranks, dev, o, true, train, test)
			for r := range ranks {
				require.NoError(t, host.errs[r], "host ring, rank %d", r)
				require.NoError(t, res.errs[r], "resident ring, rank %d", r)
				e := relErr(res.finals[r], host.finals[r])
				t.Logf("rank %d: final weights' relative distance %.2e", r, e)
				assert.LessOrEqual(t, e, Tol, "rank %d: final weights", r)
				require.Len(t, res.evals[r], len(host.evals[r]), "rank %d: evaluations", r)
				for i := range host.evals[r] {
					h, d := host.evals[r][i], res.evals[r][i]
					assert.LessOrEqual(t, relErr(d.params, h.params), Tol, "rank %d: the weights the evaluation after step %d got", r, h.steps)
					assert.InDelta(t, h.loss, d.loss, Tol*(1+math.Abs(h.loss)), "rank %d: the test loss after step %d", r, h.steps)
				}
				assert.False(t, res.resident[r], "rank %d: the model is still in a resident run after Run", r)
			}
		})
	}
	t.Run("DesyncSeesTheDeviceWeights", func(t *testing.T) {
		if ranks < 2 {
			t.Skip("SKIP: a desynchronisation needs two ranks, and this device is checked with one")
		}
		// Rank 1's device applies its second update twice: only its
		// device's weights drift, so only a hash of those finds it.
		twice := func(r int) nn.Device {
			if r == 1 {
				return &doubleStep{Device: dev(r), at: 2}
			}
			return dev(r)
		}
		o := optim.Config{Algorithm: optim.Momentum, LR: 0.05, Momentum: 0.9}
		res := run(t, ranks, twice, o, true, train, test)
		for r, err := range res.errs {
			require.ErrorIs(t, err, worker.ErrDesync, "rank %d", r)
			assert.ErrorContains(t, err, "after step 2 the parameters of rank(s) 1 differ", "rank %d", r)
		}
	})
}

// eval is what an evaluation mid-run was given, and the loss it found.
type eval struct {
	steps  int64
	params []float32
	loss   float64
}

// result is every rank's outcome.
type result struct {
	finals   [][]float32
	evals    [][]eval
	errs     []error
	resident []bool
}

// run trains the ring, resident or on the host, and returns what each
// rank ended with and saw mid-run.
func run(t *testing.T, ranks int, dev func(int) nn.Device, o optim.Config, resident bool, train, test data.Dataset) result {
	t.Helper()
	spec := nn.Spec{Arch: "mlp", Hidden: []int{24}}
	group := collective.NewMemGroup(ranks)
	res := result{finals: make([][]float32, ranks), evals: make([][]eval, ranks), errs: make([]error, ranks), resident: make([]bool, ranks)}
	done := make(chan struct{}, ranks)
	for r := range ranks {
		go func() {
			defer func() { done <- struct{}{} }()
			defer group[r].Close()
			res.errs[r] = func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				comm, err := collective.New(group[r], collective.DefaultConfig())
				if err != nil {
					return err
				}
				m, err := nn.NewOnDevice(spec, dev(r))
				if err != nil {
					return err
				}
				defer m.Close()
				cfg := worker.RingConfig{Optimizer: o, DesyncEvery: desync}
				if r == 0 {
					cfg.Initial = make([]float32, m.Layout().Size())
					m.Init(cfg.Initial, 7)
				}
				if resident {
					cfg.Resident = m
				}
				ring, err := worker.NewRing(comm, m.Layout().Size(), cfg)
				if err != nil {
					return err
				}
				wc := worker.Config{Rank: r, WorldSize: ranks, Batch: batch, Steps: steps, Seed: 11, EvalEvery: evalEvery,
					Eval: func(ctx context.Context, steps int64, params []float32) error {
						ev, err := worker.Evaluate(ctx, m, params, test, 25)
						res.evals[r] = append(res.evals[r], eval{steps, slices.Clone(params), ev.Loss})
						return err
					}}
				w, err := worker.New(wc, m, train, ring)
				if err != nil {
					return err
				}
				defer w.Close()
				if _, err := w.Run(ctx); err != nil {
					return err
				}
				res.finals[r] = slices.Clone(w.Params())
				res.resident[r] = m.Resident()
				return nil
			}()
		}()
	}
	for range ranks {
		<-done
	}
	return res
}

// doubleStep is a device that applies its at-th optimizer update twice.
type doubleStep struct {
	nn.Device
	at, calls int
}

func (d *doubleStep) again() bool {
	d.calls++
	return d.calls == d.at
}

func (d *doubleStep) SGDMomentum(p, buf, g nn.Mem, n int, lr, mu, wd float32, nesterov bool) {
	d.Device.SGDMomentum(p, buf, g, n, lr, mu, wd, nesterov)
	if d.again() {
		d.Device.SGDMomentum(p, buf, g, n, lr, mu, wd, nesterov)
	}
}

func (d *doubleStep) Adam(p, m, v, g nn.Mem, n int, k optim.AdamStep) {
	d.Device.Adam(p, m, v, g, n, k)
	if d.again() {
		d.Device.Adam(p, m, v, g, n, k)
	}
}

// relErr is ‖a − b‖ / ‖b‖.
func relErr(a, b []float32) float64 {
	if len(a) != len(b) {
		panic(fmt.Sprintf("ringtest: vectors of %d and %d floats", len(a), len(b)))
	}
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}
