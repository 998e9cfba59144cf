#ifndef CX_CUDA_SELECT_LAUNCH_H
#define CX_CUDA_SELECT_LAUNCH_H

/* Launchers of the select family (select_kernels.cu): Pow, PowGrad and Where with numpy
 * broadcasting of their operands to the contiguous output (dims yd[0..ynd), ynd <= 8). Each
 * launcher queues on `s` and returns the launch's error. */

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An operand: device data and its dims, rank <= the output's. */
typedef struct cx_cu_operand {
  const void *data;
  const int64_t *d;
  int nd;
} cx_cu_operand;

/* y = x ^ e (x, e f32) */
cudaError_t cx_cu_pow(float *y, const int64_t *yd, int ynd, cx_cu_operand x, cx_cu_operand e,
                      cudaStream_t s);

/* dx = dy * e * x ^ (e - 1) (all f32) */
cudaError_t cx_cu_pow_grad(float *dx, const int64_t *yd, int ynd, cx_cu_operand dy,
                           cx_cu_operand x, cx_cu_operand e, cudaStream_t s);

/* y = c ? a : b (c bool bytes, any nonzero true; a, b f32) */
cudaError_t cx_cu_where(float *y, const int64_t *yd, int ynd, cx_cu_operand c, cx_cu_operand a,
                        cx_cu_operand b, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
