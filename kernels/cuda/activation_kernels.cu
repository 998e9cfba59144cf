/* Device code of the activations and ActivationGrad: the formulas of kernels/cpu/activation.c
 * (its portable loop, with the AVX2 path's cancellation-free Gelu), one templated loop per op so
 * the switch folds away. */

#include "activation_launch.h"
#include "common.cuh"

namespace {

__device__ __forceinline__ float clampf(float v, float lo, float hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* x * Phi(x) with Phi = erfc(-x / sqrt 2) / 2, free of 1 + erf's cancellation at negative x; the
 * tanh form as x * sigmoid(2u), which equals 0.5 x (1 + tanh u) without cancelling either */
__device__ __forceinline__ float gelu(float alpha, float x) {
  if (alpha == 0) return 0.5f * x * erfcf(-x * 0.7071067812f);
  float u2 = 2 * 0.7978845608f * (x + 0.044715f * x * x * x);
  return x / (1.0f + expf(-u2));
}

__device__ __forceinline__ float gelu_grad(float alpha, float x) {
  if (alpha == 0)
    return 0.5f * erfcf(-x * 0.7071067812f) + x * 0.3989422804f * expf(-0.5f * x * x);
  /* 0.5 (1 + t) = s and 1 - t^2 = 4 s (1 - s) with s = sigmoid(2u); beyond |x| = 20 the
   * derivative is 0 or 1 in float, and the clamp keeps x^3 finite (inf * 0 would be NaN) */
  x = fmaxf(-20.0f, fminf(20.0f, x));
  float u2 = 2 * 0.7978845608f * (x + 0.044715f * x * x * x);
  float s = 1.0f / (1.0f + expf(-u2)), ds = s * (1 - s);
  float k = x * 2 * 0.7978845608f * (1 + 3 * 0.044715f * x * x);
  return s + k * ds;
}

template <int OP>
__device__ __forceinline__ float fwd(const cx_cu_act_par &p, float lo, float hi, float x) {
  switch (OP) {
  case CX_CU_RELU: return x > 0 ? x : 0;
  case CX_CU_LEAKY_RELU: return x >= 0 ? x : p.alpha * x;
  case CX_CU_CLIP: return fminf(fmaxf(x, lo), hi);
  case CX_CU_SIGMOID: return 1.0f / (1.0f + expf(-x));
  case CX_CU_HARD_SIGMOID: return clampf(p.alpha * x + p.beta, 0, 1);
  case CX_CU_HARD_SWISH: return x * clampf((x + 3) / 6.0f, 0, 1); /* x / 6 + 0.5 cancels near -3 */
  case CX_CU_TANH: return tanhf(x);
  case CX_CU_EXP: return expf(x);
  case CX_CU_LOG: return logf(x);
  case CX_CU_SQRT: return sqrtf(x);
  case CX_CU_ERF: return erff(x);
  case CX_CU_GELU: return gelu(p.alpha, x);
  case CX_CU_RECIPROCAL: return 1.0f / x;
  default: return x;
  }
}

template <int OP>
__device__ __forceinline__ float bwd(const cx_cu_act_par &p, float lo, float hi, float dy, float x,
                                     float y) {
  switch (OP) {
  case CX_CU_RELU: return y > 0 ? dy : 0;
  case CX_CU_LEAKY_RELU: return x > 0 ? dy : p.alpha * dy;
  case CX_CU_CLIP: return x > lo && x < hi ? dy : 0;
  case CX_CU_SIGMOID: return dy * y * (1 - y);
  case CX_CU_HARD_SIGMOID: {
    float v = p.alpha * x + p.beta;
    return v > 0 && v < 1 ? p.alpha * dy : 0;
  }
  case CX_CU_HARD_SWISH: return x < -3 ? 0 : x > 3 ? dy : dy * ((x + 1.5f) / 3.0f);
  case CX_CU_TANH: return dy * (1 - y * y);
  case CX_CU_EXP: return dy * y;
  case CX_CU_LOG: return dy / x;
  case CX_CU_SQRT: return dy * 0.5f / y;
  case CX_CU_ERF: return dy * 1.1283791671f * expf(-x * x); /* 2 / sqrt(pi) */
  case CX_CU_GELU: return dy * gelu_grad(p.alpha, x);
  case CX_CU_RECIPROCAL: return -dy * y * y;
  default: return dy;
  }
}

/* Clip's bounds: the device scalars when given (the opset-11 inputs), else the host values */
__device__ __forceinline__ void bounds(const cx_cu_act_par &p, float *lo, float *hi) {
  *lo = p.lo_p ? *p.lo_p : p.lo;
  *hi = p.hi_p ? *p.hi_p : p.hi;
}

template <int OP>
__global__ void fwd_kernel(cx_cu_act_par p, float *y, const float *x, int64_t n) {
  float lo, hi;
  bounds(p, &lo, &hi);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = fwd<OP>(p, lo, hi, x[i]);
}

template <int OP>
__global__ void bwd_kernel(cx_cu_act_par p, float *dx, const float *dy, const float *x,
                           const float *y, int64_t n) {
  float lo, hi;
  bounds(p, &lo, &hi);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dx[i] = bwd<OP>(p, lo, hi, dy[i], x ? x[i] : 0.0f, y ? y[i] : 0.0f);
}

#define CX_CU_ACT_CASES(M)                                                                         \
  M(CX_CU_RELU) M(CX_CU_LEAKY_RELU) M(CX_CU_CLIP) M(CX_CU_SIGMOID) M(CX_CU_HARD_SIGMOID)           \
  M(CX_CU_HARD_SWISH) M(CX_CU_TANH) M(CX_CU_EXP) M(CX_CU_LOG) M(CX_CU_SQRT) M(CX_CU_ERF)           \
  M(CX_CU_GELU) M(CX_CU_RECIPROCAL)

} // namespace

extern "C" cudaError_t cx_cu_act_forward(cx_cu_act_par p, float *y, const float *x, int64_t n,
                                         cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  unsigned g = blocks_for(n);
  switch (p.op) {
#define FWD_CASE(OP)                                                                               \
  case OP: fwd_kernel<OP><<<g, THREADS, 0, s>>>(p, y, x, n); break;
    CX_CU_ACT_CASES(FWD_CASE)
#undef FWD_CASE
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_act_backward(cx_cu_act_par p, float *dx, const float *dy,
                                          const float *x, const float *y, int64_t n,
                                          cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  unsigned g = blocks_for(n);
  switch (p.op) {
#define BWD_CASE(OP)                                                                               \
  case OP: bwd_kernel<OP><<<g, THREADS, 0, s>>>(p, dx, dy, x, y, n); break;
    CX_CU_ACT_CASES(BWD_CASE)
#undef BWD_CASE
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
