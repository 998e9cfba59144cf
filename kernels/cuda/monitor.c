/* The backend's device_stats hook: what the GPU the programs run on is doing, for the trainer's
 * progress line and metrics. Utilization and memory from NVML (nvml.h), opened once for the
 * process on the GPU the backend uses; where NVML cannot be had (a container given the CUDA
 * driver but not its management library) the memory comes from the runtime and the utilization
 * is unknown. */
#include <pthread.h>
#include <stdio.h>

#include "cuda.h"
#include "nvml.h"

static struct {
  pthread_once_t once;
  cx_nvml *nvml; /* NULL: not available (why says why); kept open for the process */
  char why[400];
} M = {.once = PTHREAD_ONCE_INIT};

/* NVML numbers GPUs its own way: the CUDA device is found by its PCI bus id. */
static cx_status open_nvml(void) {
  char bus[32];
  CX_CUDA(cudaDeviceGetPCIBusId(bus, (int)sizeof bus, cx_cuda_device()));
  return cx_nvml_open(CX_NVML_LIBRARY, bus, &M.nvml);
}

static void open_once(void) {
  if (open_nvml() != CX_OK) snprintf(M.why, sizeof M.why, "%s", cx_last_error());
}

cx_status cx_cuda_device_stats(const cx_backend *b, cx_device_stats *out) {
  (void)b;
  CX_TRY(cx_cuda_probe());
  pthread_once(&M.once, open_once);
  *out = (cx_device_stats){.util_percent = -1};
  cx_nvml_sample n;
  if (M.nvml && cx_nvml_read(M.nvml, &n) == CX_OK) {
    *out = (cx_device_stats){.util_percent = n.util_percent, .mem_used = (size_t)n.mem_used,
                             .mem_total = (size_t)n.mem_total};
    return CX_OK;
  }
  size_t free_bytes = 0, total = 0;
  CX_CUDA(cudaMemGetInfo(&free_bytes, &total));
  out->mem_used = total - free_bytes;
  out->mem_total = total;
  return CX_OK;
}

const char *cx_cuda_nvml_status(void) {
  if (cx_cuda_probe() != CX_OK) return "no usable GPU";
  pthread_once(&M.once, open_once);
  return M.nvml ? NULL : M.why;
}
