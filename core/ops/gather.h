#ifndef CX_OPS_GATHER_H
#define CX_OPS_GATHER_H

#include "../op.h"

/* Gather (ONNX) along `axis` with constant s64 indices, and its gradient GatherGrad: data seen as
 * [outer, dim, inner] around the axis, the output as [outer, count, inner] with count the number
 * of indices. Shared by shape inference, the kernels and the references. */
typedef struct cx_gather_split {
  int axis;
  int64_t outer, dim, inner, count;
} cx_gather_split;

cx_status cx_gather_split_make(const cx_node *n, const cx_shape *data, const cx_shape *indices,
                               cx_gather_split *s);
/* The index k made non-negative; fails naming the node when it is outside [-dim, dim). */
cx_status cx_gather_index(const cx_node *n, const cx_gather_split *s, int64_t k, int64_t *out);

#endif
