#include "common.cuh"
#include "conv_launch.h"

namespace {

__global__ void pad2d(const float *x, float *xp, int64_t planes, int64_t h, int64_t w, int64_t hp,
                      int64_t wp, int64_t top, int64_t left) {
  int64_t total = planes * hp * wp;
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total;
       k += (int64_t)gridDim.x * blockDim.x) {
    int64_t j = k % wp - left, i = k / wp % hp - top, p = k / (wp * hp);
    xp[k] = i >= 0 && i < h && j >= 0 && j < w ? x[(p * h + i) * w + j] : 0.0f;
  }
}

__global__ void crop2d(const float *xp, float *x, int64_t planes, int64_t h, int64_t w,
                       int64_t hp, int64_t wp, int64_t top, int64_t left) {
  int64_t total = planes * h * w;
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total;
       k += (int64_t)gridDim.x * blockDim.x) {
    int64_t j = k % w, i = k / w % h, p = k / (w * h);
    x[k] = xp[(p * hp + i + top) * wp + j + left];
  }
}

} // namespace

extern "C" cudaError_t cx_cu_pad2d(const float *x, float *xp, int64_t planes, int64_t h,
                                   int64_t w, int64_t hp, int64_t wp, int64_t top, int64_t left,
                                   cudaStream_t s) {
  if (planes * hp * wp == 0) return cudaSuccess;
  pad2d<<<blocks_for(planes * hp * wp), THREADS, 0, s>>>(x, xp, planes, h, w, hp, wp, top, left);
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_crop2d(const float *xp, float *x, int64_t planes, int64_t h,
                                    int64_t w, int64_t hp, int64_t wp, int64_t top, int64_t left,
                                    cudaStream_t s) {
  if (planes * h * w == 0) return cudaSuccess;
  crop2d<<<blocks_for(planes * h * w), THREADS, 0, s>>>(xp, x, planes, h, w, hp, wp, top, left);
  return cudaGetLastError();
}
