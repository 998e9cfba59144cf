#ifndef CX_CUDA_NORM_LAUNCH_H
#define CX_CUDA_NORM_LAUNCH_H

/* Batch normalization on plain [N, C, S] f32 data (norm_kernels.cu). Channel sums are taken in
 * P partial blocks per channel (doubles in `part`), folded in a fixed order, so results do not
 * depend on scheduling. lo/hi: the fused activation's clamp, act false when there is none. */

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cx_bn_geom {
  int64_t n, c, s; /* batch, channels, spatial size */
  int p;           /* partial blocks per channel */
} cx_bn_geom;

void cx_cuda_bn_infer(const float *x, float *y, const float *scale, const float *bias,
                      const float *mean, const float *var, float eps, cx_bn_geom g,
                      cudaStream_t st);

/* sum[c] = sum of channel c of x (C doubles) */
void cx_cuda_bn_sum(const float *x, double *part, double *sum, cx_bn_geom g, cudaStream_t st);
/* sq[c] = sum of (x - mean_c)^2, mean_c = (float)(sum[c] / m); m = *pooled_m when not NULL */
void cx_cuda_bn_sq_dev(const float *x, const double *sum, double *part, double *sq,
                       double m_local, const double *pooled_m, cx_bn_geom g, cudaStream_t st);
/* Saved mean and inverse std per channel, running statistics when update, then y. */
void cx_cuda_bn_train_out(const float *x, float *y, const float *scale, const float *bias,
                          const double *sum, const double *sq, double m_local,
                          const double *pooled_m, float eps, float momentum, bool update,
                          float *saved_mean, float *saved_invstd, float *run_mean,
                          float *run_var, bool act, float lo, float hi, cx_bn_geom g,
                          cudaStream_t st);

/* sums[c] = sum(dy'), sums[C + c] = sum(dy' * (x - mean)), dy' being dy masked by the fused
 * activation (bias given) or dy; dscale, dbias from them. */
void cx_cuda_bn_grad_sums(const float *dy, const float *x, const float *scale,
                          const float *bias, const float *mean, const float *invstd, bool act,
                          float lo, float hi, double *part, double *sums, float *dscale,
                          float *dbias, cx_bn_geom g, cudaStream_t st);
/* dx from the (possibly pooled) sums over m values */
void cx_cuda_bn_grad_dx(const float *dy, const float *x, float *dx, const float *scale,
                        const float *bias, const float *mean, const float *invstd, bool act,
                        float lo, float hi, const double *sums, double m_local,
                        const double *pooled_m, cx_bn_geom g, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
