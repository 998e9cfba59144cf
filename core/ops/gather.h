#ifndef CX_OPS_GATHER_H
#define CX_OPS_GATHER_H

#include "../op.h"

/* Gather (ONNX) along `axis` with s64 indices, and its gradient GatherGrad: data seen as
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

/* GatherND (batch_dims 0): indices [..., k] pick index tuples into data's first k axes; the
 * output is indices' leading shape with data's trailing [k:] slices. `tuples` counts the tuples,
 * `slice` the elements of one slice. */
typedef struct cx_gather_nd_split {
  int k;
  int64_t tuples, slice;
} cx_gather_nd_split;

cx_status cx_gather_nd_split_make(const cx_node *n, const cx_shape *data, const cx_shape *indices,
                                  cx_gather_nd_split *s);
/* The flat slice number of tuple t (k indices at idx), negative indices wrapped; fails naming
 * the node when one is out of range. */
cx_status cx_gather_nd_offset(const cx_node *n, const cx_shape *data, const int64_t *idx, int k,
                              int64_t *slice_at);

#endif
