// kernels.cu: the CUDA C kernels of Shoal's GPU backend (package gpu).
//
// The Go side embeds this file and NVRTC compiles it at run time for the
// device's sm_XY. It includes no header: NVRTC provides __global__,
// threadIdx, expf, __shfl_down_sync and the rest built in. Tests compile it
// with clang-15 and testdata/prelude.h in their place (kernels_test.go).
// Compile with NVRTC's defaults -ftz=false and -prec-div=true (no
// --use_fast_math): shoal_sgd_momentum and the half conversions are
// bit-exact only then.
//
// Conventions: float32 data; int counts, each of which fits in an int32.
// Unless its comment says otherwise, a kernel is launched with blocks of
// 256 threads and grid = min(ceil(N/256), 65535) for the N its comment
// names. Kernels loop grid-stride, with 64-bit indices that cannot
// overflow, so any grid is correct. Kernels with block reductions need
// blockDim.x to be a multiple of 32, at most 1024.

#define SHOAL_FULL_MASK 0xffffffffu
#define SHOAL_NEG_INF (__uint_as_float(0xff800000u))
#define SHOAL_INT_MAX 0x7fffffff

// Grid-stride loop over [0, n) with a 64-bit index i.
#define SHOAL_FOR(i, n)                                                        \
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;   \
	     i < (long long)(n); i += (long long)blockDim.x * gridDim.x)

// ---- Block reductions ----------------------------------------------------
// Every thread of the block must call them (they synchronize), with
// blockDim.x a multiple of 32 and at most 1024. They return the result in
// every thread. The order of the operations depends only on blockDim.x, so
// results are deterministic.

// warp_sum returns in lane 0 the sum of v over the warp.
__device__ __forceinline__ float warp_sum(float v)
{
	for (int d = 16; d > 0; d >>= 1)
		v += __shfl_down_sync(SHOAL_FULL_MASK, v, d);
	return v;
}

// block_sum returns the sum of v over the block; sh is 32 floats of
// shared memory.
__device__ float block_sum(float v, float* sh)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	v = warp_sum(v);
	__syncthreads(); // a previous call may still be reading sh
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	// Every warp reduces the per-warp sums, in the same order.
	v = lane < (int)(blockDim.x >> 5) ? sh[lane] : 0.0f;
	v = warp_sum(v);
	return __shfl_sync(SHOAL_FULL_MASK, v, 0);
}

// take_max replaces (v, i) by (w, j) if w is larger, or equal with a
// smaller index. A NaN is never taken.
__device__ __forceinline__ void take_max(float& v, int& i, float w, int j)
{
	if (w > v || (w == v && j < i)) {
		v = w;
		i = j;
	}
}

// block_argmax sets (v, i) to the largest v over the block and the smallest
// i among those that hold it. The identity is (-Inf, SHOAL_INT_MAX). sv and
// si are 32 floats and 32 ints of shared memory.
__device__ void block_argmax(float& v, int& i, float* sv, int* si)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	for (int d = 16; d > 0; d >>= 1) {
		float w = __shfl_down_sync(SHOAL_FULL_MASK, v, d);
		int j = __shfl_down_sync(SHOAL_FULL_MASK, i, d);
		take_max(v, i, w, j);
	}
	__syncthreads();
	if (lane == 0) {
		sv[warp] = v;
		si[warp] = i;
	}
	__syncthreads();
	if (lane < (int)(blockDim.x >> 5)) {
		v = sv[lane];
		i = si[lane];
	} else {
		v = SHOAL_NEG_INF;
		i = SHOAL_INT_MAX;
	}
	for (int d = 16; d > 0; d >>= 1) {
		float w = __shfl_down_sync(SHOAL_FULL_MASK, v, d);
		int j = __shfl_down_sync(SHOAL_FULL_MASK, i, d);
		take_max(v, i, w, j);
	}
	v = __shfl_sync(SHOAL_FULL_MASK, v, 0);
	i = __shfl_sync(SHOAL_FULL_MASK, i, 0);
}

// ---- Dense layers --------------------------------------------------------

