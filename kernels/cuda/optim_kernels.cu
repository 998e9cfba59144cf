/* Training-step kernels (optim_launch.h), the loops of kernels/cpu/optim*.c operation for
 * operation. The CPU build does not contract a * b + c into a fused multiply-add (C11, no
 * -ffp-contract), so the _rn intrinsics here keep nvcc from doing so: the updates then give the
 * CPU's bits, and a GPU training run follows the CPU's closely. Per-tensor coefficients that
 * depend on the device scalars (lr, step) are computed once per block, in double as the CPU. */
#include "common.cuh"
#include "optim_launch.h"

namespace {

constexpr int kMaxParts = 1024;
constexpr int kPerThread = 8; /* elements per thread before another partial block is worth it */

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }

/* grid-stride kernels: blocks of THREADS, at most 65536 of them */
unsigned grid_of(int64_t n) { return blocks_for(n, THREADS, GRID_CAP_64K); }

__global__ void sgd_plain(float *w, const float *g, int64_t n, const float *lr_p, float wd) {
  const float lr = *lr_p;
  GRID_STRIDE(i, n) { w[i] = sub(w[i], mul(lr, add(g[i], mul(wd, w[i])))); }
}

__global__ void sgd_momentum(float *w, const float *g, float *buf, int64_t n, const float *lr_p,
                             float wd, float mu, bool nesterov) {
  const float lr = *lr_p;
  GRID_STRIDE(i, n) {
    float d = add(g[i], mul(wd, w[i]));
    float b = add(mul(mu, buf[i]), d);
    buf[i] = b;
    w[i] = sub(w[i], mul(lr, nesterov ? add(d, mul(mu, b)) : b));
  }
}

struct adamw_coef {
  float decay, b1, b2, a1, a2, step_size, bc2_sqrt, eps;
};

