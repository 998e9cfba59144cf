#ifndef CX_ACT_DTYPE_H
#define CX_ACT_DTYPE_H

#include <stdbool.h>

#include "backend.h"

/* The activation dtype pass (core/act_dtype.c), for programs whose precision is BF16: after the
 * layout pass, each channels-last f32 activation becomes bf16 where its producer and every
 * consumer accept that (cx_kernel.act_dtypes). The convolutions round their operands to bf16
 * anyway; storing them so between ops halves the traffic of BatchNorm, the element-wise ops and
 * the convolutions' own reorders. Values with pinned[v] set (persistent ones, graph outputs) and
 * graph inputs stay f32, so callers only ever see f32 tensors; so do activations whose layout is
 * moot (one pixel or one channel: pooled features, the loss). Only t[] changes (dtype and byte
 * strides); the memory plan is made after it. Returns how many values became bf16. */
int cx_act_dtype_assign(const cx_graph *g, const cx_kernel *const *kernel, const bool *pinned,
                        cx_tensor *t);

/* false when the environment says CX_ACT_DTYPE=f32 (every activation f32, as before: to compare
 * against, and to measure) */
bool cx_act_dtype_enabled(void);

#endif
