// runtime.cpp is a CUDA stack on the CPU for tests (package cudaemu): the driver API calls,
// NVRTC and cuBLAS functions that package gpu loads (cuda_cgo.go's list),
// with "device" memory in the host's heap and kernels.cu compiled into the
// same library (see prelude.h and cudaemu.go, which adds the launch
// wrappers). One file serves as libcuda, libnvrtc, libcublasLt and libcublas.
//
// A launch runs the grid's blocks one after the other; a block's threads
// are fibers (ucontext) that switch straight to the next one at
// __syncthreads and at warp shuffles, which are barriers of the block or
// of the warp. A kernel that reaches no barrier (cudaemu.Syncing) runs its
// threads one after the other on the caller's stack instead: a fiber's
// three context switches cost system calls (the signal mask), many times
// the work of such a thread. Streams are synchronous.
// SHOAL_EMU_SYNC_ERROR=N makes every cuStreamSynchronize return N (700: a
// lost context), to test how the Go side takes it.
// CUDA graphs: a capture records the stream's operations (nodes) instead
// of running them, a kernel's parameters copied by their sizes (which the
// generated part gives), and cuGraphLaunch runs them in order;
// synchronizing or launching a graph while capturing breaks the capture,
// as the driver's do. SHOAL_EMU_NO_GRAPHS=1 refuses every capture.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

shoal_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

// A kernel as the generated part provides it: its launch wrapper, and
// whether it reaches a barrier.
struct shoal_emu_fn {
	void (*wrapper)(void **);
	int syncs;
	int nparams;
	size_t sizes[16]; // each parameter's, for a graph's copy of them
};
extern "C" shoal_emu_fn *shoal_emu_kernel(const char *name);

namespace {

const char cubin[] = "SHOAL-EMULATOR-CUBIN";
const int maxThreads = 1024, stackBytes = 64 << 10;

struct fiber {
	ucontext_t ctx;
	char *stack;
	shoal_emu_dim3 idx;
	bool done;
	unsigned int shuffles; // how many this thread made: the slot set's parity
};

struct launchState {
	void (*wrapper)(void **);
	void **params;
	int n;             // threads in the block
	bool direct;       // no fibers: the kernel reaches no barrier
	fiber fibers[maxThreads];
	ucontext_t sched;
	int cur;
	// The block barrier and one barrier per warp: arrivals and generation.
	int blockArrived, blockGen;
	int warpArrived[maxThreads / 32], warpGen[maxThreads / 32];
	// Two sets of shuffle slots, used in turn: a thread can write the next
	// shuffle's value while others still read this one's.
	unsigned int slots[2][maxThreads];
	bool deadlock;
} *st;

void body()
{
	st->wrapper(st->params);
	st->fibers[st->cur].done = true;
	// uc_link returns to the scheduler.
}

// nextLive returns the next unfinished fiber after from, or -1.
int nextLive(int from)
{
	for (int k = 1; k <= st->n; k++) {
		int t = (from + k) % st->n;
		if (!st->fibers[t].done)
			return t;
	}
	return -1;
}

// yield switches to the next unfinished fiber; threadIdx is this fiber's
// again when it is resumed. A fiber that waits alone waits forever: that
// is a barrier some threads never reach, reported as a failed launch.
void yield()
{
	int me = st->cur, next = nextLive(me);
	if (next == me) {
		st->deadlock = true;
		return;
	}
	st->cur = next;
	threadIdx = st->fibers[next].idx;
	swapcontext(&st->fibers[me].ctx, &st->fibers[next].ctx);
	threadIdx = st->fibers[me].idx;
}

// wait is a barrier of count fibers on (arrived, gen).
void wait(int *arrived, int *gen, int count)
{
	int mine = *gen;
	if (++*arrived == count) {
		*arrived = 0;
		++*gen;
		return;
	}
	while (*gen == mine && !st->deadlock)
		yield();
}

int flat() { return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)); }

