#ifndef CX_CUDA_BACKEND_H
#define CX_CUDA_BACKEND_H

/* The CUDA backend (kernels/cuda/): cuDNN for convolutions, cuBLAS for matrix products, our own
 * kernels for the rest. Built when the toolkit is found (CX_HAVE_CUDA); this header needs no
 * CUDA header, so cli/ and tests include it in any build. */

#include <stdbool.h>

#include "../../core/backend.h"

#ifdef CX_HAVE_CUDA
/* The backend on device 0. Its kernel table can be asked (find_kernel) on any machine; running
 * anything needs cx_cuda_probe() to have passed. */
const cx_backend *cx_backend_cuda(void);
/* CX_OK when this machine has a usable GPU (driver, device, cuBLAS and cuDNN load); else a
 * message saying what is missing. Cheap after the first call. */
cx_status cx_cuda_probe(void);
/* NULL when NVML monitors the backend's GPU (its device_stats then has the utilization), else
 * why not ("NVML not available: ..."). */
const char *cx_cuda_nvml_status(void);
#endif

#endif
