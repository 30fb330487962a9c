package gpu

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/shoalml/shoal/internal/ringtest"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/nn/devicetest"
	"github.com/shoalml/shoal/optim"
	"github.com/stretchr/testify/require"
)

// openGPU returns device 0, or skips the test saying why there is none;
// with SHOAL_REQUIRE_GPU=1 (how the tests run on a GPU machine) it fails
// instead.
func openGPU(t testing.TB) *Device {
	t.Helper()
	d, err := NewDevice(0)
	if err != nil {
		if os.Getenv("SHOAL_REQUIRE_GPU") == "1" {
			t.Fatalf("SHOAL_REQUIRE_GPU=1 but no GPU: %v", err)
		}
		require.True(t, errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoGPU), "a machine without a GPU says so: %v", err)
		t.Skipf("no GPU: %v", err)
	}
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

func TestCUDADeviceConformance(t *testing.T) {
	d := openGPU(t)
	t.Logf("device %s", d.Name())
	devicetest.Run(t, d)
	// The device-resident ring step (one rank: a Device is one
	// goroutine's) against the ring stepping on the host.
	t.Run("ResidentRing", func(t *testing.T) { ringtest.Run(t, 1, func(int) nn.Device { return d }) })
}

// BenchmarkOptimizerStep times one optimizer step over the whole vector:
// on the GPU, the fused kernel (shoal_sgd_momentum, shoal_adam) and the
// synchronize after it, as the resident ring's step takes it, beside
// optim's step on the host, the ring's step without --device-resident.
// Vectors of the default MLP (784-256-128-10: 235,146 floats) and of 16M
// floats.
func BenchmarkOptimizerStep(b *testing.B) {
	d := openGPU(b)
	for _, n := range []int{235146, 16 << 20} {
		for _, cfg := range []optim.Config{
			{Algorithm: optim.Momentum, LR: 0.01, Momentum: 0.9},
			{Algorithm: optim.Adam, LR: 1e-3, Beta1: 0.9, Beta2: 0.999},
		} {
			b.Run(fmt.Sprintf("%s/n=%d/host", cfg.Algorithm, n), func(b *testing.B) {
				o, err := optim.New(cfg, n)
				require.NoError(b, err)
				p, g := make([]float32, n), make([]float32, n)
				b.SetBytes(int64(4 * n))
				for b.Loop() {
					if err := o.Step(p, g); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("%s/n=%d/gpu", cfg.Algorithm, n), func(b *testing.B) {
				o, err := optim.New(cfg, n)
				require.NoError(b, err)
				var mems []nn.Mem
				for range 4 { // p, g and the two slots
					m, err := d.Alloc(4 * n)
					require.NoError(b, err)
					d.Zero(m, n)
					mems = append(mems, m)
				}
				defer func() {
					for _, m := range mems {
						d.Free(m)
					}
				}()
				p, g, s1, s2 := mems[0], mems[1], mems[2], mems[3]
				require.NoError(b, d.Sync())
				b.SetBytes(int64(4 * n))
				for b.Loop() {
					s, err := o.Advance()
					if err != nil {
						b.Fatal(err)
					}
					if cfg.Algorithm == optim.Adam {
						d.Adam(p, s1, s2, g, n, s.Adam)
					} else {
						d.SGDMomentum(p, s1, g, n, s.LR, s.Momentum, s.WD, false)
					}
					if err := d.Sync(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
