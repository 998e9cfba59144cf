/* Batch normalization kernels (norm_launch.h). The arithmetic follows kernels/cpu/norm.c operation
 * for operation, with explicit _rn intrinsics where the CPU (C11, no contraction) does a separate
 * multiply and add: nvcc would fuse them, and the fused activation's gradient must recompute the
 * forward's normalised value bit for bit to decide which elements the clamp passed. */
#include "common.cuh"
#include "norm_launch.h"

namespace {

/* Element j of channel c, the channel's elements numbered n-major over [0, N*S). */
__device__ __forceinline__ int64_t at(const cx_bn_geom &g, int64_t c, int64_t j) {
  return (j / g.s) * g.c * g.s + c * g.s + j % g.s;
}

/* The range of channel elements block p of P covers. */
__device__ void chunk(const cx_bn_geom &g, int64_t *j0, int64_t *j1) {
  int64_t m = g.n * g.s, len = (m + g.p - 1) / g.p;
  *j0 = (int64_t)blockIdx.y * len;
  *j1 = *j0 + len < m ? *j0 + len : m;
}

__device__ __forceinline__ float mean_of(const double *sum, int64_t c, double m) {
  return (float)(sum[c] / m);
}

/* sq == false: sum of x; sq: sum of (x - mean)^2 */
template <bool SQ>
__global__ void partial_kernel(const float *__restrict__ x, const double *sum, double m_local,
                               const double *pooled_m, double *part, cx_bn_geom g) {
  __shared__ double t[THREADS];
  int64_t c = blockIdx.x, j0, j1;
  chunk(g, &j0, &j1);
  float mean = 0;
  if (SQ) mean = mean_of(sum, c, pooled_m ? *pooled_m : m_local);
  double acc = 0;
  for (int64_t j = j0 + threadIdx.x; j < j1; j += THREADS) {
    float v = x[at(g, c, j)];
    if (SQ) {
      float d = v - mean;
      acc += (double)d * d;
    } else {
      acc += v;
    }
  }
  block_sum(t, acc);
  if (threadIdx.x == 0) part[c * g.p + blockIdx.y] = t[0];
}

/* out[c] = the P partials of channel c, added in order (one thread per channel) */
__global__ void fold_kernel(const double *part, double *out, int64_t channels, int p) {
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  double s = 0;
  for (int i = 0; i < p; i++) s += part[c * p + i];
  out[c] = s;
}

__global__ void finalize_kernel(const double *sum, const double *sq, double m_local,
                                const double *pooled_m, float eps, float mom, bool update,
                                float *saved_mean, float *saved_invstd, float *rm, float *rv,
                                int64_t channels) {
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  double m = pooled_m ? *pooled_m : m_local;
  float mean = mean_of(sum, c, m);
  double var = sq[c] / m;
  float invstd = (float)(1.0 / sqrt(var + (double)eps));
  saved_mean[c] = mean;
  saved_invstd[c] = invstd;
  if (update) { /* as cx_bn_save_channel */
    double unbiased = m > 1 ? var * m / (m - 1) : var;
    float w = 1 - mom;
    rm[c] = __fadd_rn(__fmul_rn(rm[c], mom), __fmul_rn(mean, w));
    rv[c] = (float)__dadd_rn((double)__fmul_rn(rv[c], mom), __dmul_rn(unbiased, (double)w));
  }
}

/* cx_bn_coefficients: y = x * k + b */
__device__ __forceinline__ void coefficients(float scale, float bias, float mean, float invstd,
                                             float *k, float *b) {
  *k = __fmul_rn(scale, invstd);
  *b = __fsub_rn(bias, __fmul_rn(mean, *k));
}

__device__ __forceinline__ float affine(float x, float k, float b) {
  return __fadd_rn(__fmul_rn(x, k), b);
}

__global__ void apply_kernel(const float *x, float *y,
                             const float *scale, const float *bias, const float *mean,
                             const float *invstd, bool act, float lo, float hi, cx_bn_geom g) {
  int64_t total = g.n * g.c * g.s;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = (i / g.s) % g.c;
    float k, b;
    coefficients(scale[c], bias[c], mean[c], invstd[c], &k, &b);
    float z = affine(x[i], k, b);
    if (act) {
      z = z > lo ? z : lo;
      z = z < hi ? z : hi;
    }
    y[i] = z;
  }
}