// shoal_bias_act adds b[j] to column j of y (rows×cols) and, if relu != 0,
// applies a ReLU: as nn's addBias for dense layers, max(v, 0) with Go's
// max, so a NaN stays NaN and -0 becomes +0. N = rows·cols.
extern "C" __global__ void shoal_bias_act(float* y, const float* b, int rows, int cols, int relu)
{
	SHOAL_FOR(t, (long long)rows * cols)
	{
		int i = (int)t;
		float v = y[i] + b[i % cols];
		if (relu != 0)
			v = v <= 0.0f ? 0.0f : v;
		y[i] = v;
	}
}

// shoal_relu_backward sets dy[i] = 0 where y[i] is not > 0 (a NaN
// included), as nn's reluGrad. N = n.
extern "C" __global__ void shoal_relu_backward(float* dy, const float* y, int n)
{
	SHOAL_FOR(i, n)
	{
		if (!(y[i] > 0.0f))
			dy[i] = 0.0f;
	}
}

// shoal_col_sum overwrites out (cols) with the column sums of x
// (rows×cols), the bias gradient. Each block takes 32 columns at a time,
// one per lane; its blockDim.x/32 row slices each sum rows slice,
// slice + slices, … in order, and then the slices' sums are added in
// order: a fixed order, so every run and every graph replay gives the
// same bits, within rounding of nn's row-by-row sum (one thread per
// column summing every row, nn's order, took milliseconds at 4,096 rows).
// Unless y is null (a ReLU's output, rows×cols), x is first zeroed in
// place where y is not > 0, as shoal_relu_backward: the ReLU's backward
// fused into the sum, one pass over x instead of two. Launched with a
// block of a multiple of 32 threads, at most 1024; any grid.
extern "C" __global__ void shoal_col_sum(float* out, float* x, const float* y, int rows, int cols)
{
	__shared__ float part[1024]; // a slice's sum per thread
	int lane = threadIdx.x & 31, slice = threadIdx.x >> 5, slices = blockDim.x >> 5;
	for (long long c0 = (long long)blockIdx.x * 32; c0 < cols; c0 += (long long)gridDim.x * 32) {
		long long c = c0 + lane;
		float s = 0.0f;
		if (c < cols) {
			for (int r = slice; r < rows; r += slices) {
				long long i = (long long)r * cols + c;
				if (y != 0 && !(y[i] > 0.0f))
					x[i] = 0.0f;
				s += x[i];
			}
		}
		__syncthreads(); // the previous columns' sums are read
		part[threadIdx.x] = s;
		__syncthreads();
		if (slice == 0 && c < cols) {
			float t = 0.0f;
			for (int k = 0; k < slices; k++)
				t += part[k * 32 + lane];
			out[c] = t;
		}
	}
}

// ---- Loss ----------------------------------------------------------------

// shoal_softmax_xent computes, per row r of the logits z (rows×classes),
// the loss loss[r] = logsumexp(z_r) - z_r[label], correct[r] = 1 if the
// first largest logit is the label's (else 0) and, unless dz is null, the
// gradient dz_r = (softmax(z_r) - onehot(label))·scale. Labels must lie in
// [0, classes). Launched with grid = rows, block = 128 (any grid; a
// multiple of 32 threads, at most 1024).
//
// With m = z_r[arg] the maximum and rest = Σ_{j≠arg} exp(z_j - m), the
// sum of the shifted exponentials is exactly 1 + rest, so
// loss = (m - z_label) + log1p(rest) and, for the label when it is arg,
// softmax - 1 = -rest/(1 + rest): no cancellation when the prediction is
// confident.
extern "C" __global__ void shoal_softmax_xent(const float* z, const int* labels, float* dz, float* loss,
					      int* correct, int rows, int classes, float scale)
{
	__shared__ float sv[32];
	__shared__ int si[32];
	for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
		const float* zr = z + r * classes;
		int label = labels[r];

		float m = SHOAL_NEG_INF;
		int arg = SHOAL_INT_MAX;
		for (int j = threadIdx.x; j < classes; j += blockDim.x)
			take_max(m, arg, zr[j], j);
		block_argmax(m, arg, sv, si);

		float rest = 0.0f;
		for (int j = threadIdx.x; j < classes; j += blockDim.x)
			if (j != arg)
				rest += expf(zr[j] - m);
		rest = block_sum(rest, sv);
		float sum = 1.0f + rest;

		if (threadIdx.x == 0) {
			loss[r] = (m - zr[label]) + log1pf(rest);
			correct[r] = arg == label ? 1 : 0;
		}
		if (dz == 0)
			continue;
		float* dzr = dz + r * classes;
		for (int j = threadIdx.x; j < classes; j += blockDim.x) {
			float q;
			if (j == label && j == arg) {
				q = -rest / sum;
			} else {
				q = expf(zr[j] - m) / sum;
				if (j == label)
					q -= 1.0f;
			}
			dzr[j] = q * scale;
		}
	}
}

