/* LayerNormalization (ONNX opset 17): Y = (X - mean) * invstd * Scale + B over X's trailing axes
 * from `axis`, with the optional outputs Mean and InvStdDev ([leading dims, 1, ...]). A training
 * program replaces it by LayerNormTrain, which always writes Mean and InvStdDev, so that its
 * gradient op LayerNormGrad(dY, X, Scale, Mean, InvStdDev) -> (dX, dScale, dB) reads them
 * instead of recomputing. */

#include <stddef.h>

#include "families.h"
#include "norm.h"

cx_status cx_layer_norm_split(const cx_node *n, const cx_shape *x, int64_t *rows, int64_t *cols) {
  int axis;
  CX_TRY(cx_axis_normalize(n, cx_node_int(n, "axis", -1), x->ndim, &axis));
  *rows = *cols = 1;
  for (int d = 0; d < x->ndim; d++) *(d < axis ? rows : cols) *= x->d[d];
  return CX_OK;
}

/* Scale (and B) must hold the normalised dimensions: X's trailing ones, leading 1s allowed. */
static cx_status check_affine(const cx_infer_ctx *c, int i, int axis) {
  const cx_node *n = c->node;
  const cx_shape *x = &c->in_shape[0], *s = &c->in_shape[i];
  bool ok = c->in_dtype[i] == CX_F32 && s->ndim <= x->ndim;
  for (int d = 1; ok && d <= s->ndim; d++) {
    int xd = x->ndim - d;
    ok = s->d[s->ndim - d] == (xd >= axis ? x->d[xd] : 1);
  }
  if (ok) return CX_OK;
  char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): %s has shape %s; expected f32 of X's dimensions "
                 "from axis %d (X is %s)", n->name, n->op->name, i == 1 ? "Scale" : "B",
                 cx_shape_str(s, a), axis, cx_shape_str(x, b));
}

static cx_status ln_check(const cx_infer_ctx *c, cx_shape *stats) {
  const cx_node *n = c->node;
  if (c->in_dtype[0] != CX_F32)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): X is %s; expected f32", n->name, n->op->name,
                   cx_dtype_name(c->in_dtype[0]));
  int axis;
  CX_TRY(cx_axis_normalize(n, cx_node_int(n, "axis", -1), c->in_shape[0].ndim, &axis));
  CX_TRY(check_affine(c, 1, axis));
  if (n->n_in > 2 && n->in[2] >= 0) {
    CX_TRY(check_affine(c, 2, axis));
    if (!cx_shape_equal(&c->in_shape[1], &c->in_shape[2]))
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): Scale and B differ in shape", n->name,
                     n->op->name);
  }
  *stats = c->in_shape[0];
  for (int d = axis; d < stats->ndim; d++) stats->d[d] = 1;
  return CX_OK;
}

static cx_status ln_infer(const cx_infer_ctx *c) {
  cx_shape stats;
  CX_TRY(ln_check(c, &stats));
  c->out_shape[0] = c->in_shape[0];
  for (int k = 1; k < c->node->n_out; k++) c->out_shape[k] = stats;
  for (int k = 0; k < c->node->n_out; k++) c->out_dtype[k] = CX_F32;
  return CX_OK;
}

/* LayerNormGrad(dY, X, Scale, Mean, InvStdDev) -> (dX, dScale, dB) */
static cx_status ln_grad_infer(const cx_infer_ctx *c) {
  const cx_node *n = c->node;
  int64_t rows, cols;
  CX_TRY(cx_layer_norm_split(n, &c->in_shape[1], &rows, &cols));
  char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
  if (!cx_shape_equal(&c->in_shape[0], &c->in_shape[1]))
    return cx_fail(CX_ERR_SHAPE, "node '%s' (LayerNormGrad): dY %s and X %s differ", n->name,
                   cx_shape_str(&c->in_shape[0], a), cx_shape_str(&c->in_shape[1], b));
  if (cx_shape_numel(&c->in_shape[2]) != cols || cx_shape_numel(&c->in_shape[3]) != rows ||
      cx_shape_numel(&c->in_shape[4]) != rows)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (LayerNormGrad): Scale needs %lld numbers, Mean and "
                   "InvStdDev %lld each", n->name, (long long)cols, (long long)rows);
  c->out_shape[0] = c->in_shape[1];
  for (int k = 1; k < n->n_out; k++) c->out_shape[k] = c->in_shape[2];
  for (int k = 0; k < n->n_out; k++) c->out_dtype[k] = CX_F32;
  return CX_OK;
}

static cx_status ln_train_grad(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  for (int i = 0; i < n->n_in; i++) ctx->dx[i] = -1;
  if ((n->n_out > 1 && ctx->dy[1] >= 0) || (n->n_out > 2 && ctx->dy[2] >= 0))
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (LayerNormalization): gradients through its "
                   "Mean and InvStdDev outputs are refused (no gradient rule: exporters' graphs "
                   "read only Y)", n->name);
  if (ctx->dy[0] < 0) return CX_OK;
  int in[5] = {ctx->dy[0], n->in[0], n->in[1], n->out[1], n->out[2]};
  int g = cx_grad_node(ctx, "LayerNormGrad", in, 5, 3);
  if (g < 0) return cx_graph_status(ctx->g);
  cx_grad_copy_attrs(ctx, g);
  for (int i = 0; i < 3 && i < n->n_in; i++)
    if (ctx->need[i] && n->in[i] >= 0) ctx->dx[i] = cx_node_output(ctx->g, g, i);
  return cx_graph_status(ctx->g);
}

static const cx_attr_schema ln_attrs[] = {
    {"axis", CX_ATTR_INT, false},
    {"epsilon", CX_ATTR_FLOAT, false},
    {"stash_type", CX_ATTR_INT, false}, /* statistics are computed in f32 or wider anyway */
    {NULL, 0, false},
};

static const cx_op_def layer_norm = {
    .name = "LayerNormalization", .domain = CX_DOMAIN_ONNX,
    .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 3,
    .attrs = ln_attrs, .infer = ln_infer, .train_op = "LayerNormTrain",
};

static const cx_op_def layer_norm_train = {
    .name = "LayerNormTrain", .domain = CX_DOMAIN_COMPRESS,
    .min_in = 2, .max_in = 3, .min_out = 3, .max_out = 3,
    .attrs = ln_attrs, .infer = ln_infer, .grad = ln_train_grad,
};

static const cx_op_def layer_norm_grad = {
    .name = "LayerNormGrad", .domain = CX_DOMAIN_COMPRESS,
    .min_in = 5, .max_in = 5, .min_out = 3, .max_out = 3,
    .attrs = ln_attrs, .infer = ln_grad_infer,
};

const cx_op_def *const cx_ops_layer_norm[] = {&layer_norm, &layer_norm_train, &layer_norm_grad,
                                              NULL};
