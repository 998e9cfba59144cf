#ifndef CX_LAYOUT_H
#define CX_LAYOUT_H

#include <stdbool.h>

#include "backend.h"

/* The layout pass (core/layout.c): after kernels are found, each 4-D activation becomes
 * channels-last (cx_tensor_is_channels_last) where its producer and every consumer accept that
 * (cx_kernel.layouts), so convolutions and the ops between them exchange NHWC tensors without
 * reorders. Values with pinned[v] set (persistent ones, graph outputs) and graph inputs stay plain,
 * as do tensors whose layout is moot (one pixel or one channel). Only the strides in t[] change:
 * the byte size, hence the memory plan, is the same. Returns how many values became channels-last. */
int cx_layout_assign(const cx_graph *g, const cx_kernel *const *kernel, const bool *pinned,
                     cx_tensor *t);

/* false when the environment says CX_LAYOUT=plain (to compare against, and to measure) */
bool cx_layout_enabled(void);

#endif
