/* Training-step ops, run by train/ through core/op_call.h on the backend that holds the
 * parameters (docs/training.md gives the formulas):
 *
 *   SGDUpdate(R, X, G[, M])         torch.optim.SGD: X (and the momentum buffer M) in place
 *   AdamWUpdate(R, T, X, G, M, V)   torch.optim.AdamW: X and the moments M, V in place
 *   LAMBUpdate(R, T, X, G, M, V)    LAMB (timm): the same, with the trust ratio of X
 *   EMAUpdate(D, A, X)              A = D * A + (1 - D) * X, the weight average, in place
 *   SquaredNorm(X) -> Y             sum of x^2 in double (global-norm clipping, diagnostics)
 *   AllFinite(X) -> F               true when no element is inf or NaN
 *
 * R (learning rate, f32), T (the step being taken, from 1, int64) and D (decay, f32) are
 * scalar tensors written before each run, not attributes, so that a kernel is prepared once
 * and a device need not re-prepare as the schedule moves. Scaling (clipping, 1/accum_steps,
 * unscaling) and accumulation are Mul and Add with the output aliasing the first input. None
 * has a gradient. */

#include <stddef.h>

#include "families.h"

static const cx_attr_schema sgd_attrs[] = {
    {"momentum", CX_ATTR_FLOAT, false},
    {"nesterov", CX_ATTR_INT, false},
    {"weight_decay", CX_ATTR_FLOAT, false},
    {NULL, 0, false},
};

static const cx_attr_schema adam_attrs[] = {
    {"beta1", CX_ATTR_FLOAT, false},
    {"beta2", CX_ATTR_FLOAT, false},
    {"epsilon", CX_ATTR_FLOAT, false},
    {"weight_decay", CX_ATTR_FLOAT, false},
    {"always_adapt", CX_ATTR_INT, false}, /* LAMB only */
    {NULL, 0, false},
};

static const cx_attr_schema no_attrs[] = {{NULL, 0, false}};

static cx_status need(const cx_infer_ctx *ctx, int i, cx_dtype t, bool scalar) {
  const cx_node *n = ctx->node;
  if (ctx->in_dtype[i] == t && (!scalar || cx_shape_numel(&ctx->in_shape[i]) == 1)) return CX_OK;
  char b[CX_SHAPE_STR];
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): input %d is %s %s; expected %s%s", n->name,
                 n->op->name, i, cx_dtype_name(ctx->in_dtype[i]),
                 cx_shape_str(&ctx->in_shape[i], b), scalar ? "a scalar " : "", cx_dtype_name(t));
}

/* Inputs from..to-1 are f32 tensors of x's shape (omitted optional ones are skipped). */
static cx_status need_like(const cx_infer_ctx *ctx, int x, int from, int to) {
  const cx_node *n = ctx->node;
  CX_TRY(need(ctx, x, CX_F32, false));
  for (int i = from; i < to && i < n->n_in; i++) {
    if (n->in[i] < 0) continue;
    CX_TRY(need(ctx, i, CX_F32, false));
    if (!cx_shape_equal(&ctx->in_shape[i], &ctx->in_shape[x])) {
      char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): input %d is %s; expected %s like input %d",
                     n->name, n->op->name, i, cx_shape_str(&ctx->in_shape[i], a),
                     cx_shape_str(&ctx->in_shape[x], b), x);
    }
  }
  return CX_OK;
}

static cx_status infer_sgd(const cx_infer_ctx *ctx) {
  const cx_node *n = ctx->node;
  CX_TRY(need(ctx, 0, CX_F32, true));
  CX_TRY(need_like(ctx, 1, 2, 4));
  bool momentum = cx_node_float(n, "momentum", 0) != 0, buffer = n->n_in > 3 && n->in[3] >= 0;
  if (momentum != buffer)
    return cx_fail(CX_ERR_ARG, "node '%s' (%s): momentum %g %s a buffer input", n->name,
                   n->op->name, cx_node_float(n, "momentum", 0), buffer ? "without" : "needs");
  if (cx_node_int(n, "nesterov", 0) && !momentum)
    return cx_fail(CX_ERR_ARG, "node '%s' (%s): nesterov needs momentum > 0", n->name,
                   n->op->name);
  return CX_OK;
}

static cx_status infer_adam(const cx_infer_ctx *ctx) {
  CX_TRY(need(ctx, 0, CX_F32, true));
  CX_TRY(need(ctx, 1, CX_S64, true));
  return need_like(ctx, 2, 3, 6);
}

static cx_status infer_ema(const cx_infer_ctx *ctx) {
  CX_TRY(need(ctx, 0, CX_F32, true));
  return need_like(ctx, 1, 2, 3);
}

static cx_status infer_scan(const cx_infer_ctx *ctx, cx_dtype out) {
  CX_TRY(need(ctx, 0, CX_F32, false));
  ctx->out_shape[0] = (cx_shape){.ndim = 0};
  ctx->out_dtype[0] = out;
  return CX_OK;
}

static cx_status infer_sq_norm(const cx_infer_ctx *ctx) { return infer_scan(ctx, CX_F64); }
static cx_status infer_finite(const cx_infer_ctx *ctx) { return infer_scan(ctx, CX_BOOL); }

static const cx_op_def sgd = {"SGDUpdate", CX_DOMAIN_COMPRESS, 3, 4, 0, 0, sgd_attrs,
                              infer_sgd, NULL, NULL, CX_OP_NO_GRAD};
static const cx_op_def adamw = {"AdamWUpdate", CX_DOMAIN_COMPRESS, 6, 6, 0, 0, adam_attrs,
                                infer_adam, NULL, NULL, CX_OP_NO_GRAD};
static const cx_op_def lamb = {"LAMBUpdate", CX_DOMAIN_COMPRESS, 6, 6, 0, 0, adam_attrs,
                               infer_adam, NULL, NULL, CX_OP_NO_GRAD};
static const cx_op_def ema = {"EMAUpdate", CX_DOMAIN_COMPRESS, 3, 3, 0, 0, no_attrs, infer_ema,
                              NULL, NULL, CX_OP_NO_GRAD};
static const cx_op_def sq_norm = {"SquaredNorm", CX_DOMAIN_COMPRESS, 1, 1, 1, 1, no_attrs,
                                  infer_sq_norm, NULL, NULL, CX_OP_NO_GRAD};
static const cx_op_def finite = {"AllFinite", CX_DOMAIN_COMPRESS, 1, 1, 1, 1, no_attrs,
                                 infer_finite, NULL, NULL, CX_OP_NO_GRAD};

const cx_op_def *const cx_ops_optim[] = {&sgd, &adamw, &lamb, &ema, &sq_norm, &finite, NULL};
