#ifndef CX_OPS_ELTWISE_H
#define CX_OPS_ELTWISE_H

/* Shape helpers shared by the broadcast and reduction ops (ReduceSumTo, BroadcastTo, ReduceSum,
 * ReduceMean), their kernels and references. */

#include "../tensor.h"

/* `base` with a 1 inserted at each of `axes` (positions in the result, negative ones counted from
 * its end): the keepdims form of a reduction's output. Fails on a repeated or out-of-range axis. */
cx_status cx_shape_insert_axes(const cx_shape *base, const int64_t *axes, int n_axes,
                               cx_shape *out);

/* Whether `from` broadcasts to exactly `to` under numpy rules (from's rank may be smaller). */
bool cx_shape_broadcasts_to(const cx_shape *from, const cx_shape *to);

/* The keepdims form of the ReduceSumTo / BroadcastTo pair: attribute `shape` with 1s inserted at
 * attribute `axes`, which must broadcast to `full`. Fails naming the node. */
struct cx_node;
cx_status cx_reduce_to_keep_shape(const struct cx_node *n, const cx_shape *small,
                                  const cx_shape *full, cx_shape *keep);

/* ReduceSum / ReduceMean: from the node's axes (attribute or input values, given here as
 * axes/n_axes), keepdims and noop_with_empty_axes, the keepdims form of the result (reduced axes
 * set to 1), the output shape, and which axes are reduced (none when the node is an identity).
 * Fails naming the node on a bad axis. */
cx_status cx_reduce_shapes(const struct cx_node *n, const cx_shape *x, const int64_t *axes,
                           int n_axes, cx_shape *keep, cx_shape *out, bool reduced[CX_MAX_DIMS]);

/* The kernels' form of the above: only the keepdims shape, from n_axes axes that the caller read
 * (input 1's values, wherever its backend keeps them, or the axes attribute). The count is
 * checked here before any axis is read, since the values came from outside. */
cx_status cx_reduce_keep_shape(const struct cx_node *n, const cx_shape *x, const int64_t *axes,
                               int64_t n_axes, cx_shape *keep);

#endif