// runDirect runs the block's threads one after the other.
void runDirect()
{
	for (int t = 0; t < st->n; t++) {
		st->cur = t;
		threadIdx = {t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y)};
		st->wrapper(st->params);
	}
}

// barrierCheck ends the process where a kernel said not to reach a barrier
// reaches one (cudaemu.Syncing read it wrong): it cannot wait without fibers.
void barrierCheck(const char *what)
{
	if (st->direct) {
		fprintf(stderr, "emulator: %s in a kernel that cudaemu.Syncing found none in\n", what);
		abort();
	}
}

int runBlock()
{
	if (st->direct) {
		runDirect();
		return 0;
	}
	for (int t = 0; t < st->n; t++) {
		fiber *f = &st->fibers[t];
		f->idx.x = t % blockDim.x;
		f->idx.y = t / blockDim.x % blockDim.y;
		f->idx.z = t / (blockDim.x * blockDim.y);
		f->done = false;
		f->shuffles = 0;
		getcontext(&f->ctx);
		f->ctx.uc_stack.ss_sp = f->stack;
		f->ctx.uc_stack.ss_size = stackBytes;
		f->ctx.uc_link = &st->sched;
		makecontext(&f->ctx, body, 0);
	}
	st->blockArrived = 0;
	memset(st->warpArrived, 0, sizeof st->warpArrived);
	// Back here whenever a fiber ends; the others run on from where they
	// switched to each other.
	for (int t = 0; t >= 0; t = nextLive(st->cur)) {
		st->cur = t;
		threadIdx = st->fibers[t].idx;
		swapcontext(&st->sched, &st->fibers[t].ctx);
	}
	if (st->deadlock) {
		fprintf(stderr, "emulator: a barrier that not every thread of the block reached\n");
		return 719; // CUDA_ERROR_LAUNCH_FAILED
	}
	return 0;
}

} // namespace

void __syncthreads(void)
{
	barrierCheck("__syncthreads");
	wait(&st->blockArrived, &st->blockGen, st->n);
}

unsigned int shoal_emu_shfl(unsigned int v, int src, int down)
{
	barrierCheck("a warp shuffle");
	int t = flat(), warp = t / 32, lane = t % 32, base = warp * 32;
	int count = st->n - base < 32 ? st->n - base : 32;
	unsigned int *slots = st->slots[st->fibers[st->cur].shuffles++ & 1];
	slots[t] = v;
	wait(&st->warpArrived[warp], &st->warpGen[warp], count);
	int from = down ? lane + src : src;
	return from >= 0 && from < count ? slots[base + from] : v;
}

// ---- CUDA graphs: what a capture recorded, replayed in order ----
namespace {

enum nodeKind { nodeKernel, nodeHtoD, nodeDtoH, nodeMemset, nodeSgemm, nodeGemmEx };

struct node {
	nodeKind kind;
	// A kernel: its function, grid and block, and its parameters' copies.
	void *f;
	unsigned int dims[6];
	int nparams;
	void *params[16];
	// A copy or memset: device address, host address, bytes or count, value.
	CUdeviceptr d;
	void *h;
	size_t n;
	unsigned int v;
	// A GEMM: its arguments, alpha and beta by value.
	int ta, tb, m, nn, k, lda, ldb, ldc, atype, btype, ctype, compute;
	float alpha, beta;
	const void *a, *b;
	void *c;
};

struct graph {
	node *nodes;
	int n, cap;
};

// A stream: whether it is capturing, into which graph, and whether an
// operation a capture cannot hold broke it. cuBLAS's handle points to its
// stream: the library is loaded under four names, each copy with its
// own globals, and the stream is what they share.
struct stream {
	bool capturing, broken;
	graph *captured;
};

struct blasHandle {
	stream *s;
};

node *record(stream *st, nodeKind kind)
{
	graph *g = st->captured;
	if (g->n == g->cap) {
		g->cap = g->cap ? 2 * g->cap : 64;
		g->nodes = (node *)realloc(g->nodes, g->cap * sizeof(node));
	}
	node *nd = &g->nodes[g->n++];
	memset(nd, 0, sizeof *nd);
	nd->kind = kind;
	return nd;
}

void freeGraph(graph *g)
{
	for (int i = 0; i < g->n; i++)
		for (int p = 0; p < g->nodes[i].nparams; p++)
			free(g->nodes[i].params[p]);
	free(g->nodes);
	free(g);
}

} // namespace

