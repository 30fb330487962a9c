// prelude.h stands in for what NVRTC provides built in, so that clang
// (Debian's clang-15, no CUDA installed) can compile kernels.cu to PTX as a
// syntax and type check (see kernels_test.go). Test-only: NVRTC on the GPU
// machine is the real compiler, and this PTX is never run. Math functions
// are forwarded to libdevice names, left unresolved in the PTX.
//
//	clang-15 -x cuda --cuda-device-only -nocudainc -nocudalib \
//	  --cuda-gpu-arch=sm_80 -fms-extensions -include prelude.h \
//	  -S -o out.ptx kernels.cu

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))

// threadIdx, blockIdx, blockDim, gridDim: .x reads a PTX special register
// (a property, hence -fms-extensions), as in clang's own
// __clang_cuda_builtin_vars.h.
#define SHOAL_SREG(F, R)                                                     \
	__declspec(property(get = __get_##F)) unsigned int F;                  \
	static __device__ __forceinline__ unsigned int __get_##F(void) { return R(); }
struct __shoal_tid_t {
	SHOAL_SREG(x, __nvvm_read_ptx_sreg_tid_x)
	SHOAL_SREG(y, __nvvm_read_ptx_sreg_tid_y)
	SHOAL_SREG(z, __nvvm_read_ptx_sreg_tid_z)
};
struct __shoal_ctaid_t {
	SHOAL_SREG(x, __nvvm_read_ptx_sreg_ctaid_x)
	SHOAL_SREG(y, __nvvm_read_ptx_sreg_ctaid_y)
	SHOAL_SREG(z, __nvvm_read_ptx_sreg_ctaid_z)
};
struct __shoal_ntid_t {
	SHOAL_SREG(x, __nvvm_read_ptx_sreg_ntid_x)
	SHOAL_SREG(y, __nvvm_read_ptx_sreg_ntid_y)
	SHOAL_SREG(z, __nvvm_read_ptx_sreg_ntid_z)
};
struct __shoal_nctaid_t {
	SHOAL_SREG(x, __nvvm_read_ptx_sreg_nctaid_x)
	SHOAL_SREG(y, __nvvm_read_ptx_sreg_nctaid_y)
	SHOAL_SREG(z, __nvvm_read_ptx_sreg_nctaid_z)
};
#undef SHOAL_SREG
extern const __device__ __shoal_tid_t threadIdx;
extern const __device__ __shoal_ctaid_t blockIdx;
extern const __device__ __shoal_ntid_t blockDim;
extern const __device__ __shoal_nctaid_t gridDim;
#define warpSize 32

// Math: libdevice.
extern "C" __device__ float __nv_expf(float);
extern "C" __device__ float __nv_logf(float);
extern "C" __device__ float __nv_log1pf(float);
static __device__ __forceinline__ float expf(float x) { return __nv_expf(x); }
static __device__ __forceinline__ float logf(float x) { return __nv_logf(x); }
static __device__ __forceinline__ float log1pf(float x) { return __nv_log1pf(x); }

// Arithmetic rounded to nearest even, never contracted into an FMA: PTX
// with an explicit .rn, as NVRTC emits (clang folds its __nvvm_*_rn_f
// builtins into plain, contractible operations).
#define SHOAL_RN(OP, INS)                                                    \
	static __device__ __forceinline__ float OP(float a, float b)           \
	{                                                                      \
		float r;                                                       \
		asm(INS ".rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));      \
		return r;                                                      \
	}
SHOAL_RN(__fadd_rn, "add")
SHOAL_RN(__fsub_rn, "sub")
SHOAL_RN(__fmul_rn, "mul")
SHOAL_RN(__fdiv_rn, "div")
#undef SHOAL_RN
static __device__ __forceinline__ float __fsqrt_rn(float a)
{
	float r;
	asm("sqrt.rn.f32 %0, %1;" : "=f"(r) : "f"(a));
	return r;
}

// Bit casts.
static __device__ __forceinline__ unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
static __device__ __forceinline__ float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }

// Warp shuffles over the whole warp (width 32), in inline PTX: clang's
// __nvvm_shfl_sync_* builtins need a PTX version feature that clang does not
// enable without a CUDA installation. __syncthreads is a clang builtin.
#define SHOAL_SHFL(T, C, OP, U)                                              \
	static __device__ __forceinline__ T OP(unsigned int mask, T v, U d)    \
	{                                                                      \
		T r;                                                           \
		asm volatile("shfl.sync." C ".b32 %0, %1, %2, 0x1f, %3;"        \
			     : "=r"(r) : "r"(v), "r"(d), "r"(mask));           \
		return r;                                                      \
	}
SHOAL_SHFL(int, "down", __shfl_down_sync, unsigned int)
SHOAL_SHFL(int, "idx", __shfl_sync, int)
#undef SHOAL_SHFL
static __device__ __forceinline__ float __shfl_down_sync(unsigned int mask, float v, unsigned int d)
{
	return __uint_as_float(__shfl_down_sync(mask, (int)__float_as_uint(v), d));
}
static __device__ __forceinline__ float __shfl_sync(unsigned int mask, float v, int lane)
{
	return __uint_as_float(__shfl_sync(mask, (int)__float_as_uint(v), lane));
}
