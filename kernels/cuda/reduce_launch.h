#ifndef CX_CUDA_REDUCE_LAUNCH_H
#define CX_CUDA_REDUCE_LAUNCH_H

/* Launchers of ReduceMax and ReduceMaxGrad (reduce_kernels.cu) on plain row-major f32 tensors.
 * ReduceSum and ReduceMean are the element-wise family's reduce-to (eltwise_launch.h). `keep` is
 * x's shape with the reduced axes set to 1 (same rank nd <= 8); the reduced tensor is laid out as
 * keep, whatever its keepdims. Each launcher queues on `s` and returns the launch's error. */

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y = the maximum of each group of x (a NaN in the group wins; an empty group is -inf). */
cudaError_t cx_cu_reduce_max(float *y, const int64_t *keep, const float *x, const int64_t *xd,
                             int nd, cudaStream_t s);

/* dx = dy / (the group's count of elements equal to y) where x equals its group's y, else 0.
 * count: scratch of one float per group (device memory). */
cudaError_t cx_cu_reduce_max_grad(float *dx, const float *dy, const float *x, const float *y,
                                  const int64_t *keep, const int64_t *xd, int nd, float *count,
                                  cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
