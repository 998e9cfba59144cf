#ifndef CX_CPU_NORM_NHWC_H
#define CX_CPU_NORM_NHWC_H

#include "cpu.h"

/* Batch normalization on channels-last 4-D tensors (kernels/cpu/norm_nhwc.c): the data is
 * N*H*W rows of C contiguous floats, so loops run along rows vectorised over channels, each thread
 * takes a range of rows and keeps per-channel partial sums that are reduced after. The
 * BatchNormalization kernels in norm.c call these when their X is channels-last. */

/* Scratch bytes for C channels and up to `threads` threads. */
size_t cx_bn_nhwc_scratch(int64_t c, int threads);
/* Kernel arguments as in norm.c; `threads` no more than the scratch was sized for. */
void cx_bn_nhwc_infer(const cx_kernel_args *a, int threads);
void cx_bn_nhwc_train(const cx_kernel_args *a, int threads);
void cx_bn_nhwc_grad(const cx_kernel_args *a, int threads);

#endif
