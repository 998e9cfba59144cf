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

/* GatherND: indices [B..., I..., k] pick index tuples into data's k axes after its batch_dims
 * leading (batch) axes B, which data and indices share; the output is indices' leading shape
 * with data's trailing [batch_dims + k:] slices. `tuples` counts the tuples (all batches),
 * `per_batch` those of one batch, `batch_slices` the slices of one batch, `slice` the elements
 * of one slice. */
typedef struct cx_gather_nd_split {
  int k, batch_dims;
  int64_t tuples, per_batch, batch_slices, slice;
} cx_gather_nd_split;

cx_status cx_gather_nd_split_make(const cx_node *n, const cx_shape *data, const cx_shape *indices,
                                  cx_gather_nd_split *s);
/* The flat slice number in data of tuple t (its k indices at idx), negative indices wrapped;
 * fails naming the node when one is out of range. */
cx_status cx_gather_nd_offset(const cx_node *n, const cx_shape *data,
                              const cx_gather_nd_split *s, int64_t t, const int64_t *idx,
                              int64_t *slice_at);

#endif
