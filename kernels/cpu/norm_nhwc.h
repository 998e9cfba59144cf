#ifndef CX_CPU_NORM_NHWC_H
#define CX_CPU_NORM_NHWC_H

#include "cpu.h"

/* Batch normalization on channels-last 4-D tensors and on tensors of one value per channel and
 * image (kernels/cpu/norm_nhwc.c): the data is rows of C contiguous floats, so loops run along rows vectorised over channels, each thread
 * takes a range of rows and keeps per-channel partial sums that are reduced after. The
 * BatchNormalization kernels in norm.c call these for such an X. */

/* Scratch bytes for C channels and up to `threads` threads. */
size_t cx_bn_nhwc_scratch(int64_t c, int threads);
/* Kernel arguments as in norm.c; `threads` no more than the scratch was sized for. */
void cx_bn_nhwc_infer(const cx_kernel_args *a, int threads);
cx_status cx_bn_nhwc_train(const cx_kernel_args *a, int threads);
cx_status cx_bn_nhwc_grad(const cx_kernel_args *a, int threads);

/* Shared by both layouts (norm.c). The normalisation as y = x * k + b: BatchNormTrain and a fused
 * activation's BatchNormGrad make k and b the same way, so the gradient's recomputed value is
 * the forward's bit for bit. */
static inline void cx_bn_coefficients(float scale, float bias, float mean, float invstd, float *k,
                                      float *b) {
  *k = scale * invstd;
  *b = bias - mean * *k;
}
/* BatchNormTrain's saved mean and inverse std of channel c, and, in training outside a
 * recomputation (which saw this batch already), its running statistics; var is the biased
 * batch variance over m values. */
/* Synchronised BatchNorm (a->sync_stats): n per-channel sums pooled over the replicas in place,
 * from the program's thread; nothing without replicas. A kernel needs cx_bn_pool_bytes(C) of
 * scratch for them (2C + 1 doubles: two sums per channel and the count). */
size_t cx_bn_pool_bytes(int64_t c);
cx_status cx_bn_pool(const cx_kernel_args *a, double *buf, int64_t n);
void cx_bn_save_channel(const cx_kernel_args *a, int64_t c, float mean, float invstd, double var,
                        double m);

#endif
