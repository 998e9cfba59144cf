#ifndef CX_CUDA_LAYER_NORM_LAUNCH_H
#define CX_CUDA_LAYER_NORM_LAUNCH_H

/* Layer normalization on plain f32 data seen as [rows, cols] (layer_norm_kernels.cu), the
 * normalised trailing axes being the contiguous cols. One block per row, the row's sums in double
 * and folded in a fixed order; the gradient's parameter sums (dScale, dB: sums over rows) are
 * taken in p row chunks per column (doubles in `part`, 2 * p * cols of them) and folded in chunk
 * order, so no result depends on scheduling. */

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cx_ln_geom {
  int64_t rows, cols;
  int p; /* row chunks of the parameter sums (LayerNormGrad) */
} cx_ln_geom;

/* y = (x - mean) * invstd * scale (+ bias); bias, mean and invstd may be NULL */
void cx_cuda_ln_forward(const float *x, const float *scale, const float *bias, float *y,
                        float *mean, float *invstd, float eps, cx_ln_geom g, cudaStream_t st);

/* dx = invstd * (dy * scale - mean(dy * scale) - xhat * mean(dy * scale * xhat)), per row */
void cx_cuda_ln_grad_dx(const float *dy, const float *x, const float *scale, const float *mean,
                        const float *invstd, float *dx, cx_ln_geom g, cudaStream_t st);

/* dscale[j] = sum over rows of dy * xhat, dbias[j] = sum over rows of dy; either may be NULL */
void cx_cuda_ln_grad_params(const float *dy, const float *x, const float *mean,
                            const float *invstd, double *part, float *dscale, float *dbias,
                            cx_ln_geom g, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
