/* NVML loaded at run time (nvml.h). The CUDA toolkit here ships neither nvml.h nor a stub
 * library (they come with the driver's development files), and a library opened with dlopen
 * needs no header to link against: the six entry points below are declared from NVML's C ABI,
 * which NVIDIA keeps stable (the _v2 names are those nvml.h maps nvmlInit and
 * nvmlDeviceGetHandleByPciBusId to; the structs are nvmlUtilization_t and nvmlMemory_t). */
#include "nvml.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>

typedef int nvml_return;                    /* nvmlReturn_t, an enum: 0 is NVML_SUCCESS */
typedef struct nvml_device_st *nvml_device; /* nvmlDevice_t */
typedef struct nvml_utilization {
  unsigned int gpu, memory;
} nvml_utilization;
typedef struct nvml_memory {
  unsigned long long total, free, used;
} nvml_memory;

enum { NVML_OK = 0, NVML_NOT_SUPPORTED = 3 };

struct cx_nvml {
  void *lib;
  nvml_device dev;
  nvml_return (*init)(void);
  nvml_return (*shutdown)(void);
  const char *(*error_string)(nvml_return);
  nvml_return (*by_pci_bus_id)(const char *, nvml_device *);
  nvml_return (*utilization)(nvml_device, nvml_utilization *);
  nvml_return (*memory)(nvml_device, nvml_memory *);
  bool initialised;
};

/* A failed call after init, named with this file and line as CX_CUDA names CUDA's. */
#define NVML_FAIL(n, call, e)                                                                      \
  cx_fail(CX_ERR_BACKEND, "%s failed: %s (%s:%d)", call, (n)->error_string(e), __FILE__, __LINE__)

/* Every entry point, or the first one missing. */
static const char *find_symbols(cx_nvml *n) {
#define SYM(field, name)                                                                           \
  if (!(n->field = (__typeof__(n->field))dlsym(n->lib, name))) return name
  SYM(init, "nvmlInit_v2");
  SYM(shutdown, "nvmlShutdown");
  SYM(error_string, "nvmlErrorString");
  SYM(by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
  SYM(utilization, "nvmlDeviceGetUtilizationRates");
  SYM(memory, "nvmlDeviceGetMemoryInfo");
#undef SYM
  return NULL;
}

static cx_status open_device(cx_nvml *n, const char *library, const char *pci_bus_id) {
  n->lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!n->lib) return cx_fail(CX_ERR_UNSUPPORTED, "NVML not available: %s", dlerror());
  const char *missing = find_symbols(n);
  if (missing)
    return cx_fail(CX_ERR_UNSUPPORTED, "NVML not available: %s has no %s", library, missing);
  nvml_return e = n->init();
  /* no driver loaded, or one older than the library: nothing to monitor on this machine */
  if (e != NVML_OK)
    return cx_fail(CX_ERR_UNSUPPORTED, "NVML not available: nvmlInit_v2: %s",
                   n->error_string(e));
  n->initialised = true;
  e = n->by_pci_bus_id(pci_bus_id, &n->dev);
  if (e != NVML_OK) return NVML_FAIL(n, "nvmlDeviceGetHandleByPciBusId_v2", e);
  return CX_OK;
}

cx_status cx_nvml_open(const char *library, const char *pci_bus_id, cx_nvml **out) {
  *out = NULL;
  cx_nvml *n = calloc(1, sizeof *n);
  if (!n) return cx_fail(CX_ERR_NOMEM, "NVML: out of memory");
  cx_status s = open_device(n, library, pci_bus_id);
  if (s != CX_OK) {
    cx_nvml_close(n);
    return s;
  }
  *out = n;
  return CX_OK;
}

cx_status cx_nvml_read(cx_nvml *n, cx_nvml_sample *out) {
  nvml_memory m;
  nvml_return e = n->memory(n->dev, &m);
  if (e != NVML_OK) return NVML_FAIL(n, "nvmlDeviceGetMemoryInfo", e);
  nvml_utilization u;
  nvml_return eu = n->utilization(n->dev, &u);
  if (eu != NVML_OK && eu != NVML_NOT_SUPPORTED)
    return NVML_FAIL(n, "nvmlDeviceGetUtilizationRates", eu);
  *out = (cx_nvml_sample){.util_percent = eu == NVML_OK ? (int)u.gpu : -1,
                          .mem_used = m.used, .mem_total = m.total};
  return CX_OK;
}

void cx_nvml_close(cx_nvml *n) {
  if (!n) return;
  if (n->initialised) n->shutdown();
  if (n->lib) dlclose(n->lib);
  free(n);
}
