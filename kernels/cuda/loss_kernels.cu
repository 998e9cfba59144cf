/* Loss kernels (loss_launch.h), kernels/cpu/loss.c's formulas with its per-position sums in
 * double. One warp per position: lanes take classes lane, lane + 32, ..., and butterfly
 * shuffles combine them, so every lane holds the same result in a fixed order. */
#include <math.h>

#include "common.cuh"
#include "loss_launch.h"

namespace {

constexpr int kWarps = THREADS / 32;

__device__ __forceinline__ double warp_sum(double v) {
  for (int k = 16; k > 0; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
  return v;
}

__device__ __forceinline__ double warp_max(double v) {
  for (int k = 16; k > 0; k >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, k));
  return v;
}

/* log sum_c exp(scale * x[c * st]) */
__device__ double lse(const float *x, int64_t n, int64_t st, double scale) {
  int lane = threadIdx.x & 31;
  double m = -INFINITY, s = 0;
  for (int64_t c = lane; c < n; c += 32) m = fmax(m, scale * x[c * st]);
  m = warp_max(m);
  for (int64_t c = lane; c < n; c += 32) s += exp(scale * x[c * st] - m);
  return m + log(warp_sum(s));
}

#define WARP_POSITIONS(p, n)                                                               \
  for (int64_t p = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5); p < (n);             \
       p += (int64_t)gridDim.x * kWarps)

/* blocks for one warp per position */
unsigned warp_blocks(int64_t positions) { return blocks_for(positions, kWarps, GRID_CAP_64K); }

__device__ __forceinline__ int64_t offset(int64_t p, int64_t c, int64_t inner) {
  return (p / inner) * c * inner + p % inner;
}

/* The class of position p; -1 when ignored, -2 when not a class (the CPU reports it; here the
 * position's loss and gradient become NaN, so that the run's finiteness checks see it). */
__device__ int64_t label_of(const cx_sce_args &s, int64_t p) {
  int64_t l = s.labels64 ? ((const int64_t *)s.labels)[p] : ((const int32_t *)s.labels)[p];
  if (s.has_ignore && l == s.ignore) return -1;
  return l >= 0 && l < s.c ? l : -2;
}

/* sum of the class weights (C without weights) */
__device__ double weight_total(const cx_sce_args &s) {
  if (!s.w) return (double)s.c;
  double t = 0;
  for (int64_t c = threadIdx.x & 31; c < s.c; c += 32) t += s.w[c];
  return warp_sum(t);
}

/* part[p]: position p's loss, part[positions + p]: its weight in the mean's divisor */
__global__ void sce_kernel(cx_sce_args s, float *loss, float *log_prob, double *part) {
  int lane = threadIdx.x & 31;
  WARP_POSITIONS(p, s.positions) {
    int64_t off = offset(p, s.c, s.inner), st = s.inner, l = label_of(s, p);
    const float *x = s.x + off;
    double z = lse(x, s.c, st, 1.0);
    if (log_prob)
      for (int64_t c = lane; c < s.c; c += 32) log_prob[off + c * st] = (float)(x[c * st] - z);
    double v = 0, wt = 0;
    if (l == -2) v = NAN;
    if (l >= 0) {
      wt = s.w ? s.w[l] : 1.0;
      v = (z - x[l * st]) * wt;
      if (s.eps != 0) { /* -sum_c w_c log p_c = W lse - sum_c w_c x_c */
        double wx = 0;
        for (int64_t c = lane; c < s.c; c += 32) wx += (s.w ? s.w[c] : 1.0) * x[c * st];
        wx = warp_sum(wx);
        v = (1 - s.eps) * v + s.eps / (double)s.c * (weight_total(s) * z - wx);
      }
    }
    if (lane == 0) {
      if (s.mode == CX_CUDA_RED_NONE) loss[p] = (float)v;
      part[p] = v;
      part[s.positions + p] = wt;
    }
  }
}

__global__ void sce_reduce(const double *part, int64_t positions, int mode, float *loss) {
  __shared__ double t[THREADS];
  fold(t, part, positions);
  double total = t[0];
  __syncthreads();
  fold(t, part + positions, positions);
  if (threadIdx.x != 0) return;
  if (mode == CX_CUDA_RED_SUM) loss[0] = (float)total;
  else loss[0] = t[0] != 0 ? (float)(total / t[0]) : 0.0f; /* all ignored: 0, not 0/0 */
}

/* the mean's divisor: the non-ignored positions' label weights */
__global__ void sce_den(cx_sce_args s, double *den) {
  __shared__ double t[THREADS];
  double d = 0;
  for (int64_t p = threadIdx.x; p < s.positions; p += THREADS) {
    int64_t l = label_of(s, p);
    if (l >= 0) d += s.w ? s.w[l] : 1.0;
  }
  block_sum(t, d);
  if (threadIdx.x == 0) *den = t[0];
}