// ---- Optimizer -----------------------------------------------------------

// shoal_sgd_momentum is optim's stepMomentum on p, buf and g (n each):
// g' = g + wd·p (if wd != 0); buf = mu·buf + g'; g' = g' + mu·buf
// (nesterov != 0) or buf; p -= lr·g'. Every operation is rounded to float32
// on its own (the _rn intrinsics are never fused into an FMA), so p and buf
// are bit-identical to the Go code's. N = n.
extern "C" __global__ void shoal_sgd_momentum(float* p, float* buf, const float* g, int n, float lr, float mu,
					      float wd, int nesterov)
{
	SHOAL_FOR(i, n)
	{
		float pi = p[i];
		float gi = g[i];
		if (wd != 0.0f)
			gi = __fadd_rn(gi, __fmul_rn(wd, pi));
		float b = __fadd_rn(__fmul_rn(mu, buf[i]), gi);
		buf[i] = b;
		if (nesterov != 0)
			gi = __fadd_rn(gi, __fmul_rn(mu, b));
		else
			gi = b;
		p[i] = __fsub_rn(pi, __fmul_rn(lr, gi));
	}
}

// shoal_adam is optim's stepAdam on p, m, v and g (n each), PyTorch's
// single-tensor Adam and AdamW: g' = g + wd·p (if wd != 0); m = lerp(m,
// g', weight) (m + weight·(g' - m), or g' - (g' - m)·(1 - weight) when
// weight >= 0.5, as torch.lerp); v = beta2·v + (one_min_b2·g')·g';
// p = p·decay (if decay != 1: AdamW's decoupled decay) - (step_size·m) /
// (sqrt(v)/bc2_sqrt + eps). The scalars are optim.AdamStep's. Every
// operation is rounded to float32 on its own (sqrt and the divisions
// correctly rounded), so p, m and v are bit-identical to the Go code's.
// N = n.
extern "C" __global__ void shoal_adam(float* p, float* m, float* v, const float* g, int n, float step_size,
				      float bc2_sqrt, float weight, float beta2, float one_min_b2, float eps, float wd,
				      float decay)
{
	int small = weight < 0.5f;
	float one_min_w = __fsub_rn(1.0f, weight);
	SHOAL_FOR(i, n)
	{
		float pi = p[i];
		float gi = g[i];
		if (wd != 0.0f)
			gi = __fadd_rn(gi, __fmul_rn(wd, pi));
		float mi = m[i];
		if (small)
			mi = __fadd_rn(mi, __fmul_rn(weight, __fsub_rn(gi, mi)));
		else
			mi = __fsub_rn(gi, __fmul_rn(__fsub_rn(gi, mi), one_min_w));
		m[i] = mi;
		float vi = __fadd_rn(__fmul_rn(v[i], beta2), __fmul_rn(__fmul_rn(one_min_b2, gi), gi));
		v[i] = vi;
		float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
		if (decay != 1.0f)
			pi = __fmul_rn(pi, decay);
		p[i] = __fsub_rn(pi, __fdiv_rn(__fmul_rn(step_size, mi), denom));
	}
}

// shoal_unscale multiplies the n gradients g by s (rounded to float32, as
// nn's HostDevice does) and sets *found to 1 if any product is NaN or
// infinite (all exponent bits set), leaving it alone otherwise: dynamic
// loss scaling's unscale-and-check. Threads that find one race to store
// the same 1. N = n.
extern "C" __global__ void shoal_unscale(float* g, int n, float s, int* found)
{
	SHOAL_FOR(i, n)
	{
		float v = __fmul_rn(g[i], s);
		g[i] = v;
		if ((__float_as_uint(v) & 0x7f800000u) == 0x7f800000u)
			*found = 1;
	}
}

