#ifndef CX_OPS_SHAPE_H
#define CX_OPS_SHAPE_H

#include "../op.h"

/* What Slice and Pad (and their gradients) resolve from their constant inputs or attributes, shared
 * by shape inference and the CPU and CUDA kernels so that all agree on clamping and defaults.
 * `in_data[i]` and `in_shape[i]` describe the node's input i (data NULL when omitted). */

typedef struct cx_slice_plan {
  int64_t start[CX_MAX_DIMS], step[CX_MAX_DIMS], len[CX_MAX_DIMS]; /* per axis of the input */
} cx_slice_plan;

/* Slice (opset 10+: starts, ends, axes, steps as s64 inputs 1..4; opset 1-9: attributes) on an
 * input of shape x, clamped as the ONNX spec says. */
cx_status cx_slice_plan_make(const cx_node *n, const cx_shape *x, const void *const *in_data,
                             const cx_shape *in_shape, cx_slice_plan *p);

/* The strided views the data-movement kernels gather through, in element units of a contiguous
 * X, computed here once so that every backend reads the same elements. */

/* Element strides of a contiguous tensor of shape s. */
void cx_contiguous_strides(const cx_shape *s, int64_t *st);

/* Slice: the strides and base offset in X of the sliced view (x: X's shape, or dX's for
 * SliceGrad). */
void cx_slice_view(const cx_shape *x, const cx_slice_plan *p, int64_t *st, int64_t *base);

/* Transpose: the stride in X of each output axis (perm attribute, default reversed; infer has
 * checked it). */
void cx_transpose_view(const cx_node *n, const cx_shape *x, int64_t *st);

/* Expand: X broadcast numpy style to y (rank >= X's), the stride in X of each axis of y; 0 where
 * X has no such axis or a 1 there. */
void cx_expand_view(const cx_shape *x, const cx_shape *y, int64_t *st);

/* One part of a Concat / Split / SplitGrad (extent n along axis at offset `at` of the whole, of
 * shape `whole`) as a 2-D copy: `rows` rows of `chunk` bytes, `pitch` bytes apart in the whole,
 * the first at byte `offset`; in the piece the rows are packed. es: the element size. */
typedef struct cx_part_rows {
  int64_t rows;
  size_t chunk, pitch, offset;
} cx_part_rows;

cx_part_rows cx_part_rows_of(const cx_shape *whole, int axis, int64_t at, int64_t n, size_t es);

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
