package cudaemu_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/shoalml/shoal/gpu"
	"github.com/shoalml/shoal/internal/cudaemu"
)

func TestSyncing(t *testing.T) {
	src := `
#define FOR(i, n) for (int i = 0; i < n; i++)
__device__ __forceinline__ float warp(float v)
{
	return __shfl_down_sync(0xffffffffu, v, 1);
}
__device__ float viaWarp(float v) { if (v > 0) { v = warp(v); } return v; }
__device__ float plain(float v) { return v * 2; }
__device__ float declared(float v);
extern "C" __global__ void k_direct(float* x, int n) { FOR(i, n) x[i] = plain(x[i]); }
extern "C" __global__ void k_block(float* x) { x[0] = 1; __syncthreads(); }
extern "C" __global__ void k_nested(float* x) { x[0] = viaWarp(x[0]); }
extern "C" __global__ void k_prefix(float* x) { x[0] = warped(x[0]); }
`
	s := cudaemu.Syncing(src)
	assert.True(t, s["warp"])
	assert.True(t, s["viaWarp"], "through a call")
	assert.False(t, s["plain"])
	assert.False(t, s["k_direct"])
	assert.True(t, s["k_block"])
	assert.True(t, s["k_nested"], "through two calls")
	assert.False(t, s["k_prefix"], "warped( is not a call of warp")
	assert.NotContains(t, s, "declared")

	all := cudaemu.Syncing("#define SYNC __syncthreads()\n" + src)
	assert.True(t, all["k_direct"], "a barrier in a macro: every function counts")

	// Shoal's kernels: the reductions sync, the element-wise ones do not.
	k := cudaemu.Syncing(gpu.KernelSource())
	for _, name := range []string{"shoal_softmax_xent", "shoal_channel_sum", "shoal_col_sum", "block_sum", "block_argmax", "warp_sum"} {
		assert.True(t, k[name], name)
	}
	for _, name := range []string{"shoal_bias_act", "shoal_unscale", "shoal_im2col", "shoal_swap_axes", "shoal_f32_to_f16", "shoal_sgd_momentum"} {
		assert.Contains(t, k, name)
		assert.False(t, k[name], name)
	}
}
