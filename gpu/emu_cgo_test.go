//go:build cgo && linux

package gpu

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/internal/cudaemu"
	"github.com/shoalml/shoal/nn"
	"github.com/shoalml/shoal/nn/devicetest"
)

// emulator builds the CUDA emulator (package cudaemu) into a folder and
// returns it. Without a C++ compiler the test skips, or fails under
// SHOAL_REQUIRE_CLANG=1 (CI installs clang-15).
func emulator(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := cudaemu.Build(dir, kernelSource); errors.Is(err, cudaemu.ErrNoCompiler) && os.Getenv(envRequireClang) != "1" {
		t.Skipf("SKIP: %v", err)
	} else {
		require.NoError(t, err)
	}
	return dir
}

// emulatedDevice opens the emulator's one device through the real loader
// and Device: the executor thread, the kernels' compile-and-cache path,
// argument packing, staging and cuBLAS calls are the production code.
func emulatedDevice(t *testing.T, dir string) *Device {
	t.Helper()
	l, err := load(searchEnv{libCUDA: filepath.Join(dir, "libcuda.so.1"), libDir: dir, glob: func(string) []string { return nil }})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "libnvrtc.so.13"), l.nvrtcPath)
	d, err := openDevice(l, 0)
	require.NoError(t, err)
	return d
}

// TestDeviceOnTheEmulator runs the conformance suite on the CUDA Device
// against a CUDA emulator on the CPU (kernels.cu compiled as C++, thread
// blocks as fibers, cuBLAS a plain loop): what a GPU cannot be asked
// here, the Go side's every call is.
func TestDeviceOnTheEmulator(t *testing.T) {
	dir := emulator(t)
	t.Setenv("SHOAL_CUDA_CACHE", t.TempDir())
	d := emulatedDevice(t, dir)
	assert.Equal(t, "cuda:0 Shoal CUDA emulator (sm_80)", d.Name())
	devicetest.Run(t, d)
	require.NoError(t, d.Close())

	// The kernels were cached: a second device loads them from there.
	cached, err := filepath.Glob(filepath.Join(CacheDir(), "kernels-*.cubin"))
	require.NoError(t, err)
	require.Len(t, cached, 1)
	d = emulatedDevice(t, dir)
	require.NoError(t, d.Close())
}

// TestALostContextEndsTheModel makes the emulator's synchronize fail as a
// lost context does (CUDA error 700): the model's step returns a NaN loss,
// Err wraps nn.ErrDevice and a sticky CUDAError, and so does every later
// step.
func TestALostContextEndsTheModel(t *testing.T) {
	dir := emulator(t)
	t.Setenv("SHOAL_CUDA_CACHE", t.TempDir())
	d := emulatedDevice(t, dir)
	defer d.Close()
	m, err := nn.NewOnDevice(nn.Spec{Arch: "mlp", Hidden: []int{8}}, d)
	require.NoError(t, err)
	defer m.Close()
	params, grads := make([]float32, m.Layout().Size()), make([]float32, m.Layout().Size())
	m.Init(params, 1)
	x, labels := make([]float32, 2*m.InputSize()), []int32{1, 2}
	loss, _ := m.ForwardBackward(params, grads, x, labels)
	require.False(t, math.IsNaN(loss))
	require.NoError(t, m.Err())

	t.Setenv("SHOAL_EMU_SYNC_ERROR", "700")
	loss, _ = m.ForwardBackward(params, grads, x, labels)
	assert.True(t, math.IsNaN(loss))
	require.ErrorIs(t, m.Err(), nn.ErrDevice)
	var ce *CUDAError
	require.ErrorAs(t, m.Err(), &ce)
	assert.True(t, ce.Sticky(), "%v", ce)
	assert.Contains(t, m.Err().Error(), "CUDA_ERROR_ILLEGAL_ADDRESS")

	t.Setenv("SHOAL_EMU_SYNC_ERROR", "")
	loss, _ = m.ForwardBackward(params, grads, x, labels)
	assert.True(t, math.IsNaN(loss), "a lost context stays lost")
}
