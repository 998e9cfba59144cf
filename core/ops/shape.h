#ifndef CX_OPS_SHAPE_H
#define CX_OPS_SHAPE_H

#include "../op.h"

/* What Slice and Pad (and their gradients) resolve from their constant inputs or attributes, shared
 * by shape inference and the CPU kernels so that both agree on clamping and defaults. `in_data[i]`
 * and `in_shape[i]` describe the node's input i (data NULL when omitted). */

typedef struct cx_slice_plan {
  int64_t start[CX_MAX_DIMS], step[CX_MAX_DIMS], len[CX_MAX_DIMS]; /* per axis of the input */
} cx_slice_plan;

/* Slice (opset 10+: starts, ends, axes, steps as s64 inputs 1..4; opset 1-9: attributes) on an
 * input of shape x, clamped as the ONNX spec says. */
cx_status cx_slice_plan_make(const cx_node *n, const cx_shape *x, const void *const *in_data,
                             const cx_shape *in_shape, cx_slice_plan *p);

typedef enum cx_pad_mode { CX_PAD_CONSTANT, CX_PAD_REFLECT, CX_PAD_EDGE } cx_pad_mode;

typedef struct cx_pad_plan {
  cx_pad_mode mode;
  int64_t before[CX_MAX_DIMS], after[CX_MAX_DIMS];
} cx_pad_plan;

/* Pad (opset 11+: pads as s64 input 1, optional axes as input 3; opset 2-10: attribute pads) on an
 * input of shape x. Negative pads (cropping) are refused. */
cx_status cx_pad_plan_make(const cx_node *n, const cx_shape *x, const void *const *in_data,
                           const cx_shape *in_shape, cx_pad_plan *p);

/* Index into an axis of length len that output position y (before-padded) reads; -1 for the
 * constant fill. */
static inline int64_t cx_pad_source(cx_pad_mode mode, int64_t y, int64_t before, int64_t len) {
  int64_t x = y - before;
  if (x >= 0 && x < len) return x;
  if (mode == CX_PAD_CONSTANT) return -1;
  if (mode == CX_PAD_EDGE) return x < 0 ? 0 : len - 1;
  return x < 0 ? -x : 2 * (len - 1) - x; /* reflect; the plan keeps pads below len */
}

#endif