__global__ void infer_kernel(const float *x, float *y,
                             const float *scale, const float *bias, const float *mean,
                             const float *var, float eps, cx_bn_geom g) {
  int64_t total = g.n * g.c * g.s;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = (i / g.s) % g.c;
    float k = __fdiv_rn(scale[c], __fsqrt_rn(__fadd_rn(var[c], eps)));
    y[i] = affine(x[i], k, __fsub_rn(bias[c], __fmul_rn(mean[c], k)));
  }
}

/* dy where the fused activation passed it (lo < z < hi for the forward's z), else 0 */
__device__ __forceinline__ float masked_dy(float dy, float x, float scale, float bias, float mean,
                                           float invstd, bool act, float lo, float hi) {
  if (!act) return dy;
  float k, b;
  coefficients(scale, bias, mean, invstd, &k, &b);
  float z = affine(x, k, b);
  return z > lo && z < hi ? dy : 0.0f;
}

__global__ void grad_partial_kernel(const float *__restrict__ dy, const float *__restrict__ x,
                                    const float *scale, const float *bias, const float *mean,
                                    const float *invstd, bool act, float lo, float hi,
                                    double *part, cx_bn_geom g) {
  __shared__ double t[THREADS];
  int64_t c = blockIdx.x, j0, j1;
  chunk(g, &j0, &j1);
  float mc = mean[c], ic = invstd[c], sc = scale[c], bc = act ? bias[c] : 0.0f;
  double sdy = 0, sdyx = 0;
  for (int64_t j = j0 + threadIdx.x; j < j1; j += THREADS) {
    int64_t i = at(g, c, j);
    float xv = x[i], d = masked_dy(dy[i], xv, sc, bc, mc, ic, act, lo, hi);
    sdy += d;
    sdyx += (double)d * (xv - mc);
  }
  block_sum(t, sdy);
  if (threadIdx.x == 0) part[(c * g.p + blockIdx.y) * 2] = t[0];
  __syncthreads();
  block_sum(t, sdyx);
  if (threadIdx.x == 0) part[(c * g.p + blockIdx.y) * 2 + 1] = t[0];
}

__global__ void grad_fold_kernel(const double *part, double *sums, const float *invstd,
                                 float *dscale, float *dbias, int64_t channels, int p) {
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  double sdy = 0, sdyx = 0;
  for (int i = 0; i < p; i++) {
    sdy += part[(c * p + i) * 2];
    sdyx += part[(c * p + i) * 2 + 1];
  }
  sums[c] = sdy;
  sums[channels + c] = sdyx;
  dscale[c] = (float)(sdyx * invstd[c]);
  dbias[c] = (float)sdy;
}

__global__ void grad_dx_kernel(const float *dy, const float *x, float *dx, const float *scale,
                               const float *bias, const float *mean, const float *invstd,
                               bool act, float lo, float hi, const double *sums, double m_local,
                               const double *pooled_m, cx_bn_geom g) {
  int64_t total = g.n * g.c * g.s;
  double m = pooled_m ? *pooled_m : m_local;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = (i / g.s) % g.c;
    float mc = mean[c], ic = invstd[c], sc = scale[c];
    double sdy = sums[c], sdyx = sums[g.c + c];
    /* the CPU's grad_apply: dX = k * dY - kx * X + b, the mean terms folded into b */
    float k = __fmul_rn(sc, ic);
    float kx = (float)(__dmul_rn((double)__fmul_rn(__fmul_rn(k, ic), ic), sdyx) / m);
    float b = __fadd_rn((float)(__dmul_rn(-(double)k, sdy) / m), __fmul_rn(kx, mc));
    float xv = x[i], d = masked_dy(dy[i], xv, sc, act ? bias[c] : 0.0f, mc, ic, act, lo, hi);
    dx[i] = __fadd_rn(__fsub_rn(__fmul_rn(k, d), __fmul_rn(kx, xv)), b);
  }
}