/* d loss_p / d x_c = (1-eps) w_l (p_c - [c == l]) + eps/C (W p_c - w_c), times g */
__global__ void sce_grad_kernel(cx_sce_args s, const float *dl, const double *den, float *dx) {
  int lane = threadIdx.x & 31;
  WARP_POSITIONS(p, s.positions) {
    int64_t off = offset(p, s.c, s.inner), st = s.inner, l = label_of(s, p);
    const float *x = s.x + off;
    float *d = dx + off;
    double g = s.mode == CX_CUDA_RED_NONE ? (double)dl[p] : (double)dl[0];
    if (s.mode == CX_CUDA_RED_MEAN) g = *den != 0 ? g / *den : 0;
    if (l == -2) g = NAN;
    if (l == -1 || g == 0) {
      for (int64_t c = lane; c < s.c; c += 32) d[c * st] = 0;
      continue;
    }
    double z = lse(x, s.c, st, 1.0), wl = l >= 0 ? (s.w ? s.w[l] : 1.0) : NAN;
    double a = (1 - s.eps) * wl + s.eps / (double)s.c * weight_total(s), b = s.eps / (double)s.c;
    for (int64_t c = lane; c < s.c; c += 32) {
      double pc = exp(x[c * st] - z);
      float v = (float)(g * (a * pc - b * (s.w ? s.w[c] : 1.0)));
      if (c == l) v -= (float)(g * (1 - s.eps) * wl);
      d[c * st] = v;
    }
  }
}

/* part[p] = KL(q || p) at position p, log q - log p formed as (t - s)/T + (lse_s - lse_t) so
 * that a student close to its teacher keeps its digits */
__global__ void kd_kernel(const float *s, const float *t, int64_t positions, int64_t c,
                          int64_t inner, double inv_t, double *part) {
  int lane = threadIdx.x & 31;
  WARP_POSITIONS(p, positions) {
    int64_t off = offset(p, c, inner);
    const float *sp = s + off, *tp = t + off;
    double ls = lse(sp, c, inner, inv_t), lt = lse(tp, c, inner, inv_t), kl = 0;
    for (int64_t k = lane; k < c; k += 32) {
      double tv = tp[k * inner], sv = sp[k * inner];
      kl += exp(tv * inv_t - lt) * ((tv - sv) * inv_t + (ls - lt));
    }
    kl = warp_sum(kl);
    if (lane == 0) part[p] = kl;
  }
}

__global__ void kd_reduce(const double *part, int64_t positions, int64_t n, double temp,
                          float *out) {
  __shared__ double t[THREADS];
  fold(t, part, positions);
  if (threadIdx.x == 0) *out = n ? (float)(t[0] * temp * temp / (double)n) : 0.0f;
}

__global__ void kd_grad_kernel(const float *dl, const float *s, const float *t,
                               int64_t positions, int64_t n, int64_t c, int64_t inner,
                               double temp, float *dx) {
  int lane = threadIdx.x & 31;
  const double inv_t = 1.0 / temp, g = n ? (double)dl[0] * temp / (double)n : 0;
  WARP_POSITIONS(p, positions) {
    int64_t off = offset(p, c, inner);
    const float *sp = s + off, *tp = t + off;
    double ls = lse(sp, c, inner, inv_t), lt = lse(tp, c, inner, inv_t);
    for (int64_t k = lane; k < c; k += 32)
      dx[off + k * inner] =
          (float)(g * (exp(sp[k * inner] * inv_t - ls) - exp(tp[k * inner] * inv_t - lt)));
  }
}

}  // namespace

extern "C" {

void cx_cuda_sce(const cx_sce_args *s, float *loss, float *log_prob, double *part,
                 cudaStream_t st) {
  sce_kernel<<<warp_blocks(s->positions), THREADS, 0, st>>>(*s, loss, log_prob, part);
  if (s->mode != CX_CUDA_RED_NONE)
    sce_reduce<<<1, THREADS, 0, st>>>(part, s->positions, s->mode, loss);
}

void cx_cuda_sce_grad(const cx_sce_args *s, const float *dloss, float *dx, double *part,
                      cudaStream_t st) {
  if (s->mode == CX_CUDA_RED_MEAN) sce_den<<<1, THREADS, 0, st>>>(*s, part);
  sce_grad_kernel<<<warp_blocks(s->positions), THREADS, 0, st>>>(*s, dloss, part, dx);
}

void cx_cuda_kd(const float *s, const float *t, int64_t n, int64_t c, int64_t inner, double temp,
                float *out, double *part, cudaStream_t st) {
  int64_t positions = n * inner;
  kd_kernel<<<warp_blocks(positions), THREADS, 0, st>>>(s, t, positions, c, inner, 1.0 / temp,
                                                        part);
  kd_reduce<<<1, THREADS, 0, st>>>(part, positions, n, temp, out);
}

void cx_cuda_kd_grad(const float *dloss, const float *s, const float *t, int64_t n, int64_t c,
                     int64_t inner, double temp, float *dx, cudaStream_t st) {
  int64_t positions = n * inner;
  kd_grad_kernel<<<warp_blocks(positions), THREADS, 0, st>>>(dloss, s, t, positions, n, c, inner,
                                                             temp, dx);
}

}  // extern "C"