__global__ void adamw_kernel(float *w, const float *g, float *m, float *v, int64_t n,
                             const float *lr_p, const int64_t *t_p, float wd, float beta1,
                             float beta2, float eps) {
  __shared__ adamw_coef k;
  if (threadIdx.x == 0) { /* cx_optim_adamw_update's coefficients */
    const float lr = *lr_p;
    const double t = (double)*t_p;
    k.decay = (float)(1.0 - (double)lr * wd);
    k.b1 = beta1;
    k.b2 = beta2;
    k.a1 = (float)(1.0 - beta1);
    k.a2 = (float)(1.0 - beta2);
    k.step_size = (float)(lr / (1.0 - pow((double)beta1, t)));
    k.bc2_sqrt = (float)sqrt(1.0 - pow((double)beta2, t));
    k.eps = eps;
  }
  __syncthreads();
  GRID_STRIDE(i, n) {
    float gi = g[i];
    float wi = mul(w[i], k.decay);
    float mi = add(mul(m[i], k.b1), mul(k.a1, gi));
    float vi = add(mul(v[i], k.b2), mul(mul(k.a2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    float denom = add(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);
    w[i] = sub(wi, mul(k.step_size, __fdiv_rn(mi, denom)));
  }
}

struct lamb_coef {
  float b1, b2, a1, a2, bc1, bc2_sqrt, eps, wd;
};

__device__ void lamb_coefs(lamb_coef *k, const int64_t *t_p, float wd, float beta1, float beta2,
                           float eps) {
  const double t = (double)*t_p;
  k->b1 = beta1;
  k->b2 = beta2;
  k->a1 = (float)(1.0 - beta1);
  k->a2 = (float)(1.0 - beta2);
  k->bc1 = (float)(1.0 - pow((double)beta1, t));
  k->bc2_sqrt = (float)sqrt(1.0 - pow((double)beta2, t));
  k->eps = eps;
  k->wd = wd;
}

__device__ __forceinline__ float direction(const lamb_coef &k, float m, float v, float w) {
  float denom = add(__fdiv_rn(__fsqrt_rn(v), k.bc2_sqrt), k.eps);
  return add(__fdiv_rn(__fdiv_rn(m, k.bc1), denom), mul(k.wd, w));
}

/* the moments, and per block the partial sums of w^2 (part[b]) and u^2 (part[parts + b]) */
__global__ void lamb_moments(const float *w, const float *g, float *m, float *v, int64_t n,
                             const int64_t *t_p, float wd, float beta1, float beta2, float eps,
                             double *part) {
  __shared__ lamb_coef k;
  __shared__ double t[THREADS];
  if (threadIdx.x == 0) lamb_coefs(&k, t_p, wd, beta1, beta2, eps);
  __syncthreads();
  double w2 = 0, u2 = 0;
  GRID_STRIDE(i, n) {
    float gi = g[i], wi = w[i];
    float mi = add(mul(m[i], k.b1), mul(k.a1, gi));
    float vi = add(mul(v[i], k.b2), mul(mul(k.a2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    float u = direction(k, mi, vi, wi);
    w2 += (double)wi * wi;
    u2 += (double)u * u;
  }
  block_sum(t, w2);
  if (threadIdx.x == 0) part[blockIdx.x] = t[0];
  __syncthreads();
  block_sum(t, u2);
  if (threadIdx.x == 0) part[gridDim.x + blockIdx.x] = t[0];
}

/* one block: the trust ratio, and the step lr * ratio into part[2 * parts] */
__global__ void lamb_ratio(double *part, int parts, const float *lr_p, float wd,
                           bool always_adapt) {
  __shared__ double t[THREADS];
  fold(t, part, parts);
  double w2 = t[0];
  __syncthreads();
  fold(t, part + parts, parts);
  double u2 = t[0];
  if (threadIdx.x == 0) {
    double ratio = 1;
    if ((wd != 0 || always_adapt) && w2 > 0 && u2 > 0) ratio = sqrt(w2) / sqrt(u2);
    part[2 * parts] = (double)(float)(*lr_p * ratio);
  }
}

__global__ void lamb_apply(float *w, const float *m, const float *v, int64_t n,
                           const int64_t *t_p, float wd, float beta1, float beta2, float eps,
                           const double *step_p) {
  __shared__ lamb_coef k;
  if (threadIdx.x == 0) lamb_coefs(&k, t_p, wd, beta1, beta2, eps);
  __syncthreads();
  const float step = (float)*step_p;
  GRID_STRIDE(i, n) { w[i] = sub(w[i], mul(step, direction(k, m[i], v[i], w[i]))); }
}

__global__ void ema_kernel(float *avg, const float *x, int64_t n, const float *decay) {
  const float d = *decay, w = (float)(1.0 - d);
  GRID_STRIDE(i, n) { avg[i] = add(mul(d, avg[i]), mul(w, x[i])); }
}

__global__ void sq_partial(const float *x, int64_t n, double *part) {
  __shared__ double t[THREADS];
  double s = 0;
  GRID_STRIDE(i, n) { s += (double)x[i] * x[i]; }
  block_sum(t, s);
  if (threadIdx.x == 0) part[blockIdx.x] = t[0];
}

__global__ void sq_fold(const double *part, int parts, double *out) {
  __shared__ double t[THREADS];
  fold(t, part, parts);
  if (threadIdx.x == 0) *out = t[0];
}

/* Every thread that sees a non-finite element stores the same false: the result does not depend
 * on their order. */
__global__ void finite_kernel(const float *x, int64_t n, bool *out) {
  bool ok = true;
  GRID_STRIDE(i, n) { ok = ok && isfinite(x[i]); }
  if (!ok) *out = false;
}

}  // namespace

extern "C" {

int cx_cuda_optim_parts(int64_t n) {
  return (int)blocks_for(n, THREADS * kPerThread, kMaxParts);
}

void cx_cuda_sgd(float *w, const float *g, float *m, int64_t n, const float *lr, float wd,
                 float mu, bool nesterov, cudaStream_t st) {
  if (!m) sgd_plain<<<grid_of(n), THREADS, 0, st>>>(w, g, n, lr, wd);
  else sgd_momentum<<<grid_of(n), THREADS, 0, st>>>(w, g, m, n, lr, wd, mu, nesterov);
}

void cx_cuda_adamw(float *w, const float *g, float *m, float *v, int64_t n, const float *lr,
                   const int64_t *t, float wd, float beta1, float beta2, float eps,
                   cudaStream_t st) {
  adamw_kernel<<<grid_of(n), THREADS, 0, st>>>(w, g, m, v, n, lr, t, wd, beta1, beta2, eps);
}

void cx_cuda_lamb(float *w, const float *g, float *m, float *v, int64_t n, const float *lr,
                  const int64_t *t, float wd, float beta1, float beta2, float eps,
                  bool always_adapt, double *part, cudaStream_t st) {
  int parts = cx_cuda_optim_parts(n);
  lamb_moments<<<parts, THREADS, 0, st>>>(w, g, m, v, n, t, wd, beta1, beta2, eps, part);
  lamb_ratio<<<1, THREADS, 0, st>>>(part, parts, lr, wd, always_adapt);
  lamb_apply<<<grid_of(n), THREADS, 0, st>>>(w, m, v, n, t, wd, beta1, beta2, eps,
                                             part + 2 * parts);
}

void cx_cuda_ema(float *avg, const float *x, int64_t n, const float *decay, cudaStream_t st) {
  ema_kernel<<<grid_of(n), THREADS, 0, st>>>(avg, x, n, decay);
}

void cx_cuda_sq_norm(const float *x, int64_t n, double *out, double *part, cudaStream_t st) {
  int parts = cx_cuda_optim_parts(n);
  sq_partial<<<parts, THREADS, 0, st>>>(x, n, part);
  sq_fold<<<1, THREADS, 0, st>>>(part, parts, out);
}

void cx_cuda_all_finite(const float *x, int64_t n, bool *out, cudaStream_t st) {
  finite_kernel<<<grid_of(n), THREADS, 0, st>>>(x, n, out);
}

}  // extern "C"
