// A fake libnvidia-ml for tests (gpu and cmd/shoal): two GPUs, the second
// without utilisation (as a MIG device answers). FAKE_NVML_INIT=9 makes
// nvmlInit fail as it does with the kernel module unloaded.
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