/* blocks of `threads` over n, at most 65536 of them */
unsigned grid_of(int64_t n, int threads) { return blocks_for(n, threads, GRID_CAP_64K); }

}  // namespace

extern "C" {

void cx_cuda_bn_infer(const float *x, float *y, const float *scale, const float *bias,
                      const float *mean, const float *var, float eps, cx_bn_geom g,
                      cudaStream_t st) {
  infer_kernel<<<grid_of(g.n * g.c * g.s, THREADS), THREADS, 0, st>>>(x, y, scale, bias,
                                                                      mean, var, eps, g);
}

void cx_cuda_bn_sum(const float *x, double *part, double *sum, cx_bn_geom g, cudaStream_t st) {
  partial_kernel<false><<<dim3((unsigned)g.c, (unsigned)g.p), THREADS, 0, st>>>(
      x, nullptr, 0, nullptr, part, g);
  fold_kernel<<<grid_of(g.c, 128), 128, 0, st>>>(part, sum, g.c, g.p);
}

void cx_cuda_bn_sq_dev(const float *x, const double *sum, double *part, double *sq,
                       double m_local, const double *pooled_m, cx_bn_geom g, cudaStream_t st) {
  partial_kernel<true><<<dim3((unsigned)g.c, (unsigned)g.p), THREADS, 0, st>>>(
      x, sum, m_local, pooled_m, part, g);
  fold_kernel<<<grid_of(g.c, 128), 128, 0, st>>>(part, sq, g.c, g.p);
}

void cx_cuda_bn_train_out(const float *x, float *y, const float *scale, const float *bias,
                          const double *sum, const double *sq, double m_local,
                          const double *pooled_m, float eps, float momentum, bool update,
                          float *saved_mean, float *saved_invstd, float *run_mean,
                          float *run_var, bool act, float lo, float hi, cx_bn_geom g,
                          cudaStream_t st) {
  finalize_kernel<<<grid_of(g.c, 128), 128, 0, st>>>(sum, sq, m_local, pooled_m, eps,
                                                     momentum, update, saved_mean,
                                                     saved_invstd, run_mean, run_var, g.c);
  apply_kernel<<<grid_of(g.n * g.c * g.s, THREADS), THREADS, 0, st>>>(
      x, y, scale, bias, saved_mean, saved_invstd, act, lo, hi, g);
}

void cx_cuda_bn_grad_sums(const float *dy, const float *x, const float *scale,
                          const float *bias, const float *mean, const float *invstd, bool act,
                          float lo, float hi, double *part, double *sums, float *dscale,
                          float *dbias, cx_bn_geom g, cudaStream_t st) {
  grad_partial_kernel<<<dim3((unsigned)g.c, (unsigned)g.p), THREADS, 0, st>>>(
      dy, x, scale, bias, mean, invstd, act, lo, hi, part, g);
  grad_fold_kernel<<<grid_of(g.c, 128), 128, 0, st>>>(part, sums, invstd, dscale, dbias, g.c,
                                                      g.p);
}

void cx_cuda_bn_grad_dx(const float *dy, const float *x, float *dx, const float *scale,
                        const float *bias, const float *mean, const float *invstd, bool act,
                        float lo, float hi, const double *sums, double m_local,
                        const double *pooled_m, cx_bn_geom g, cudaStream_t st) {
  grad_dx_kernel<<<grid_of(g.n * g.c * g.s, THREADS), THREADS, 0, st>>>(
      dy, x, dx, scale, bias, mean, invstd, act, lo, hi, sums, m_local, pooled_m, g);
}

}  // extern "C"
