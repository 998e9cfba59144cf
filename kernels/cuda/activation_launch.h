#ifndef CX_CUDA_ACTIVATION_LAUNCH_H
#define CX_CUDA_ACTIVATION_LAUNCH_H

/* Launchers of the activations and their gradient (activation_kernels.cu). Each queues on `s` and
 * returns the launch's error. */

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The order of cx_act (core/ops/activation.h); activation.c checks that they agree. */
enum {
  CX_CU_RELU,
  CX_CU_LEAKY_RELU,
  CX_CU_CLIP,
  CX_CU_SIGMOID,
  CX_CU_HARD_SIGMOID,
  CX_CU_HARD_SWISH,
  CX_CU_TANH,
  CX_CU_EXP,
  CX_CU_LOG,
  CX_CU_SQRT,
  CX_CU_ERF,
  CX_CU_GELU,
  CX_CU_RECIPROCAL,
  CX_CU_ACT_COUNT
};

/* alpha, beta as cx_act_params gives them; Clip's bounds are *lo_p / *hi_p (device scalars, read
 * by the kernel) when those are not NULL, else lo / hi. */
typedef struct cx_cu_act_par {
  int op;
  float alpha, beta, lo, hi;
  const float *lo_p, *hi_p;
} cx_cu_act_par;

cudaError_t cx_cu_act_forward(cx_cu_act_par p, float *y, const float *x, int64_t n,
                              cudaStream_t s);
/* dx from dy and whichever of x (forward input) and y (forward output) the derivative reads;
 * the other may be NULL. */
cudaError_t cx_cu_act_backward(cx_cu_act_par p, float *dx, const float *dy, const float *x,
                               const float *y, int64_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
