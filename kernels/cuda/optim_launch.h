#ifndef CX_CUDA_OPTIM_LAUNCH_H
#define CX_CUDA_OPTIM_LAUNCH_H

/* Training-step kernels (optim_kernels.cu). lr, decay and the step counter are device scalars,
 * read by the kernels. Reductions go through `part` (cx_cuda_optim_parts() doubles per sum):
 * fixed block partials folded in a fixed order. */

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Partial blocks a reduction over n elements uses. */
int cx_cuda_optim_parts(int64_t n);

/* m NULL: plain SGD (momentum 0) */
void cx_cuda_sgd(float *w, const float *g, float *m, int64_t n, const float *lr, float wd,
                 float mu, bool nesterov, cudaStream_t st);
void cx_cuda_adamw(float *w, const float *g, float *m, float *v, int64_t n, const float *lr,
                   const int64_t *t, float wd, float beta1, float beta2, float eps,
                   cudaStream_t st);
/* part: 2 * cx_cuda_optim_parts(n) doubles and one more */
void cx_cuda_lamb(float *w, const float *g, float *m, float *v, int64_t n, const float *lr,
                  const int64_t *t, float wd, float beta1, float beta2, float eps,
                  bool always_adapt, double *part, cudaStream_t st);
void cx_cuda_ema(float *avg, const float *x, int64_t n, const float *decay, cudaStream_t st);
/* part: cx_cuda_optim_parts(n) doubles */
void cx_cuda_sq_norm(const float *x, int64_t n, double *out, double *part, cudaStream_t st);
/* out must be set to true first (a byte 1); a non-finite element clears it */
void cx_cuda_all_finite(const float *x, int64_t n, bool *out, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
