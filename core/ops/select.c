/* Pow and Where on activations, with numpy broadcasting: Pow(X, E) (decomposed LayerNorms of
 * opset-13 exports square with Pow(x, 2)) and its gradient op PowGrad(dY, X, E) = dY * E *
 * X^(E - 1) at the output's shape, summed down to X's; Where(C, X, Y) with a boolean condition
 * (attention masks), whose gradients are Where itself: dX = Where(C, dY, 0), dY = Where(C, 0, dY),
 * each summed down to its operand. Exponents and conditions get no gradient. */

#include <string.h>

#include "families.h"

static cx_status need_dtype(const cx_infer_ctx *c, int i, cx_dtype t) {
  if (c->in_dtype[i] == t) return CX_OK;
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): input %d is %s; expected %s", c->node->name,
                 c->node->op->name, i, cx_dtype_name(c->in_dtype[i]), cx_dtype_name(t));
}

static cx_status infer_pow(const cx_infer_ctx *c) {
  CX_TRY(need_dtype(c, 0, CX_F32));
  CX_TRY(need_dtype(c, 1, CX_F32));
  return cx_infer_broadcast(c);
}

/* PowGrad(dY, X, E): dY has the broadcast shape of X and E */
static cx_status infer_pow_grad(const cx_infer_ctx *c) {
  for (int i = 0; i < 3; i++) CX_TRY(need_dtype(c, i, CX_F32));
  return cx_infer_broadcast(c);
}

static cx_status infer_where(const cx_infer_ctx *c) {
  CX_TRY(need_dtype(c, 0, CX_BOOL));
  CX_TRY(need_dtype(c, 1, CX_F32));
  CX_TRY(need_dtype(c, 2, CX_F32));
  CX_TRY(cx_infer_broadcast(c));
  c->out_dtype[0] = CX_F32;
  return CX_OK;
}

static cx_status no_grad_for(const cx_grad_ctx *ctx, int i, const char *what) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  if (!ctx->need[i]) return CX_OK;
  return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): no gradient for its %s; make it a constant",
                 n->name, n->op->name, what);
}

static cx_status grad_pow(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  CX_TRY(no_grad_for(ctx, 1, "exponent"));
  if (!ctx->need[0] || ctx->dy[0] < 0) return CX_OK;
  cx_shape xs = ctx->shape[n->in[0]], ys = ctx->shape[n->out[0]];
  int d = cx_grad_emit(ctx, "PowGrad", (int[]){ctx->dy[0], n->in[0], n->in[1]}, 3);
  if (d < 0) return cx_graph_status(ctx->g);
  ctx->dx[0] = cx_grad_reduce_to(ctx, d, &ys, &xs);
  return cx_graph_status(ctx->g);
}

static cx_status grad_where(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  CX_TRY(no_grad_for(ctx, 0, "condition"));
  if (ctx->dy[0] < 0) return CX_OK;
  int cond = n->in[0], x = n->in[1], y = n->in[2], dy = ctx->dy[0];
  cx_shape xs = ctx->shape[x], ys = ctx->shape[y], os = ctx->shape[n->out[0]];
  for (int i = 1; i <= 2; i++) {
    if (!ctx->need[i]) continue;
    int zero = cx_grad_scalar(ctx, 0);
    int in[3] = {cond, i == 1 ? dy : zero, i == 1 ? zero : dy};
    int d = cx_grad_emit(ctx, "Where", in, 3);
    if (d < 0) return cx_graph_status(ctx->g);
    ctx->dx[i] = cx_grad_reduce_to(ctx, d, &os, i == 1 ? &xs : &ys);
  }
  return cx_graph_status(ctx->g);
}

static const cx_attr_schema no_attrs[] = {{NULL, 0, false}};

static const cx_op_def op_pow = {"Pow", CX_DOMAIN_ONNX, 2, 2, 1, 1, no_attrs, infer_pow, grad_pow,
                                 NULL, 0};
static const cx_op_def op_pow_grad = {"PowGrad", CX_DOMAIN_COMPRESS, 3, 3, 1, 1, no_attrs,
                                      infer_pow_grad, NULL, NULL, 0};
static const cx_op_def op_where = {"Where", CX_DOMAIN_ONNX, 3, 3, 1, 1, no_attrs, infer_where,
                                   grad_where, NULL, 0};

const cx_op_def *const cx_ops_select[] = {&op_pow, &op_pow_grad, &op_where, NULL};
