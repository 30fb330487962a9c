package gpu

import (
	"errors"
	"os"
	"testing"

	"github.com/shoalml/shoal/internal/ringtest"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/nn/devicetest"
	"github.com/stretchr/testify/require"
)

// openGPU returns device 0, or skips the test saying why there is none;
// with SHOAL_REQUIRE_GPU=1 (how the tests run on a GPU machine) it fails
// instead.
func openGPU(t *testing.T) *Device {
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
