#ifndef CX_CUDA_LINEAR_LAUNCH_H
#define CX_CUDA_LINEAR_LAUNCH_H

/* Launchers of the linear family (linear_kernels.cu). Each queues on `s` and returns the
 * launch's error. */

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Gemm's C term: y[i, j] = scale * c[i * ci + j * cj] for the [m, n] row-major y, where ci / cj
 * are C's element strides (0 along a broadcast axis). */
cudaError_t cx_cu_gemm_fill_c(float *y, const float *c, int64_t m, int64_t n, int64_t ci,
                              int64_t cj, float scale, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
