/* Quantization kernels (quant_launch.h), the loops of kernels/cpu/quant.c: x / s an IEEE f32
 * division (as ONNX Runtime's MLAS), rounding half to even (rintf, the CPU's nearbyintf), a NaN
 * saturating to lo in QuantizeLinear and passing through FakeQuantize, and the _rn intrinsics so
 * that nvcc contracts nothing the CPU does not. The CPU refuses a scale that is not a positive
 * finite number before dividing; here scales are device values that are not read back (a sync
 * per run), so such a scale gives inf or NaN, which the trainer's finite check reports. */
#include <math.h>

#include "common.cuh"
#include "quant_launch.h"

namespace {

struct qpar {
  cx_cu_qgeom g;
  const float *scale;
  const void *zero;
  int zk;
};

__device__ __forceinline__ int64_t channel_of(const qpar &p, int64_t i) {
  return p.g.channels > 1 ? i / p.g.inner % p.g.channels : 0;
}

__device__ __forceinline__ float zero_of(const qpar &p, int64_t c) {
  if (!p.zero) return 0.0f;
  if (p.zk == CX_CU_Q_S8) return (float)((const int8_t *)p.zero)[c];
  if (p.zk == CX_CU_Q_U8) return (float)((const uint8_t *)p.zero)[c];
  if (p.zk == CX_CU_Q_F32) return ((const float *)p.zero)[c];
  return (float)((const int32_t *)p.zero)[c];
}

/* the CPU's SATURATE: NaN to lo */
__device__ __forceinline__ float saturate(float q, float lo, float hi) {
  return !(q >= lo) ? lo : q > hi ? hi : q;
}

__global__ void quantize_kernel(void *y, int yk, const float *x, int64_t n, qpar p, float lo,
                                float hi) {
  GRID_STRIDE(i, n) {
    int64_t c = channel_of(p, i);
    float q = saturate(__fadd_rn(rintf(__fdiv_rn(x[i], p.scale[c])), zero_of(p, c)), lo, hi);
    if (yk == CX_CU_Q_S8) ((int8_t *)y)[i] = (int8_t)q;
    else ((uint8_t *)y)[i] = (uint8_t)q;
  }
}

__global__ void dequantize_kernel(float *y, const void *x, int xk, int64_t n, qpar p) {
  GRID_STRIDE(i, n) {
    int64_t c = channel_of(p, i);
    float s = p.scale[c];
    if (xk == CX_CU_Q_S32) { /* x - z in 64 bits, then to float */
      int64_t z = p.zero ? ((const int32_t *)p.zero)[c] : 0;
      y[i] = __fmul_rn((float)((int64_t)((const int32_t *)x)[i] - z), s);
    } else {
      float v = xk == CX_CU_Q_S8 ? (float)((const int8_t *)x)[i] : (float)((const uint8_t *)x)[i];
      y[i] = __fmul_rn(__fsub_rn(v, zero_of(p, c)), s);
    }
  }
}

__global__ void fake_quantize_kernel(float *y, const float *x, int64_t n, qpar p, float lo,
                                     float hi) {
  GRID_STRIDE(i, n) {
    int64_t c = channel_of(p, i);
    float s = p.scale[c], z = zero_of(p, c);
    float q = __fadd_rn(rintf(__fdiv_rn(x[i], s)), z);
    q = q < lo ? lo : q > hi ? hi : q;
    y[i] = __fmul_rn(__fsub_rn(q, z), s);
  }
}

/* dX everywhere (grid-stride) */
__global__ void fq_grad_dx(float *dx, const float *dy, const float *x, int64_t n, qpar p,
                           float lo, float hi) {
  GRID_STRIDE(i, n) {
    int64_t c = channel_of(p, i);
    float q = __fadd_rn(rintf(__fdiv_rn(x[i], p.scale[c])), zero_of(p, c));
    dx[i] = q >= lo && q <= hi ? dy[i] : 0.0f;
  }
}

/* One block per channel: Σ dY·(inside ? r - v : q < lo ? lo - z : hi - z) over the channel's
 * elements, each thread in order, then the block's tree. */
__global__ void fq_grad_ds(float *ds, const float *dy, const float *x, qpar p, float lo, float hi,
                           double grad_scale) {
  __shared__ double t[THREADS];
  const int64_t c = blockIdx.x, per = p.g.outer * p.g.inner;
  const float s = p.scale[c], z = zero_of(p, c);
  double sum = 0;
  for (int64_t k = threadIdx.x; k < per; k += THREADS) {
    int64_t i = (k / p.g.inner * p.g.channels + c) * p.g.inner + k % p.g.inner;
    float v = __fdiv_rn(x[i], s), r = rintf(v), q = __fadd_rn(r, z);
    bool inside = q >= lo && q <= hi;
    sum += (double)dy[i] * (double)(inside ? __fsub_rn(r, v) : q < lo ? __fsub_rn(lo, z)
                                                                       : __fsub_rn(hi, z));
  }
  block_sum(t, sum);
  if (threadIdx.x == 0) ds[c] = (float)(grad_scale * t[0]);
}

int64_t count(const cx_cu_qgeom &g) { return g.outer * g.channels * g.inner; }

}  // namespace

extern "C" cudaError_t cx_cu_quantize(void *y, int yk, const float *x, cx_cu_qgeom g,
                                      const float *scale, const void *zero, int zk, float lo,
                                      float hi, cudaStream_t s) {
  int64_t n = count(g);
  if (n == 0) return cudaSuccess;
  quantize_kernel<<<blocks_for(n), THREADS, 0, s>>>(y, yk, x, n, qpar{g, scale, zero, zk}, lo, hi);
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_dequantize(float *y, const void *x, int xk, cx_cu_qgeom g,
                                        const float *scale, const void *zero, int zk,
                                        cudaStream_t s) {
  int64_t n = count(g);
  if (n == 0) return cudaSuccess;
  dequantize_kernel<<<blocks_for(n), THREADS, 0, s>>>(y, x, xk, n, qpar{g, scale, zero, zk});
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_fake_quantize(float *y, const float *x, cx_cu_qgeom g,
                                           const float *scale, const void *zero, int zk, float lo,
                                           float hi, cudaStream_t s) {
  int64_t n = count(g);
  if (n == 0) return cudaSuccess;
  fake_quantize_kernel<<<blocks_for(n), THREADS, 0, s>>>(y, x, n, qpar{g, scale, zero, zk}, lo,
                                                          hi);
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_fake_quantize_grad(float *dx, float *ds, const float *dy,
                                                const float *x, cx_cu_qgeom g, const float *scale,
                                                const void *zero, int zk, float lo, float hi,
                                                double grad_scale, cudaStream_t s) {
  int64_t n = count(g);
  qpar p{g, scale, zero, zk};
  if (n > 0) fq_grad_dx<<<blocks_for(n), THREADS, 0, s>>>(dx, dy, x, n, p, lo, hi);
  if (ds && g.channels > 0)
    fq_grad_ds<<<(unsigned)g.channels, THREADS, 0, s>>>(ds, dy, x, p, lo, hi, grad_scale);
  return cudaGetLastError();
}
