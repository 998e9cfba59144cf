#ifndef CX_NVML_H
#define CX_NVML_H

/* GPU monitoring through NVML, the NVIDIA driver's management library: utilization and memory
 * of one GPU. The library is loaded when opened (dlopen), not linked, so that the binary starts
 * on machines without the driver; there, opening says why it cannot. Plain C, no CUDA header. */

#include "../../core/status.h"

typedef struct cx_nvml cx_nvml; /* NVML initialised, one GPU found */

typedef struct cx_nvml_sample {
  /* percent of the last sample period (1/6 s to 1 s, by product) in which a kernel ran; -1 where
   * the GPU does not report it (a MIG instance) */
  int util_percent;
  unsigned long long mem_used, mem_total; /* bytes, every process's */
} cx_nvml_sample;

/* The driver's library. */
#define CX_NVML_LIBRARY "libnvidia-ml.so.1"

/* Loads `library` (CX_NVML_LIBRARY but in tests), initialises NVML and finds the GPU at PCI bus
 * id pci_bus_id ("0000:3b:00.0", as cudaDeviceGetPCIBusId writes it: CUDA's device numbers
 * are not NVML's). CX_ERR_UNSUPPORTED with a message starting "NVML not available" when the
 * library, one of its functions or a driver is missing; another failure names the call. */
cx_status cx_nvml_open(const char *library, const char *pci_bus_id, cx_nvml **out);
/* The GPU's utilization and memory now. */
cx_status cx_nvml_read(cx_nvml *n, cx_nvml_sample *out);
/* Shuts NVML down (its init is counted) and unloads the library; NULL is allowed. */
void cx_nvml_close(cx_nvml *n);

#endif
