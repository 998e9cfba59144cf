/* Dropout kernels (dropout_launch.h): the CPU's masks, drawn from the same Philox stream. */
#include "../../core/philox.h"
#include "common.cuh"
#include "dropout_launch.h"

namespace {

__device__ __forceinline__ float ratio_of(const float *ratio, float attr) {
  return ratio ? *ratio : attr;
}

__global__ void train_kernel(const float *x, float *y, float *mask, int64_t n, int64_t row,
                             int64_t first, int64_t stride, uint64_t key, const float *ratio_p,
                             float ratio_attr) {
  const float ratio = ratio_of(ratio_p, ratio_attr), scale = 1.0f / (1.0f - ratio);
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    /* cx_batch_rows_index (core/backend.h) */
    uint64_t at = (uint64_t)((first + stride * (i / row)) * row + i % row);
    float m = cx_philox_uniform(key, at) >= ratio ? 1.0f : 0.0f;
    mask[i] = m;
    y[i] = __fmul_rn(__fmul_rn(x[i], m), scale);
  }
}

__global__ void grad_kernel(const float *dy, const float *mask, float *dx, int64_t n,
                            const float *ratio_p, float ratio_attr) {
  const float scale = 1.0f / (1.0f - ratio_of(ratio_p, ratio_attr));
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dx[i] = __fmul_rn(__fmul_rn(dy[i], mask[i]), scale);
}

/* at least one block, even for n == 0; at most 65536 */
unsigned grid_of(int64_t n) { return blocks_for(n, THREADS, GRID_CAP_64K); }

}  // namespace

extern "C" {

void cx_cuda_dropout_train(const float *x, float *y, float *mask, int64_t n, int64_t row,
                           int64_t first, int64_t stride, uint64_t key, const float *ratio,
                           float ratio_attr, cudaStream_t st) {
  train_kernel<<<grid_of(n), THREADS, 0, st>>>(x, y, mask, n, row, first, stride, key, ratio,
                                               ratio_attr);
}

void cx_cuda_dropout_grad(const float *dy, const float *mask, float *dx, int64_t n,
                          const float *ratio, float ratio_attr, cudaStream_t st) {
  grad_kernel<<<grid_of(n), THREADS, 0, st>>>(dy, mask, dx, n, ratio, ratio_attr);
}

}  // extern "C"
