#include "common.cuh"
#include "linear_launch.h"

static __global__ void fill_c(float *y, const float *c, int64_t m, int64_t n, int64_t ci,
                              int64_t cj, float scale) {
  int64_t total = m * n;
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total;
       k += (int64_t)gridDim.x * blockDim.x)
    y[k] = scale * c[k / n * ci + k % n * cj];
}

extern "C" cudaError_t cx_cu_gemm_fill_c(float *y, const float *c, int64_t m, int64_t n,
                                         int64_t ci, int64_t cj, float scale, cudaStream_t s) {
  int64_t total = m * n;
  if (total <= 0) return cudaSuccess;
  fill_c<<<blocks_for(total, THREADS, 4096), THREADS, 0, s>>>(y, c, m, n, ci, cj, scale);
  return cudaGetLastError();
}
