//go:build cgo

package gpu

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDevicesFromAFakeNVML reads a gcc-built NVML through go-nvml: every
// field arrives, an unsupported utilisation is -1, a failing nvmlInit and
// a missing library are ErrNoDriver with the reason. One fake per test
// process: go-nvml binds its symbols once, process-wide.
func TestDevicesFromAFakeNVML(t *testing.T) {
	src, err := os.ReadFile("testdata/fake_nvml.c")
	require.NoError(t, err)
	lib := fakeLib(t, t.TempDir(), "libnvidia-ml.so.1", string(src))

	inv, err := devicesFrom(lib)
	require.NoError(t, err)
	assert.Equal(t, lib, inv.Library)
	assert.Equal(t, "580.65.06", inv.Driver)
	assert.Equal(t, "13.0", inv.CUDA)
	require.Len(t, inv.GPUs, 2)
	assert.Equal(t, GPU{Index: 0, Name: "Fake H100 80GB HBM3", UUID: "GPU-aaaa1111", ComputeCapability: "9.0",
		MemoryTotal: 80 << 30, MemoryUsed: 1 << 30, Utilization: 42}, inv.GPUs[0])
	assert.Equal(t, -1, inv.GPUs[1].Utilization)
	assert.Equal(t, "Fake H100 80GB HBM3, compute capability 9.0, 1.0 of 80.0 GiB used, 42% busy, GPU-aaaa1111", inv.GPUs[0].String())
	assert.Contains(t, inv.GPUs[1].String(), "utilisation unknown")

	t.Setenv("FAKE_NVML_INIT", "9")
	_, err = devicesFrom(lib)
	require.ErrorIs(t, err, ErrNoDriver)
	assert.Contains(t, err.Error(), "nvmlInit: Driver Not Loaded")

	_, err = devicesFrom(filepath.Join(t.TempDir(), "libnvidia-ml.so.1"))
	require.ErrorIs(t, err, ErrNoDriver)
	assert.Contains(t, err.Error(), "no NVIDIA driver: ")
	t.Log(err)
}