// ---- Convolution ---------------------------------------------------------

// shoal_im2col writes col ((c·kh·kw)×(n·oh·ow)), the receptive fields of
// n samples x (n×c×h×w), stride 1, zero padding pad, as nn's im2col per
// sample with the samples side by side: row (ci·kh+i)·kw+j, column
// s·oh·ow + oy·ow+ox holds sample s's x[ci][oy+i-pad][ox+j-pad], or 0
// outside the image; so one GEMM convolves the batch. N = c·kh·kw·n·oh·ow,
// one thread per entry of col.
extern "C" __global__ void shoal_im2col(const float* x, float* col, int n, int c, int h, int w, int kh, int kw,
					int pad, int oh, int ow)
{
	long long cols = (long long)n * oh * ow;
	SHOAL_FOR(t, (long long)c * kh * kw * cols)
	{
		long long r = t / cols;
		int q = (int)(t - r * cols);
		int ox = q % ow;
		q /= ow;
		int oy = q % oh;
		int s = q / oh;
		int rr = (int)r;
		int j = rr % kw;
		rr /= kw;
		int i = rr % kh;
		int ci = rr / kh;
		int iy = oy + i - pad, ix = ox + j - pad;
		float v = 0.0f;
		if (iy >= 0 && iy < h && ix >= 0 && ix < w)
			v = x[(((long long)s * c + ci) * h + iy) * w + ix];
		col[t] = v;
	}
}

// shoal_col2im is the adjoint of shoal_im2col: it OVERWRITES dx
// (n×c×h×w) with, per element, the sum of the entries of col that
// im2col copied from it. (nn's col2im adds onto dx, which its caller
// clears first; this is that pair.) Each thread gathers one element's sum,
// taps (i, j) in row-major order from 0, the order in which nn's col2im
// adds them, so no atomics and the same bits. N = n·c·h·w.
extern "C" __global__ void shoal_col2im(const float* col, float* dx, int n, int c, int h, int w, int kh, int kw,
					int pad, int oh, int ow)
{
	long long cols = (long long)n * oh * ow;
	SHOAL_FOR(t, (long long)n * c * h * w)
	{
		long long q = t;
		int ix = (int)(q % w);
		q /= w;
		int iy = (int)(q % h);
		q /= h;
		int ci = (int)(q % c);
		int sm = (int)(q / c);
		float s = 0.0f;
		for (int i = 0; i < kh; i++) {
			int oy = iy - i + pad;
			if (oy < 0 || oy >= oh)
				continue;
			for (int j = 0; j < kw; j++) {
				int ox = ix - j + pad;
				if (ox < 0 || ox >= ow)
					continue;
				s += col[(long long)((ci * kh + i) * kw + j) * cols + (long long)sm * oh * ow + oy * ow + ox];
			}
		}
		dx[t] = s;
	}
}

// shoal_swap_axes writes src (a×b×c) into dst as b×a×c: dst[j][i][k] =
// src[i][j][k]. N = a·b·c, one thread per element of dst.
extern "C" __global__ void shoal_swap_axes(float* dst, const float* src, int a, int b, int c)
{
	SHOAL_FOR(t, (long long)a * b * c)
	{
		long long q = t / c;
		int k = (int)(t - q * c);
		int i = (int)(q % a);
		long long j = q / a;
		dst[t] = src[((long long)i * b + j) * c + k];
	}
}

// shoal_channel_bias_act adds b[ch] to every value of channel ch of y
// (n×c×hw) and, if relu != 0, applies a ReLU as nn's addBias does for
// convolutions: v < 0 becomes 0, so a NaN stays NaN and -0 stays -0. For
// hw == 1 addBias runs its dense path (-0 becomes +0): call shoal_bias_act
// with rows = n, cols = c to match it. N = n·c·hw.
extern "C" __global__ void shoal_channel_bias_act(float* y, const float* b, int n, int c, int hw, int relu)
{
	SHOAL_FOR(t, (long long)n * c * hw)
	{
		int i = (int)t;
		float v = y[i] + b[(i / hw) % c];
		if (relu != 0)
			v = v < 0.0f ? 0.0f : v;
		y[i] = v;
	}
}

