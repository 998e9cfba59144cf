/* Device code of the slice / pad family: a strided scatter (SliceGrad, common.cuh's walk), Pad,
 * and its adjoint PadGrad, which gathers for each dX element the dY elements that read it, in dY's
 * order, so the sums round as the CPU kernel's (which adds dY row by row into a zeroed dX). */

#include "common.cuh"
#include "slice_launch.h"

namespace {

/* ---- pad ---- */

struct pad_plan {
  int nd, mode;
  int64_t xd[MAXD], yd[MAXD], b[MAXD];
};

/* core/ops/shape.h's cx_pad_source: the index along an axis of length len that output position y
 * reads, -1 for the constant fill. */
__device__ __forceinline__ int64_t pad_source(int mode, int64_t y, int64_t before, int64_t len) {
  int64_t x = y - before;
  if (x >= 0 && x < len) return x;
  if (mode == CX_CU_PAD_CONSTANT) return -1;
  if (mode == CX_CU_PAD_EDGE) return x < 0 ? 0 : len - 1;
  return x < 0 ? -x : 2 * (len - 1) - x;
}

__global__ void pad_kernel(float *y, const float *x, int64_t n, pad_plan p, const float *fill_dev,
                           float fill) {
  float f = fill_dev ? *fill_dev : fill;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i, off = 0, xs = 1;
    bool inside = true;
    for (int k = p.nd - 1; k >= 0; k--) {
      int64_t c = r % p.yd[k];
      r /= p.yd[k];
      int64_t s = pad_source(p.mode, c, p.b[k], p.xd[k]);
      if (s < 0) {
        inside = false;
        break;
      }
      off += s * xs;
      xs *= p.xd[k];
    }
    y[i] = inside ? x[off] : f;
  }
}

/* The positions along one axis (output length ydim) that read input position c, as up to three
 * ascending ranges [lo, hi): reflect reads c from before - c, c + before and
 * before + 2 (len - 1) - c; edge reads the first (last) position from the whole pad before
 * (after) it. The plan keeps reflect pads below len, so each side reads c at most once. */
__device__ __forceinline__ int readers(int mode, int64_t c, int64_t before, int64_t len,
                                       int64_t ydim, int64_t *lo, int64_t *hi) {
  if (mode == CX_CU_PAD_EDGE) {
    lo[0] = c == 0 ? 0 : c + before;
    hi[0] = c == len - 1 ? ydim : c + before + 1;
    return 1;
  }
  int n = 0;
  if (mode == CX_CU_PAD_REFLECT && c >= 1 && c <= before) {
    lo[n] = before - c;
    hi[n] = lo[n] + 1;
    n++;
  }
  lo[n] = c + before;
  hi[n] = lo[n] + 1;
  n++;
  int64_t far = before + 2 * (len - 1) - c;
  if (mode == CX_CU_PAD_REFLECT && c <= len - 2 && far < ydim) {
    lo[n] = far;
    hi[n] = far + 1;
    n++;
  }
  return n;
}

__global__ void pad_grad_kernel(float *dx, const float *dy, int64_t n, pad_plan p) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t lo[MAXD][3], hi[MAXD][3], pos[MAXD], ys[MAXD];
    int cnt[MAXD], j[MAXD];
    int64_t r = i, acc_st = 1;
    for (int k = p.nd - 1; k >= 0; k--) {
      int64_t c = r % p.xd[k];
      r /= p.xd[k];
      cnt[k] = readers(p.mode, c, p.b[k], p.xd[k], p.yd[k], lo[k], hi[k]);
      j[k] = 0;
      pos[k] = lo[k][0];
      ys[k] = acc_st;
      acc_st *= p.yd[k];
    }
    /* every reader in dY's row-major order: an odometer over the per-axis ranges */
    float acc = 0.0f;
    for (;;) {
      int64_t off = 0;
      for (int k = 0; k < p.nd; k++) off += pos[k] * ys[k];
      acc += dy[off];
      int k = p.nd - 1;
      for (; k >= 0; k--) {
        if (++pos[k] < hi[k][j[k]]) break;
        if (++j[k] < cnt[k]) {
          pos[k] = lo[k][j[k]];
          break;
        }
        j[k] = 0;
        pos[k] = lo[k][0];
      }
      if (k < 0) break;
    }
    dx[i] = acc;
  }
}

pad_plan make_pad_plan(int nd, const int64_t *xd, const int64_t *before, const int64_t *yd,
                       int mode) {
  pad_plan p = {};
  p.nd = nd;
  p.mode = mode;
  for (int k = 0; k < nd; k++) p.xd[k] = xd[k], p.yd[k] = yd[k], p.b[k] = before[k];
  return p;
}

int64_t numel(const int64_t *d, int nd) {
  int64_t n = 1;
  for (int k = 0; k < nd; k++) n *= d[k];
  return n;
}

} // namespace

extern "C" cudaError_t cx_cu_scatter(void *out, const void *in, size_t es, int nd,
                                     const int64_t *dims, const int64_t *stride, int64_t base,
                                     cudaStream_t s) {
  if (nd > MAXD) return cudaErrorInvalidValue;
  int64_t n;
  walk_plan p = make_walk_plan(nd, dims, stride, &n);
  if (n == 0) return cudaSuccess;
  return launch_walk<true>(out, in, es, n, base, p, s);
}

extern "C" cudaError_t cx_cu_pad(float *y, const float *x, int nd, const int64_t *xd,
                                 const int64_t *before, const int64_t *yd, int mode,
                                 const float *fill_dev, float fill, cudaStream_t s) {
  if (nd > MAXD) return cudaErrorInvalidValue;
  int64_t n = numel(yd, nd);
  if (n == 0) return cudaSuccess;
  pad_plan p = make_pad_plan(nd, xd, before, yd, mode);
  pad_kernel<<<blocks_for(n), THREADS, 0, s>>>(y, x, n, p, fill_dev, fill);
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_pad_grad(float *dx, const float *dy, int nd, const int64_t *xd,
                                      const int64_t *before, const int64_t *yd, int mode,
                                      cudaStream_t s) {
  if (nd > MAXD) return cudaErrorInvalidValue;
  int64_t n = numel(xd, nd);
  if (n == 0) return cudaSuccess;
  pad_plan p = make_pad_plan(nd, xd, before, yd, mode);
  pad_grad_kernel<<<blocks_for(n), THREADS, 0, s>>>(dx, dy, n, p);
  return cudaGetLastError();
}
