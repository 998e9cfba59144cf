#ifndef CX_CUDA_QUANT_LAUNCH_H
#define CX_CUDA_QUANT_LAUNCH_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X seen as [outer, channels, inner] (core/ops/quant.h); scale has `channels` entries (1: per
 * tensor); zero, when not NULL, as many of type zk: the quantized type (QuantizeLinear,
 * DequantizeLinear) or f32 holding an integer (FakeQuantize). */
enum { CX_CU_Q_S8 = 0, CX_CU_Q_U8 = 1, CX_CU_Q_S32 = 2, CX_CU_Q_F32 = 3 };

typedef struct cx_cu_qgeom {
  int64_t outer, channels, inner;
} cx_cu_qgeom;

/* QuantizeLinear to int8 / uint8 (yk), saturating to [lo, hi]. */
cudaError_t cx_cu_quantize(void *y, int yk, const float *x, cx_cu_qgeom g, const float *scale,
                           const void *zero, int zk, float lo, float hi, cudaStream_t s);
/* DequantizeLinear from int8 / uint8 / int32 (xk). */
cudaError_t cx_cu_dequantize(float *y, const void *x, int xk, cx_cu_qgeom g, const float *scale,
                             const void *zero, int zk, cudaStream_t s);
/* FakeQuantize: quantize to [lo, hi] and back. */
cudaError_t cx_cu_fake_quantize(float *y, const float *x, cx_cu_qgeom g, const float *scale,
                                const void *zero, int zk, float lo, float hi, cudaStream_t s);
/* FakeQuantizeGrad: dX (straight through inside the range) and, when ds is not NULL, per
 * channel grad_scale · Σ dY·(LSQ's dY/ds term), summed in double in a fixed order. */
cudaError_t cx_cu_fake_quantize_grad(float *dx, float *ds, const float *dy, const float *x,
                                     cx_cu_qgeom g, const float *scale, const void *zero, int zk,
                                     float lo, float hi, double grad_scale, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