// runKernel runs a kernel's grid, its blocks one after the other.
static CUresult runKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
			  unsigned int bz, void **params)
{
	unsigned int n = bx * by * bz;
	static launchState s;
	if (!s.fibers[0].stack)
		for (int t = 0; t < maxThreads; t++)
			s.fibers[t].stack = (char *)malloc(stackBytes);
	st = &s;
	shoal_emu_fn *k = (shoal_emu_fn *)f;
	st->wrapper = k->wrapper;
	st->direct = !k->syncs;
	st->params = params;
	st->n = (int)n;
	st->deadlock = false;
	blockDim = {bx, by, bz};
	gridDim = {gx, gy, gz};
	for (unsigned int z = 0; z < gz; z++)
		for (unsigned int y = 0; y < gy; y++)
			for (unsigned int x = 0; x < gx; x++) {
				blockIdx = {x, y, z};
				if (int r = runBlock())
					return r;
			}
	return 0;
}

extern "C" {

// How many times cuGraphLaunch ran a graph (package cudaemu's
// GraphLaunchesSymbol).
long long shoal_emu_graph_launches;

int cublasSgemm_v2(void *, int ta, int tb, int m, int n, int k, const float *alpha, const float *a, int lda,
		   const float *b, int ldb, const float *beta, float *c, int ldc);
int cublasGemmEx(void *, int ta, int tb, int m, int n, int k, const void *alpha, const void *a, int atype, int lda,
		 const void *b, int btype, int ldb, const void *beta, void *c, int ctype, int ldc, int compute, int);

CUresult cuStreamBeginCapture_v2(void *hs, int)
{
	stream *s = (stream *)hs;
	const char *e = getenv("SHOAL_EMU_NO_GRAPHS");
	if (e && *e && strcmp(e, "0") != 0)
		return 801; // CUDA_ERROR_NOT_SUPPORTED
	if (!s || s->capturing)
		return 401; // CUDA_ERROR_ILLEGAL_STATE
	s->capturing = true;
	s->broken = false;
	s->captured = (graph *)calloc(1, sizeof(graph));
	return 0;
}
CUresult cuStreamEndCapture(void *hs, void **g)
{
	stream *s = (stream *)hs;
	if (!s || !s->capturing)
		return 401;
	s->capturing = false;
	*g = NULL;
	if (s->broken) {
		freeGraph(s->captured);
		return 901; // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
	}
	*g = s->captured;
	return 0;
}
CUresult cuGraphInstantiateWithFlags(void **exec, void *g, unsigned long long)
{
	// The executable graph is the graph itself: nothing is compiled.
	*exec = g;
	return 0;
}
CUresult cuGraphLaunch(void *exec, void *hs)
{
	stream *s = (stream *)hs;
	if (s && s->capturing) {
		s->broken = true;
		return 900; // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	}
	graph *g = (graph *)exec;
	shoal_emu_graph_launches++;
	for (int i = 0; i < g->n; i++) {
		node *nd = &g->nodes[i];
		CUresult r = 0;
		switch (nd->kind) {
		case nodeKernel:
			r = runKernel(nd->f, nd->dims[0], nd->dims[1], nd->dims[2], nd->dims[3], nd->dims[4], nd->dims[5], nd->params);
			break;
		case nodeHtoD:
			memcpy((void *)(uintptr_t)nd->d, nd->h, nd->n);
			break;
		case nodeDtoH:
			memcpy(nd->h, (void *)(uintptr_t)nd->d, nd->n);
			break;
		case nodeMemset:
			for (size_t j = 0; j < nd->n; j++)
				((unsigned int *)(uintptr_t)nd->d)[j] = nd->v;
			break;
		case nodeSgemm:
			r = cublasSgemm_v2(NULL, nd->ta, nd->tb, nd->m, nd->nn, nd->k, &nd->alpha, (const float *)nd->a, nd->lda,
					   (const float *)nd->b, nd->ldb, &nd->beta, (float *)nd->c, nd->ldc);
			break;
		case nodeGemmEx:
			r = cublasGemmEx(NULL, nd->ta, nd->tb, nd->m, nd->nn, nd->k, &nd->alpha, nd->a, nd->atype, nd->lda, nd->b,
					 nd->btype, nd->ldb, &nd->beta, nd->c, nd->ctype, nd->ldc, nd->compute, -1);
			break;
		}
		if (r)
			return 719; // CUDA_ERROR_LAUNCH_FAILED
	}
	return 0;
}
CUresult cuGraphExecDestroy(void *) { return 0; } // the graph's own, freed with it
CUresult cuGraphDestroy(void *g)
{
	freeGraph((graph *)g);
	return 0;
}

// ---- The driver API ----
CUresult cuInit(unsigned int) { return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int ordinal) { *d = ordinal; return ordinal == 0 ? 0 : 101; }
CUresult cuDeviceGetName(char *s, int n, int) { snprintf(s, n, "Shoal CUDA emulator"); return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int)
{
	*v = attr == 75 ? 8 : attr == 76 ? 0 : 0; // compute capability 8.0
	return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *n, int) { *n = (size_t)1 << 30; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **c, int) { *c = (void *)1; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int) { return 0; }
CUresult cuCtxSetCurrent(void *) { return 0; }
CUresult cuStreamCreate(void **s, unsigned int)
{
	*s = calloc(1, sizeof(stream));
	return 0;
}
CUresult cuStreamDestroy_v2(void *s)
{
	free(s);
	return 0;
}
CUresult cuStreamSynchronize(void *hs)
{
	stream *s = (stream *)hs;
	if (s && s->capturing) {
		s->broken = true;
		return 900; // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	}
	const char *e = getenv("SHOAL_EMU_SYNC_ERROR");
	return e ? atoi(e) : 0;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	void *m = malloc(n ? n : 1);
	*p = (CUdeviceptr)(uintptr_t)m;
	return m ? 0 : 2;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return 0; }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned int) { *p = malloc(n ? n : 1); return *p ? 0 : 2; }
CUresult cuMemFreeHost(void *p) { free(p); return 0; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, void *hs)
{
	stream *s = (stream *)hs;
	if (s && s->capturing) {
		node *nd = record(s, nodeHtoD);
		nd->d = d, nd->h = (void *)h, nd->n = n;
		return 0;
	}
	memcpy((void *)(uintptr_t)d, h, n);
	return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, void *hs)
{
	stream *s = (stream *)hs;
	if (s && s->capturing) {
		node *nd = record(s, nodeDtoH);
		nd->d = d, nd->h = h, nd->n = n;
		return 0;
	}
	memcpy(h, (void *)(uintptr_t)d, n);
	return 0;
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, void *hs)
{
	stream *s = (stream *)hs;
	if (s && s->capturing) {
		node *nd = record(s, nodeMemset);
		nd->d = d, nd->v = v, nd->n = n;
		return 0;
	}
	unsigned int *p = (unsigned int *)(uintptr_t)d;
	for (size_t i = 0; i < n; i++)
		p[i] = v;
	return 0;
}
CUresult cuModuleLoadData(void **m, const void *image)
{
	if (memcmp(image, cubin, sizeof cubin) != 0)
		return 200; // CUDA_ERROR_INVALID_IMAGE
	*m = (void *)3;
	return 0;
}
CUresult cuModuleUnload(void *) { return 0; }
CUresult cuModuleGetFunction(void **f, void *, const char *name)
{
	*f = (void *)shoal_emu_kernel(name);
	return *f ? 0 : 500; // CUDA_ERROR_NOT_FOUND
}
CUresult cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
			unsigned int bz, unsigned int, void *hs, void **params, void **)
{
	unsigned int n = bx * by * bz;
	if (n == 0 || n > (unsigned int)maxThreads || gx * gy * gz == 0)
		return 1; // CUDA_ERROR_INVALID_VALUE
	stream *s = (stream *)hs;
	if (s && s->capturing) {
		shoal_emu_fn *k = (shoal_emu_fn *)f;
		node *nd = record(s, nodeKernel);
		nd->f = f;
		nd->dims[0] = gx, nd->dims[1] = gy, nd->dims[2] = gz, nd->dims[3] = bx, nd->dims[4] = by, nd->dims[5] = bz;
		nd->nparams = k->nparams;
		for (int i = 0; i < k->nparams; i++) {
			nd->params[i] = malloc(k->sizes[i]);
			memcpy(nd->params[i], params[i], k->sizes[i]);
		}
		return 0;
	}
	return runKernel(f, gx, gy, gz, bx, by, bz, params);
}

CUresult cuGetErrorName(CUresult r, const char **s)
{
	*s = r == 700 ? "CUDA_ERROR_ILLEGAL_ADDRESS" : r == 719 ? "CUDA_ERROR_LAUNCH_FAILED" : r == 801 ? "CUDA_ERROR_NOT_SUPPORTED" :
	     r == 900 ? "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED" : r == 901 ? "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED" : "CUDA_ERROR_EMULATOR";
	return 0;
}
CUresult cuGetErrorString(CUresult r, const char **s)
{
	*s = r == 700 ? "an illegal memory access was encountered" : "emulator error";
	return 0;
}

// ---- cuBLAS: column-major C = alpha·op(A)·op(B) + beta·C ----
int cublasCreate_v2(void **h)
{
	*h = calloc(1, sizeof(blasHandle));
	return 0;
}
int cublasDestroy_v2(void *h)
{
	free(h);
	return 0;
}
int cublasSetStream_v2(void *h, void *s)
{
	((blasHandle *)h)->s = (stream *)s;
	return 0;
}
int cublasSetWorkspace_v2(void *, CUdeviceptr, size_t) { return 0; }

// capturingStream is the handle's stream when it is capturing (a graph
// replays its GEMMs with no handle).
static stream *capturingStream(void *h)
{
	stream *s = h ? ((blasHandle *)h)->s : NULL;
	return s && s->capturing ? s : NULL;
}

int cublasSgemm_v2(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *a, int lda,
		   const float *b, int ldb, const float *beta, float *c, int ldc)
{
	if (stream *s = capturingStream(h)) {
		node *nd = record(s, nodeSgemm);
		nd->ta = ta, nd->tb = tb, nd->m = m, nd->nn = n, nd->k = k, nd->lda = lda, nd->ldb = ldb, nd->ldc = ldc;
		nd->alpha = *alpha, nd->beta = *beta, nd->a = a, nd->b = b, nd->c = c;
		return 0;
	}
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double s = 0;
			for (int p = 0; p < k; p++) {
				float x = ta ? a[p + (size_t)i * lda] : a[i + (size_t)p * lda];
				float y = tb ? b[j + (size_t)p * ldb] : b[p + (size_t)j * ldb];
				s += (double)x * y;
			}
			float *o = &c[i + (size_t)j * ldc];
			// beta 0 ignores C, as cuBLAS does (it may hold NaN).
			*o = (float)(*alpha * s + (*beta == 0 ? 0.0 : (double)*beta * *o));
		}
	return 0;
}

