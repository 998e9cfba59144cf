/* Dropout kernels (dropout_launch.h): the CPU's masks, drawn from the same Philox stream. */
#include "dropout_launch.h"

namespace {

constexpr int kThreads = 256;

/* Philox4x32-10 and the uniform draw: a copy of cx_philox4x32 and cx_rng_uniform in
 * core/rng.c (which is C and host code). They MUST stay identical to it, bit for bit, or the
 * GPU draws other masks than the CPU and the reference. */
__device__ __forceinline__ float rng_uniform(uint64_t key, uint64_t index) {
  const uint64_t counter_hi = 0, counter_lo = index;
  uint32_t c0 = (uint32_t)counter_lo, c1 = (uint32_t)(counter_lo >> 32);
  uint32_t c2 = (uint32_t)counter_hi, c3 = (uint32_t)(counter_hi >> 32);
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (float)(c0 >> 8) * (1.0f / 16777216.0f);
}

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
    float m = rng_uniform(key, at) >= ratio ? 1.0f : 0.0f;
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

unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  return (unsigned)(b < 65536 ? b : 65536);
}

}  // namespace

extern "C" {

void cx_cuda_dropout_train(const float *x, float *y, float *mask, int64_t n, int64_t row,
                           int64_t first, int64_t stride, uint64_t key, const float *ratio,
                           float ratio_attr, cudaStream_t st) {
  train_kernel<<<blocks_for(n), kThreads, 0, st>>>(x, y, mask, n, row, first, stride, key, ratio,
                                                   ratio_attr);
}

void cx_cuda_dropout_grad(const float *dy, const float *mask, float *dx, int64_t n,
                          const float *ratio, float ratio_attr, cudaStream_t st) {
  grad_kernel<<<blocks_for(n), kThreads, 0, st>>>(dy, mask, dx, n, ratio, ratio_attr);
}

}  // extern "C"
