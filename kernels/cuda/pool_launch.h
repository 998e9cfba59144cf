#ifndef CX_CUDA_POOL_LAUNCH_H
#define CX_CUDA_POOL_LAUNCH_H

/* Launchers of the pooling family (pool_kernels.cu), on plain row-major f32 tensors. Each queues
 * on `s` and returns the launch's error. */

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A pooling window geometry as three spatial axes (1-D and 2-D pooling get unit leading axes),
 * over `planes` independent (n, c) planes. pb / pe: padding before / after each axis. */
typedef struct cx_cu_pool_geom {
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
  int64_t planes;
  int include_pad; /* AveragePool's count_include_pad */
} cx_cu_pool_geom;

cudaError_t cx_cu_max_pool(const cx_cu_pool_geom *g, const float *x, float *y, cudaStream_t s);
/* dx must not alias dy or x; it is zeroed here, then each dY goes to its window's first maximum */
cudaError_t cx_cu_max_pool_grad(const cx_cu_pool_geom *g, const float *x, const float *dy,
                                float *dx, cudaStream_t s);
cudaError_t cx_cu_avg_pool(const cx_cu_pool_geom *g, const float *x, float *y, cudaStream_t s);
cudaError_t cx_cu_avg_pool_grad(const cx_cu_pool_geom *g, const float *dy, float *dx,
                                cudaStream_t s);

/* y[p] = mean of the `size` elements of plane p; dx[p * size + i] = dy[p] / size */
cudaError_t cx_cu_global_avg_pool(const float *x, float *y, int64_t planes, int64_t size,
                                  cudaStream_t s);
cudaError_t cx_cu_global_avg_pool_grad(const float *dy, float *dx, int64_t planes, int64_t size,
                                       cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
