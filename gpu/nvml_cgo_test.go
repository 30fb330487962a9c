//go:build cgo

package gpu

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeNVML is a libnvidia-ml with two GPUs, the second without
// utilisation (as a MIG device answers). FAKE_NVML_INIT=9 makes
// nvmlInit fail as it does with the kernel module unloaded.
const fakeNVML = `
#include <stdlib.h>
#include <string.h>
typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct { unsigned int gpu, memory; } util_t;
static int devs[2] = {0, 1};
int nvmlInit_v2(void) { const char *e = getenv("FAKE_NVML_INIT"); return e ? atoi(e) : 0; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return r == 9 ? "Driver Not Loaded" : r == 3 ? "Not Supported" : "Unknown Error"; }
int nvmlSystemGetDriverVersion(char *v, unsigned n) { strncpy(v, "580.65.06", n); return 0; }
int nvmlSystemGetCudaDriverVersion(int *v) { *v = 13000; return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **d) { if (i > 1) return 2; *d = &devs[i]; return 0; }
int nvmlDeviceGetName(void *d, char *s, unsigned n) { strncpy(s, *(int *)d ? "Fake H200" : "Fake H100 80GB HBM3", n); return 0; }
int nvmlDeviceGetUUID(void *d, char *s, unsigned n) { strncpy(s, *(int *)d ? "GPU-bbbb2222" : "GPU-aaaa1111", n); return 0; }
int nvmlDeviceGetMemoryInfo(void *d, mem_t *m) { m->total = 85899345920ULL; m->used = 1073741824ULL; m->free = m->total - m->used; return 0; }
int nvmlDeviceGetCudaComputeCapability(void *d, int *major, int *minor) { *major = 9; *minor = 0; return 0; }
int nvmlDeviceGetUtilizationRates(void *d, util_t *u) { if (*(int *)d) return 3; u->gpu = 42; u->memory = 7; return 0; }
`

// TestDevicesFromAFakeNVML reads a gcc-built NVML through go-nvml: every
// field arrives, an unsupported utilisation is -1, a failing nvmlInit and
// a missing library are ErrNoDriver with the reason. One fake per test
// process: go-nvml binds its symbols once, process-wide.
func TestDevicesFromAFakeNVML(t *testing.T) {
	lib := fakeLib(t, t.TempDir(), "libnvidia-ml.so.1", fakeNVML)

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
