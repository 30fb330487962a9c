//go:build cgo && linux

package gpu

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/internal/cudaemu"
	"github.com/shoalml/shoal/internal/dl"
	"github.com/shoalml/shoal/internal/ringtest"
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
	t.Run("ResidentRing", func(t *testing.T) { ringtest.Run(t, 1, func(int) nn.Device { return d }) })
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

// graphLaunches reads the emulator's count of cuGraphLaunch calls.
func graphLaunches(t *testing.T, dir string) int64 {
	t.Helper()
	h, err := dl.Open(filepath.Join(dir, "libcuda.so.1"))
	require.NoError(t, err)
	defer h.Close()
	p, err := h.Sym(cudaemu.GraphLaunchesSymbol)
	require.NoError(t, err)
	return *(*int64)(p)
}

// TestGraphsOnTheEmulator captures models' steps as CUDA graphs on the
// emulator (which records the captured launches, copies and GEMMs and
// replays them) and checks them bit for bit against the same steps
// launched one by one (devicetest.Graphs), and that the replays were
// graph launches of the driver's.
func TestGraphsOnTheEmulator(t *testing.T) {
	dir := emulator(t)
	t.Setenv("SHOAL_CUDA_CACHE", t.TempDir())
	d := emulatedDevice(t, dir)
	defer d.Close()
	before := graphLaunches(t, dir)
	devicetest.Graphs(t, d)
	// 3 precisions × 2 models × 3 kinds of step × 3 replays each.
	assert.Equal(t, int64(3*2*3*3), graphLaunches(t, dir)-before)
}

// TestGraphsFallBackOnTheEmulator: where the driver refuses a capture, or lacks the
// graph functions, or a capture breaks, the model says why once, turns
// graphs off and computes what it would have op by op.
func TestGraphsFallBackOnTheEmulator(t *testing.T) {
	dir := emulator(t)
	t.Setenv("SHOAL_CUDA_CACHE", t.TempDir())
	d := emulatedDevice(t, dir)
	defer d.Close()
	spec := nn.Spec{Arch: "mlp", Hidden: []int{8}}

	steps := func(t *testing.T, m *nn.DeviceModel) []float32 {
		params, grads := make([]float32, m.Layout().Size()), make([]float32, m.Layout().Size())
		m.Init(params, 1)
		x, labels := make([]float32, 2*m.InputSize()), []int32{1, 2}
		for i := range x {
			x[i] = float32(i%7) / 7
		}
		for range 3 {
			loss, _ := m.ForwardBackward(params, grads, x, labels)
			require.False(t, math.IsNaN(loss), "%v", m.Err())
		}
		return grads
	}
	eager, err := nn.NewOnDevice(spec, d)
	require.NoError(t, err)
	defer eager.Close()
	eager.SetGraphs(false, nil)
	want := steps(t, eager)

	for _, tc := range []struct {
		name, why string
		setup     func(t *testing.T)
	}{
		{"refused", "CUDA_ERROR_NOT_SUPPORTED", func(t *testing.T) { t.Setenv("SHOAL_EMU_NO_GRAPHS", "1") }},
		{"no graph functions", "lacks cuGraphLaunch", func(t *testing.T) {
			missing := d.l.graphsMissing
			d.l.graphsMissing = []string{"cuGraphLaunch"}
			t.Cleanup(func() { d.l.graphsMissing = missing })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup(t)
			var log bytes.Buffer
			m, err := nn.NewOnDevice(spec, d)
			require.NoError(t, err)
			defer m.Close()
			m.SetGraphs(true, slog.New(slog.NewTextHandler(&log, nil)))
			got := steps(t, m)
			assert.Equal(t, want, got)
			replays, off := m.Graphs()
			assert.Zero(t, replays)
			assert.Contains(t, off, tc.why)
			assert.Equal(t, 1, strings.Count(log.String(), "CUDA graphs off"), log.String())
		})
	}

	t.Run("broken capture", func(t *testing.T) {
		require.NoError(t, d.BeginCapture())
		require.Error(t, d.Sync(), "synchronizing while capturing")
		_, err := d.EndCapture()
		assert.ErrorContains(t, err, "CUDA_ERROR_STREAM_CAPTURE")
		require.NoError(t, d.Sync(), "the device is as before the capture")
		m, err := nn.NewOnDevice(spec, d)
		require.NoError(t, err)
		defer m.Close()
		assert.Equal(t, want, steps(t, m), "and computes")
	})
}

// TestReplayMisuseOnTheEmulator: a graph replayed with host memory of other lengths
// panics; replayed twice without a Sync, it fails the device's next Sync.
func TestReplayMisuseOnTheEmulator(t *testing.T) {
	dir := emulator(t)
	t.Setenv("SHOAL_CUDA_CACHE", t.TempDir())
	d := emulatedDevice(t, dir)
	defer d.Close()
	m, err := d.Alloc(16)
	require.NoError(t, err)
	defer d.Free(m)
	require.NoError(t, d.BeginCapture())
	d.Upload(m, make([]byte, 16))
	d.Zero(m.Slice(0, 2), 2)
	d.Download(make([]byte, 16), m)
	g, err := d.EndCapture()
	require.NoError(t, err)
	defer d.Release(g)

	up := []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}
	down := make([]byte, 16)
	d.Replay(g, [][]byte{up}, [][]byte{down})
	require.NoError(t, d.Sync())
	assert.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0}, down, "uploaded, two zeroed, downloaded")

	assert.PanicsWithValue(t, "gpu: Replay: upload 0 of 8 bytes, captured with 16", func() { d.Replay(g, [][]byte{up[:8]}, [][]byte{down}) })
	assert.Panics(t, func() { d.Replay(g, nil, [][]byte{down}) })
	d.Replay(g, [][]byte{up}, [][]byte{down})
	d.Replay(g, [][]byte{up}, [][]byte{down})
	assert.ErrorContains(t, d.Sync(), "replayed twice without a Sync")
	require.NoError(t, d.Sync())
}
