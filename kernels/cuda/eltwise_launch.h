#ifndef CX_CUDA_ELTWISE_LAUNCH_H
#define CX_CUDA_ELTWISE_LAUNCH_H

/* Launchers of the element-wise family (eltwise_kernels.cu). Shapes are given as dims + rank,
 * row-major and contiguous; operands broadcast numpy style (aligned right, 1 or missing spreads).
 * Every launcher queues on `s` and returns the launch's error (cudaGetLastError). */

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { CX_CU_ADD, CX_CU_SUB, CX_CU_MUL, CX_CU_DIV, CX_CU_COPY };

/* y = a op b; for CX_CU_COPY y = scale * a (b unused, may be NULL). ynd, and, bnd <= 8. y may be
 * a (or b) itself when that operand has y's shape. */
cudaError_t cx_cu_binary(int op, float scale, float *y, const int64_t *yd, int ynd, const float *a,
                         const int64_t *ad, int and_, const float *b, const int64_t *bd, int bnd,
                         cudaStream_t s);

/* y (shape keep, same rank as xd) = scale * sum of x over the dims where keep is 1 and x is
 * not. */
cudaError_t cx_cu_reduce_to(float *y, const int64_t *keep, const float *x, const int64_t *xd,
                            int nd, float scale, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