// sum32 is nn's sum32: the sum of v[0:n] in eight partial sums, combined
// pairwise, in the same order.
__device__ float sum32(const float* v, int n)
{
	float a[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
	int i = 0;
	for (; i + 8 <= n; i += 8) {
#pragma unroll
		for (int k = 0; k < 8; k++)
			a[k] += v[i + k];
	}
#pragma unroll
	for (int k = 0; k < 8; k++)
		if (i + k < n)
			a[k] += v[i + k];
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// relu_mask zeroes v[0:n] where y[0:n] is not > 0, as
// shoal_relu_backward.
__device__ void relu_mask(float* v, const float* y, int n)
{
	for (int i = 0; i < n; i++)
		if (!(y[i] > 0.0f))
			v[i] = 0.0f;
}

// shoal_channel_sum overwrites out (c) with the sum of each channel of x
// (n×c×hw) over samples and positions, the convolution's bias gradient.
// Bit-identical to nn's conv backward: each sample's plane summed as
// sum32 does, the samples added in order from 0. Unless y is null (a
// ReLU's output, n×c×hw), each plane of x is first zeroed in place where
// y is not > 0 (the ReLU's backward, fused). Launched with grid = c,
// block = 256 (any grid, any block size).
extern "C" __global__ void shoal_channel_sum(float* out, float* x, const float* y, int n, int c, int hw)
{
	__shared__ float part[1024]; // a plane sum per thread
	for (long long ch = blockIdx.x; ch < c; ch += gridDim.x) {
		float acc = 0.0f;
		for (int s0 = 0; s0 < n; s0 += blockDim.x) {
			int s = s0 + threadIdx.x;
			__syncthreads(); // thread 0 may still be reading part
			if (s < n) {
				long long plane = ((long long)s * c + ch) * hw;
				if (y != 0)
					relu_mask(x + plane, y + plane, hw);
				part[threadIdx.x] = sum32(x + plane, hw);
			}
			__syncthreads();
			if (threadIdx.x == 0) {
				int m = n - s0 < (int)blockDim.x ? n - s0 : (int)blockDim.x;
				for (int k = 0; k < m; k++)
					acc += part[k];
			}
		}
		if (threadIdx.x == 0)
			out[ch] = acc;
	}
}

// ---- Max pooling ---------------------------------------------------------

// shoal_maxpool_forward takes the maximum of each k×k window, stride k, of
// x (n×c×h×w) into y (n×c×oh×ow, oh = h/k, ow = w/k): the window is scanned
// row by row and the first maximum kept (strict >), as nn's maxPool2D
// forward; arg gets its index within the sample, ci·h·w + iy·w + ix.
// N = n·c·oh·ow, one thread per output.
extern "C" __global__ void shoal_maxpool_forward(const float* x, float* y, int* arg, int n, int c, int h, int w, int k)
{
	if (k <= 0)
		return;
	int oh = h / k, ow = w / k;
	SHOAL_FOR(t, (long long)n * c * oh * ow)
	{
		int q = (int)t;
		int ox = q % ow;
		q /= ow;
		int oy = q % oh;
		q /= oh;
		int ci = q % c;
		int s = q / c;
		const float* xs = x + (long long)s * c * h * w;
		int base = ci * h * w;
		int best = base + oy * k * w + ox * k;
		float bv = xs[best];
		for (int i = 0; i < k; i++) {
			for (int j = 0; j < k; j++) {
				int at = base + (oy * k + i) * w + ox * k + j;
				float v = xs[at];
				if (v > bv) {
					bv = v;
					best = at;
				}
			}
		}
		y[t] = bv;
		arg[t] = best;
	}
}

// shoal_maxpool_backward OVERWRITES dx (n×c×h×w): each input element gets
// dy[o] if it is arg[o] of the window o that contains it (windows do not
// overlap), else 0, as are the rows and columns no window covers. It is
// 0 + dy[o] as in nn, which clears dx and adds: a -0 becomes +0.
// N = n·c·h·w, one thread per input element.
extern "C" __global__ void shoal_maxpool_backward(const float* dy, const int* arg, float* dx, int n, int c, int h, int w,
						  int k)
{
	if (k <= 0)
		return;
	int oh = h / k, ow = w / k;
	SHOAL_FOR(t, (long long)n * c * h * w)
	{
		int q = (int)t;
		int ix = q % w;
		q /= w;
		int iy = q % h;
		q /= h;
		int ci = q % c;
		int s = q / c;
		int oy = iy / k, ox = ix / k;
		float v = 0.0f;
		if (oy < oh && ox < ow) {
			int o = ((s * c + ci) * oh + oy) * ow + ox;
			if (arg[o] == (ci * h + iy) * w + ix)
				v = __fadd_rn(0.0f, dy[o]);
		}
		dx[t] = v;
	}
}

// ---- 16-bit floats -------------------------------------------------------
// Bit-identical to package wire's float16Bits, float16Float32, bfloat16Bits
// and bfloat16Float32: round to nearest even, overflow to ±Inf, NaN quieted
// and kept NaN, float16 subnormals kept. N = n for each.

#define SHOAL_F16_MIN_NORMAL (113u << 23) // 2⁻¹⁴, the smallest normal half
#define SHOAL_F16_OVERFLOW (143u << 23)   // 2¹⁶: at or above, a half is Inf
#define SHOAL_F32_INF 0x7f800000u
#define SHOAL_F16_REBIAS (112u << 23)   // float32 minus half exponent bias
#define SHOAL_F16_DENORM_MAGIC (126u << 23) // 0.5: aligns subnormal halves

__device__ __forceinline__ unsigned short f16_bits(float f)
{
	unsigned int u = __float_as_uint(f);
	unsigned int a = u & 0x7fffffffu;
	unsigned int sign = (u >> 16) & 0x8000u;
	if (a - SHOAL_F16_MIN_NORMAL < SHOAL_F16_OVERFLOW - SHOAL_F16_MIN_NORMAL)
		return (unsigned short)(sign | ((a - SHOAL_F16_REBIAS + 0xfffu + ((a >> 13) & 1u)) >> 13));
	if (a > SHOAL_F32_INF)
		return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); // NaN, quieted
	if (a >= SHOAL_F16_OVERFLOW)
		return (unsigned short)(sign | 0x7c00u);
	// Zero or subnormal half: a float32 addition rounds to nearest even.
	float v = __fadd_rn(__uint_as_float(a), __uint_as_float(SHOAL_F16_DENORM_MAGIC));
	return (unsigned short)(sign | ((__float_as_uint(v) - SHOAL_F16_DENORM_MAGIC) & 0xffffu));
}

__device__ __forceinline__ float f16_float(unsigned short h)
{
	const unsigned int shifted_exp = 0x7c00u << 13;
	unsigned int u = ((unsigned int)h & 0x7fffu) << 13;
	unsigned int e = u & shifted_exp;
	u += 112u << 23;
	if (e == shifted_exp) { // Inf or NaN
		u += 112u << 23;
	} else if (e == 0) { // zero or subnormal: renormalize (exact)
		u += 1u << 23;
		u = __float_as_uint(__fsub_rn(__uint_as_float(u), __uint_as_float(113u << 23)));
	}
	return __uint_as_float(u | ((unsigned int)h & 0x8000u) << 16);
}

__device__ __forceinline__ unsigned short bf16_bits(float f)
{
	unsigned int b = __float_as_uint(f);
	if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu) != 0)
		return (unsigned short)((b >> 16) | 0x40u); // NaN, quieted
	return (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

extern "C" __global__ void shoal_f32_to_f16(const float* in, unsigned short* out, int n)
{
	SHOAL_FOR(i, n) out[i] = f16_bits(in[i]);
}

extern "C" __global__ void shoal_f16_to_f32(const unsigned short* in, float* out, int n)
{
	SHOAL_FOR(i, n) out[i] = f16_float(in[i]);
}

extern "C" __global__ void shoal_f32_to_bf16(const float* in, unsigned short* out, int n)
{
	SHOAL_FOR(i, n) out[i] = bf16_bits(in[i]);
}

extern "C" __global__ void shoal_bf16_to_f32(const unsigned short* in, float* out, int n)
{
	SHOAL_FOR(i, n) out[i] = __uint_as_float((unsigned int)in[i] << 16);
}
