package machine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shoalml/shoal/gpu"
)

func TestGatherGPU(t *testing.T) {
	inv := gpu.Inventory{Library: "/usr/lib/libnvidia-ml.so.1", Driver: "580.65.06", CUDA: "13.0", GPUs: []gpu.GPU{
		{Index: 0, Name: "H100", UUID: "GPU-a", ComputeCapability: "9.0", MemoryTotal: 80 << 30, Utilization: 3},
		{Index: 1, Name: "H100", UUID: "GPU-b", ComputeCapability: "9.0", MemoryTotal: 80 << 30, Utilization: -1},
	}}
	env := func(vis string) func(string) (string, bool) {
		return func(k string) (string, bool) { return vis, k == "CUDA_VISIBLE_DEVICES" && vis != "" }
	}
	libs := func() ([]string, error) {
		return []string{"/x/libcuda.so.1", "/x/libnvrtc.so.13", "/x/libcublas.so.13"}, nil
	}
	count := func(n int) func() (int, error) { return func() (int, error) { return n, nil } }

	// CUDA_VISIBLE_DEVICES=1: CUDA sees one GPU, NVML's GPU 1.
	g := GatherGPU(env("1"), func() (gpu.Inventory, error) { return inv, nil }, libs, count(1))
	assert.True(t, g.Driver)
	assert.Equal(t, "NVIDIA driver 580.65.06 (CUDA 13.0), 2 GPU(s), NVML /usr/lib/libnvidia-ml.so.1", g.Detail)
	assert.Equal(t, []int{1}, g.Visible)
	require.Len(t, g.Ranks, 1)
	assert.Equal(t, RankDevice{LocalRank: 0, Device: "cuda:0", Why: "--device auto: local rank 0 of 1 GPU(s) gets cuda:0"}, g.Ranks[0])
	var sb strings.Builder
	writeGPU(&sb, g)
	text := sb.String()
	for _, want := range []string{"GPU 0: H100, compute capability 9.0, 0.0 of 80.0 GiB used, 3% busy, GPU-a", "GPU 1: H100", "utilisation unknown",
		"cuda:     /x/libcuda.so.1, /x/libnvrtc.so.13, /x/libcublas.so.13", "devices:  local rank 0: cuda:0", "local rank r >= 1 shares cuda:(r mod 1)",
		`CUDA_VISIBLE_DEVICES="1" leaves GPU(s) [1] as cuda:0 on`} {
		assert.Contains(t, text, want)
	}

	// Two GPUs: one rank each.
	g = GatherGPU(env(""), func() (gpu.Inventory, error) { return inv, nil }, libs, count(2))
	assert.Equal(t, []int{0, 1}, g.Visible)
	require.Len(t, g.Ranks, 2)
	assert.Equal(t, "cuda:1", g.Ranks[1].Device)

	// No driver and no CUDA: the CPU, and why.
	noDriver := func() (gpu.Inventory, error) {
		return gpu.Inventory{}, fmt.Errorf("%w: libnvidia-ml.so.1: cannot open shared object file", gpu.ErrNoDriver)
	}
	noCUDA := fmt.Errorf("%w: libcuda not loaded; tried:\n  libcuda.so.1: gone", gpu.ErrUnavailable)
	g = GatherGPU(env(""), noDriver, func() ([]string, error) { return nil, noCUDA }, func() (int, error) { return 0, noCUDA })
	assert.False(t, g.Driver)
	assert.Equal(t, "no NVIDIA driver: libnvidia-ml.so.1: cannot open shared object file", g.Detail)
	require.Len(t, g.Ranks, 1)
	assert.Equal(t, "cpu", g.Ranks[0].Device)
	sb.Reset()
	writeGPU(&sb, g)
	assert.Contains(t, sb.String(), "cuda:     not loaded, so --device cuda fails and auto means the CPU:\n          gpu: CUDA is not available: libcuda not loaded; tried:\n          libcuda.so.1: gone\n")
	assert.Contains(t, sb.String(), "devices:  --device auto: every worker on the CPU")
}

// TestInfoBinaryWithoutAndWithNVML runs the real build of shoal info,
// whose go-nvml binds NVML lazily: with no driver it must start, say "no
// NVIDIA driver" and exit 0; given a fake libnvidia-ml (SHOAL_NVML) it
// lists the fake's GPUs.
