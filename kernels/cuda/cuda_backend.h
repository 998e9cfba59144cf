#ifndef CX_CUDA_BACKEND_H
#define CX_CUDA_BACKEND_H

/* The CUDA backend (kernels/cuda/): cuDNN for convolutions, cuBLAS for matrix products, our own
 * kernels for the rest. Built when the toolkit is found (CX_HAVE_CUDA); this header needs no
 * CUDA header, so cli/ and tests include it in any build. */

#include <stdbool.h>

#include "../../core/backend.h"

#ifdef CX_HAVE_CUDA
/* The backend on the device cx_cuda_set_local_rank chose (device 0 unless told). Its kernel
 * table can be asked (find_kernel) on any machine; running anything needs cx_cuda_probe() to
 * have passed. */
const cx_backend *cx_backend_cuda(void);
/* CX_OK when this machine has a usable GPU (driver, device, cuBLAS and cuDNN load); else a
 * message saying what is missing. Cheap after the first call. */
cx_status cx_cuda_probe(void);
/* NULL when NVML monitors the backend's GPU (its device_stats then has the utilization), else
 * why not ("NVML not available: ..."). */
const char *cx_cuda_nvml_status(void);
/* Before the first probe: this process's rank among the processes of its machine (a
 * data-parallel run's local rank; 0 when alone). The backend then runs on device local_rank mod
 * the devices this process sees (CUDA_VISIBLE_DEVICES narrows them), so that the ranks of one
 * machine take its GPUs in turn. */
void cx_cuda_set_local_rank(int local_rank);
/* The device index the backend runs on (valid after a probe that passed). */
int cx_cuda_device(void);
/* GPUs this process sees; 0 without a driver or a device. */
int cx_cuda_device_count(void);
#endif

#endif