// An element of a cublasGemmEx operand: CUDA_R_32F (0), CUDA_R_16F (2)
// or CUDA_R_16BF (14).
static double emuElement(const void *p, int type, size_t i)
{
	if (type == 0)
		return ((const float *)p)[i];
	unsigned int h = ((const unsigned short *)p)[i];
	if (type == 14) {
		unsigned int u = h << 16;
		float f;
		memcpy(&f, &u, 4);
		return f;
	}
	double sign = h & 0x8000u ? -1 : 1;
	int e = (h >> 10) & 0x1f;
	unsigned int mant = h & 0x3ffu;
	if (e == 0x1f)
		return mant ? NAN : sign * INFINITY;
	if (e == 0)
		return sign * ldexp(mant, -24); // zero or subnormal
	return sign * ldexp(1024 + mant, e - 25);
}

// cublasGemmEx for what package gpu asks: A and B of one type (float,
// half or bfloat16), C float, CUBLAS_COMPUTE_32F (68); anything else is
// CUBLAS_STATUS_NOT_SUPPORTED (15).
int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *a, int atype, int lda,
		 const void *b, int btype, int ldb, const void *beta, void *c, int ctype, int ldc, int compute, int)
{
	if (atype != btype || (atype != 0 && atype != 2 && atype != 14) || ctype != 0 || compute != 68)
		return 15;
	if (stream *s = capturingStream(h)) {
		node *nd = record(s, nodeGemmEx);
		nd->ta = ta, nd->tb = tb, nd->m = m, nd->nn = n, nd->k = k, nd->lda = lda, nd->ldb = ldb, nd->ldc = ldc;
		nd->atype = atype, nd->btype = btype, nd->ctype = ctype, nd->compute = compute;
		nd->alpha = *(const float *)alpha, nd->beta = *(const float *)beta, nd->a = a, nd->b = b, nd->c = c;
		return 0;
	}
	if (m == 0 || n == 0)
		return 0;
	// Each operand widened once, as far as it reaches: the last of its
	// columns (column-major) holds only its rows.
	size_t na = k == 0 ? 0 : (size_t)lda * ((ta ? m : k) - 1) + (ta ? k : m);
	size_t nb = k == 0 ? 0 : (size_t)ldb * ((tb ? k : n) - 1) + (tb ? n : k);
	double *wa = (double *)malloc((na + nb + 1) * sizeof(double)), *wb = wa + na;
	if (!wa)
		return 3; // CUBLAS_STATUS_ALLOC_FAILED
	for (size_t i = 0; i < na; i++)
		wa[i] = emuElement(a, atype, i);
	for (size_t i = 0; i < nb; i++)
		wb[i] = emuElement(b, btype, i);
	float al = *(const float *)alpha, be = *(const float *)beta;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double s = 0;
			for (int p = 0; p < k; p++)
				s += wa[ta ? p + (size_t)i * lda : i + (size_t)p * lda] * wb[tb ? j + (size_t)p * ldb : p + (size_t)j * ldb];
			float *o = &((float *)c)[i + (size_t)j * ldc];
			*o = (float)(al * s + (be == 0 ? 0.0 : (double)be * *o));
		}
	free(wa);
	return 0;
}

// ---- NVRTC: "compiles" to a marker the driver half accepts ----
int nvrtcVersion(int *major, int *minor) { *major = 13; *minor = 0; return 0; }
int nvrtcCreateProgram(void **p, const char *src, const char *, int, const char *const *, const char *const *)
{
	*p = strdup(src);
	return 0;
}
int nvrtcCompileProgram(void *, int n, const char *const *opts)
{
	for (int i = 0; i < n; i++)
		if (strncmp(opts[i], "--gpu-architecture=sm_", 22) == 0)
			return 0;
	return 5; // NVRTC_ERROR_INVALID_OPTION: no architecture given
}
int nvrtcGetProgramLogSize(void *, size_t *n) { *n = 1; return 0; }
int nvrtcGetProgramLog(void *, char *log) { log[0] = 0; return 0; }
int nvrtcGetCUBINSize(void *, size_t *n) { *n = sizeof cubin; return 0; }
int nvrtcGetCUBIN(void *, char *out) { memcpy(out, cubin, sizeof cubin); return 0; }
int nvrtcDestroyProgram(void **p) { free(*p); *p = NULL; return 0; }
const char *nvrtcGetErrorString(int) { return "emulator NVRTC error"; }

} // extern "C"
