/* A stand-in for the driver's libnvidia-ml, built as a shared library for test_cuda_monitor:
 * the six entry points kernels/cuda/nvml.c loads, with NVML's C ABI and return codes, so that
 * the loader's whole path (load, init, the GPU by bus id, readings, shutdown, unload) runs on a
 * machine without a driver. It knows one GPU, at 0000:3b:00.0: 80 GiB, 3 GiB in use, 87% busy. */
#include <string.h>

typedef struct {
  unsigned int gpu, memory;
} fake_utilization; /* nvmlUtilization_t */
typedef struct {
  unsigned long long total, free, used;
} fake_memory; /* nvmlMemory_t */

enum { SUCCESS = 0, UNINITIALIZED = 1, NOT_SUPPORTED = 3, NOT_FOUND = 6 };

static int inits; /* NVML counts its inits: each needs a shutdown */
static int util_supported = 1;

int nvmlInit_v2(void) {
  inits++;
  return SUCCESS;
}

int nvmlShutdown(void) {
  if (inits == 0) return UNINITIALIZED;
  inits--;
  return SUCCESS;
}

const char *nvmlErrorString(int e) {
  return e == UNINITIALIZED ? "Uninitialized"
         : e == NOT_SUPPORTED ? "Not Supported"
         : e == NOT_FOUND ? "Not Found"
                          : "Unknown Error";
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev) {
  if (inits == 0) return UNINITIALIZED;
  if (strcmp(bus, "0000:3b:00.0") != 0) return NOT_FOUND;
  *dev = &inits;
  return SUCCESS;
}

int nvmlDeviceGetUtilizationRates(void *dev, fake_utilization *u) {
  if (inits == 0 || dev != &inits) return UNINITIALIZED;
  if (!util_supported) return NOT_SUPPORTED;
  *u = (fake_utilization){.gpu = 87, .memory = 40};
  return SUCCESS;
}

int nvmlDeviceGetMemoryInfo(void *dev, fake_memory *m) {
  if (inits == 0 || dev != &inits) return UNINITIALIZED;
  unsigned long long total = 80ull << 30, used = 3ull << 30;
  *m = (fake_memory){.total = total, .free = total - used, .used = used};
  return SUCCESS;
}

/* For the test: the inits not yet shut down; whether the GPU reports its utilization. */
int fake_nvml_inits(void) { return inits; }
void fake_nvml_set_util_supported(int on) { util_supported = on; }
