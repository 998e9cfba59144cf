#include "common.cuh"
#include "softmax_launch.h"

/* One warp per (outer, inner) position: the lanes stride along the axis and combine by
 * shuffles, so a row of logits ([N, C], inner 1) reads contiguous memory. Sums in float, as the
 * CPU kernels do. */
namespace {

__device__ float warp_sum(float v) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float warp_max(float v) {
  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__global__ void softmax_like(int kind, float *out, const float *x, const float *dy,
                             int64_t outer, int64_t n, int64_t inner) {
  int lane = threadIdx.x % 32;
  /* warp-uniform loop (blockDim is a multiple of 32): every lane of a warp shuffles together */
  for (int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; warp < outer * inner;
       warp += (int64_t)gridDim.x * blockDim.x / 32) {
    int64_t o = warp / inner, j = warp % inner, base = o * n * inner + j;
    const float *xr = x + base;
    float *yr = out + base;
    if (kind <= 1) {
      float m = -INFINITY;
      for (int64_t c = lane; c < n; c += 32) m = fmaxf(m, xr[c * inner]);
      m = warp_max(m);
      float s = 0;
      for (int64_t c = lane; c < n; c += 32) s += expf(xr[c * inner] - m);
      s = warp_sum(s);
      float off = m + logf(s), inv = 1.0f / s;
      for (int64_t c = lane; c < n; c += 32)
        yr[c * inner] = kind == 0 ? expf(xr[c * inner] - m) * inv : xr[c * inner] - off;
      continue;
    }
    const float *dr = dy + base;
    float s = 0; /* <dy, y> (softmax) or sum(dy) (log-softmax) */
    for (int64_t c = lane; c < n; c += 32) s += dr[c * inner] * (kind == 2 ? xr[c * inner] : 1.0f);
    s = warp_sum(s);
    for (int64_t c = lane; c < n; c += 32) {
      float y = xr[c * inner], d = dr[c * inner];
      yr[c * inner] = kind == 2 ? y * (d - s) : d - expf(y) * s;
    }
  }
}

}  // namespace

extern "C" cudaError_t cx_cuda_softmax_like(int kind, float *out, const float *x,
                                            const float *dy, int64_t outer, int64_t n,
                                            int64_t inner, cudaStream_t s) {
  int64_t rows = outer * inner;
  if (rows == 0) return cudaSuccess;
  /* a warp per row; past the cap the kernel loops over the rest */
  softmax_like<<<blocks_for(rows * 32), THREADS, 0, s>>>(kind, out, x, dy, outer, n, inner);
  return cudaGetLastError();
}
