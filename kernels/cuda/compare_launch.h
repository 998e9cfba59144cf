#ifndef CX_CUDA_COMPARE_LAUNCH_H
#define CX_CUDA_COMPARE_LAUNCH_H

/* Launchers of the compare family (compare_kernels.cu): the comparisons with numpy broadcasting
 * (bool bytes out), Not and Cast. Each launcher queues on `s` and returns the launch's error. */

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { CX_CU_EQ, CX_CU_LT, CX_CU_GT, CX_CU_LE, CX_CU_GE };

/* The element types these launchers take (the C side maps cx_dtype onto them). */
enum { CX_CU_T_F32, CX_CU_T_U8, CX_CU_T_S8, CX_CU_T_S32, CX_CU_T_S64, CX_CU_T_BOOL };

/* y (dims yd[0..ynd), ynd <= 8) = a op b, 1 or 0; a and b of one type (F32, S32 or S64) with
 * ranks <= ynd, broadcasting to y. */
cudaError_t cx_cu_compare(int op, int type, uint8_t *y, const int64_t *yd, int ynd, const void *a,
                          const int64_t *ad, int and_, const void *b, const int64_t *bd, int bnd,
                          cudaStream_t s);

/* y[i] = !x[i] over n bytes */
cudaError_t cx_cu_not(uint8_t *y, const uint8_t *x, int64_t n, cudaStream_t s);

/* y (type `to`) = x (type `from`) converted, n elements; from != to. */
cudaError_t cx_cu_cast(void *y, int to, const void *x, int from, int64_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
