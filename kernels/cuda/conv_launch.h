#ifndef CX_CUDA_CONV_LAUNCH_H
#define CX_CUDA_CONV_LAUNCH_H

/* Launchers of the convolution family (conv_kernels.cu): the explicit padding that turns an
 * asymmetrically padded convolution into a symmetric one for cuDNN. Planes are row-major
 * [planes, h, w] (small) and [planes, hp, wp] (padded), the small one at (top, left) inside the
 * padded one. Each queues on `s` and returns the launch's error. */

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* xp = x surrounded by zeros */
cudaError_t cx_cu_pad2d(const float *x, float *xp, int64_t planes, int64_t h, int64_t w,
                        int64_t hp, int64_t wp, int64_t top, int64_t left, cudaStream_t s);
/* x = the (h, w) window of xp at (top, left) */
cudaError_t cx_cu_crop2d(const float *xp, float *x, int64_t planes, int64_t h, int64_t w,
                         int64_t hp, int64_t wp, int64_t top, int64_t left, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
