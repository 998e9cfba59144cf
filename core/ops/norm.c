#include <math.h>
#include <stddef.h>

#include "families.h"
#include "norm.h"

/* Batch normalization over axis 1 of an [N, C, D1, ...] tensor (rank >= 2).
 * Inference (BatchNormalization) uses the running statistics; a training program replaces it with
 * BatchNormTrain, which normalises with the batch statistics, saves the batch mean and inverse
 * standard deviation for the gradient, and updates the running statistics (STATE values) in place:
 *   running = running * momentum + batch * (1 - momentum)   (ONNX meaning of momentum)
 * with the unbiased batch variance for the running variance, as PyTorch does. */

static const cx_attr_schema bn_attrs[] = {
    {"epsilon", CX_ATTR_FLOAT, false},
    {"momentum", CX_ATTR_FLOAT, false},
    {"training_mode", CX_ATTR_INT, false},
    {NULL, 0, false},
};

/* BatchNormTrain and BatchNormGrad: the fused activation's bounds (norm.h) as well */
static const cx_attr_schema bn_train_attrs[] = {
    {"epsilon", CX_ATTR_FLOAT, false},
    {"momentum", CX_ATTR_FLOAT, false},
    {"training_mode", CX_ATTR_INT, false},
    {CX_BN_ACT_MIN, CX_ATTR_FLOAT, false},
    {CX_BN_ACT_MAX, CX_ATTR_FLOAT, false},
    {NULL, 0, false},
};

bool cx_bn_activation(const cx_node *n, float *lo, float *hi) {
  const cx_attr *a = cx_node_attr(n, CX_BN_ACT_MIN), *b = cx_node_attr(n, CX_BN_ACT_MAX);
  *lo = a ? a->f : -INFINITY;
  *hi = b ? b->f : INFINITY;
  return a || b;
}

static cx_status bn_check_inputs(const cx_infer_ctx *ctx) {
  const cx_node *n = ctx->node;
  const cx_shape *x = &ctx->in_shape[0];
  char b0[CX_SHAPE_STR], b1[CX_SHAPE_STR];
  if (x->ndim < 2)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): X has shape %s; expected rank >= 2 [N, C, ...]",
                   n->name, n->op->name, cx_shape_str(x, b0));
  static const char *const names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int i = 1; i < 5; i++) {
    const cx_shape *s = &ctx->in_shape[i];
    if (s->ndim != 1 || s->d[0] != x->d[1])
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): %s has shape %s; expected [%lld] (the channels "
                     "of X %s)", n->name, n->op->name, names[i], cx_shape_str(s, b0),
                     (long long)x->d[1], cx_shape_str(x, b1));
  }
  for (int i = 0; i < 5; i++)
    if (ctx->in_dtype[i] != CX_F32)
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): %s is %s; expected f32", n->name, n->op->name,
                     names[i], cx_dtype_name(ctx->in_dtype[i]));
  return CX_OK;
}

static cx_status bn_infer(const cx_infer_ctx *ctx) {
  if (cx_node_int(ctx->node, "training_mode", 0) != 0)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (BatchNormalization): training_mode=1 is not "
                   "supported; a training program switches to batch statistics by itself",
                   ctx->node->name);
  CX_TRY(bn_check_inputs(ctx));
  ctx->out_shape[0] = ctx->in_shape[0];
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

static cx_status bn_train_infer(const cx_infer_ctx *ctx) {
  CX_TRY(bn_check_inputs(ctx));
  cx_shape c = cx_shape_make(1, &ctx->in_shape[0].d[1]);
  ctx->out_shape[0] = ctx->in_shape[0];
  for (int k = 1; k < ctx->node->n_out; k++) ctx->out_shape[k] = c;
  for (int k = 0; k < ctx->node->n_out; k++) ctx->out_dtype[k] = CX_F32;
  return CX_OK;
}

/* BatchNormGrad (dY, X, scale, saved_mean, saved_invstd[, B]) -> (dX, dScale, dBias); B only
 * with a fused activation, which recomputes the normalised value from it. */
static cx_status bn_grad_infer(const cx_infer_ctx *ctx) {
  const cx_node *n = ctx->node;
  float lo, hi;
  if (cx_bn_activation(n, &lo, &hi) != (n->n_in == 6 && n->in[5] >= 0))
    return cx_fail(CX_ERR_ARG, "node '%s' (BatchNormGrad): B (input 5) is given exactly when an "
                   "activation is fused", n->name);
  char b0[CX_SHAPE_STR], b1[CX_SHAPE_STR];
  const cx_shape *x = &ctx->in_shape[1];
  if (!cx_shape_equal(&ctx->in_shape[0], x) || x->ndim < 2)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (BatchNormGrad): dY %s and X %s must have one shape "
                   "of rank >= 2", n->name, cx_shape_str(&ctx->in_shape[0], b0),
                   cx_shape_str(x, b1));
  for (int i = 2; i < n->n_in; i++)
    if (ctx->in_shape[i].ndim != 1 || ctx->in_shape[i].d[0] != x->d[1])
      return cx_fail(CX_ERR_SHAPE, "node '%s' (BatchNormGrad): input %d has shape %s; expected "
                     "[%lld]", n->name, i, cx_shape_str(&ctx->in_shape[i], b0), (long long)x->d[1]);
  ctx->out_shape[0] = *x;
  for (int k = 1; k < n->n_out; k++) ctx->out_shape[k] = ctx->in_shape[2];
  for (int k = 0; k < n->n_out; k++) ctx->out_dtype[k] = CX_F32;
  return CX_OK;
}

static cx_status bn_train_grad(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  for (int i = 0; i < n->n_in; i++) ctx->dx[i] = -1;
  if (ctx->dy[0] < 0) return CX_OK;
  /* saved_mean and saved_invstd are outputs 1 and 2 of BatchNormTrain */
  int in[6] = {ctx->dy[0], n->in[0], n->in[1], n->out[1], n->out[2], n->in[2]};
  float lo, hi;
  int g = cx_grad_node(ctx, "BatchNormGrad", in, cx_bn_activation(n, &lo, &hi) ? 6 : 5, 3);
  if (g < 0) return cx_graph_status(ctx->g);
  cx_grad_copy_attrs(ctx, g);
  for (int i = 0; i < 3; i++)
    if (ctx->need[i]) ctx->dx[i] = cx_node_output(ctx->g, g, i);
  return CX_OK;
}

static const cx_op_def batch_norm = {
    .name = "BatchNormalization",
    .domain = CX_DOMAIN_ONNX,
    .min_in = 5, .max_in = 5, .min_out = 1, .max_out = 1,
    .attrs = bn_attrs,
    .infer = bn_infer,
    .train_op = "BatchNormTrain",
};

static const cx_op_def batch_norm_train = {
    .name = "BatchNormTrain",
    .domain = CX_DOMAIN_COMPRESS,
    .min_in = 5, .max_in = 5, .min_out = 3, .max_out = 3,
    .attrs = bn_train_attrs,
    .infer = bn_train_infer,
    .grad = bn_train_grad,
};

static const cx_op_def batch_norm_grad = {
    .name = "BatchNormGrad",
    .domain = CX_DOMAIN_COMPRESS,
    .min_in = 5, .max_in = 6, .min_out = 3, .max_out = 3,
    .attrs = bn_train_attrs,
    .infer = bn_grad_infer,
};

const cx_op_def *const cx_ops_norm[] = {&batch_norm, &batch_norm_train, &batch_norm_grad, NULL};
