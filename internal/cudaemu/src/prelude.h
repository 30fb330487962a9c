// prelude.h lets kernels.cu compile as C++ for the CPU, inside the CUDA
// emulator of the tests (runtime.cpp, cudaemu.go): the built-ins NVRTC
// provides become the emulator's globals and functions. Compile with
// -ffp-contract=off, so __fadd_rn and friends round as on the GPU.
#include <math.h>
#include <string.h>

#define __global__
#define __device__ static
#define __host__
#define __forceinline__ inline
#define __shared__ static

struct shoal_emu_dim3 {
	unsigned int x, y, z;
};
// Set by the emulator's scheduler for the thread it runs.
extern shoal_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define warpSize 32

void __syncthreads(void);
unsigned int shoal_emu_shfl(unsigned int v, int src, int down);
static inline int __shfl_down_sync(unsigned int, int v, unsigned int d) { return (int)shoal_emu_shfl((unsigned int)v, (int)d, 1); }
static inline int __shfl_sync(unsigned int, int v, int lane) { return (int)shoal_emu_shfl((unsigned int)v, lane, 0); }
static inline unsigned int __float_as_uint(float x)
{
	unsigned int u;
	memcpy(&u, &x, 4);
	return u;
}
static inline float __uint_as_float(unsigned int u)
{
	float x;
	memcpy(&x, &u, 4);
	return x;
}
static inline float __shfl_down_sync(unsigned int, float v, unsigned int d) { return __uint_as_float(shoal_emu_shfl(__float_as_uint(v), (int)d, 1)); }
static inline float __shfl_sync(unsigned int, float v, int lane) { return __uint_as_float(shoal_emu_shfl(__float_as_uint(v), lane, 0)); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
