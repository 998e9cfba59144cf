#ifndef CX_CUDA_SOFTMAX_LAUNCH_H
#define CX_CUDA_SOFTMAX_LAUNCH_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The softmax family over a tensor seen as [outer, n, inner] around its axis. kind: 0 softmax,
 * 1 log-softmax (y from x); 2 softmax gradient, 3 log-softmax gradient (dx from dy and y, y
 * passed as x). */
cudaError_t cx_cuda_softmax_like(int kind, float *out, const float *x, const float *dy,
                                 int64_t outer, int64_t n, int64_t inner, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
