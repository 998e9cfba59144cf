#ifndef CX_CUDA_SHAPE_LAUNCH_H
#define CX_CUDA_SHAPE_LAUNCH_H

/* Launcher of the shape family's one kernel (shape_kernels.cu): a strided gather, dtype-agnostic
 * (element size 1, 2, 4 or 8 bytes). */

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out (contiguous, dims[0..nd), nd <= 8)[i0..] = in[base + sum i_d * stride[d]], strides and base
 * in elements of es bytes. Queues on s; returns the launch's error. */
cudaError_t cx_cu_gather(void *out, const void *in, size_t es, int nd, const int64_t *dims,
                         const int64_t *stride, int64_t base, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
