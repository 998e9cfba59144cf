/* Helpers shared by the ops' shape-inference functions. */
#include "op.h"

cx_status cx_infer_same_as_input(const cx_infer_ctx *ctx) {
  for (int k = 0; k < ctx->node->n_out; k++) {
    ctx->out_shape[k] = ctx->in_shape[0];
    ctx->out_dtype[k] = ctx->in_dtype[0];
  }
  return CX_OK;
}

cx_status cx_infer_broadcast(const cx_infer_ctx *ctx) {
  cx_shape s = ctx->in_shape[0];
  for (int k = 1; k < ctx->node->n_in; k++) {
    if (ctx->node->in[k] < 0) continue;
    cx_status st = cx_shape_broadcast(&s, &ctx->in_shape[k], &s);
    if (st != CX_OK) {
      cx_error_prefix("node '%s' (%s), input %d", ctx->node->name, ctx->node->op->name, k);
      return st;
    }
  }
  ctx->out_shape[0] = s;
  ctx->out_dtype[0] = ctx->in_dtype[0];
  return CX_OK;
}

cx_status cx_axis_normalize(const cx_node *n, int64_t axis, int rank, int *out) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): axis %lld is out of range for rank %d", n->name,
                   n->op->name, (long long)axis, rank);
  *out = (int)a;
  return CX_OK;
}
