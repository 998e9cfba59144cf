#ifndef CX_CUDA_DROPOUT_LAUNCH_H
#define CX_CUDA_DROPOUT_LAUNCH_H

/* Dropout kernels (dropout_kernels.cu). The ratio is the device scalar `ratio` when not NULL
 * (the op's optional input), else `ratio_attr`. */

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element i is kept when the uniform number of stream `key` at position
 * (first + stride * (i / row)) * row + i % row (cx_batch_rows_index) is at least the ratio:
 * mask[i] = kept, y[i] = x[i] * mask[i] * (1 / (1 - ratio)). */
void cx_cuda_dropout_train(const float *x, float *y, float *mask, int64_t n, int64_t row,
                           int64_t first, int64_t stride, uint64_t key, const float *ratio,
                           float ratio_attr, cudaStream_t st);
/* dx = dy * mask * (1 / (1 - ratio)) */
void cx_cuda_dropout_grad(const float *dy, const float *mask, float *dx, int64_t n,
                          const float *ratio, float ratio_attr, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
