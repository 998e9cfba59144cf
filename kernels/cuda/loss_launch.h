#ifndef CX_CUDA_LOSS_LAUNCH_H
#define CX_CUDA_LOSS_LAUNCH_H

/* Loss kernels (loss_kernels.cu). Scores are [N, C, d...]: a position is one (n, d...), its C
 * class scores `inner` apart; positions = N * inner. One warp per position; per-position results
 * go to `part` (doubles) and are added in a fixed order by one block. */

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { CX_CUDA_RED_NONE, CX_CUDA_RED_SUM, CX_CUDA_RED_MEAN };

typedef struct cx_sce_args {
  const float *x;      /* scores */
  const void *labels;  /* int64 or int32 */
  bool labels64;
  const float *w;      /* class weights or NULL */
  int64_t positions, c, inner;
  bool has_ignore;
  int64_t ignore;
  double eps; /* label smoothing */
  int mode;   /* CX_CUDA_RED_* */
} cx_sce_args;

/* loss: [positions] (none) or a scalar; log_prob NULL or like x; part: 2 * positions doubles */
void cx_cuda_sce(const cx_sce_args *s, float *loss, float *log_prob, double *part,
                 cudaStream_t st);
/* dx like x from dloss ([positions] or a scalar); part: 1 double */
void cx_cuda_sce_grad(const cx_sce_args *s, const float *dloss, float *dx, double *part,
                      cudaStream_t st);

/* KLDivTemperature: out = T^2 / N * sum KL(softmax(t/T) || softmax(s/T)); part: positions */
void cx_cuda_kd(const float *s, const float *t, int64_t n, int64_t c, int64_t inner, double temp,
                float *out, double *part, cudaStream_t st);
/* dx = dloss * T / N * (softmax(s/T) - softmax(t/T)) */
void cx_cuda_kd_grad(const float *dloss, const float *s, const float *t, int64_t n, int64_t c,
                     int64_t inner, double temp, float *dx, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
