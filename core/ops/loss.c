/* Losses: ONNX SoftmaxCrossEntropyLoss (with PyTorch-style label_smoothing) and the
 * knowledge-distillation loss KLDivTemperature, each with a fused gradient op. */

#include <stddef.h>
#include <string.h>

#include "families.h"

static cx_status need_f32(const cx_infer_ctx *ctx, int i) {
  if (ctx->in_dtype[i] == CX_F32) return CX_OK;
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): input %d is %s; expected f32", ctx->node->name,
                 ctx->node->op->name, i, cx_dtype_name(ctx->in_dtype[i]));
}

static cx_status reduction_mode(const cx_node *n, int *mode) {
  static const char *const modes[] = {"none", "sum", "mean"};
  const char *r = cx_node_string(n, "reduction", "mean");
  for (int i = 0; i < 3; i++)
    if (strcmp(r, modes[i]) == 0) {
      *mode = i;
      return CX_OK;
    }
  return cx_fail(CX_ERR_ARG, "node '%s' (%s): reduction '%s' is not one of none, sum, mean",
                 n->name, n->op->name, r);
}

/* scores [N,C,d...], labels [N,d...] (int64 or int32), weights [C]: inputs `first`.. of ctx */
static cx_status check_sce_inputs(const cx_infer_ctx *ctx, int first) {
  const cx_node *n = ctx->node;
  const cx_shape *s = &ctx->in_shape[first], *l = &ctx->in_shape[first + 1];
  char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
  CX_TRY(need_f32(ctx, first));
  if (ctx->in_dtype[first + 1] != CX_S64 && ctx->in_dtype[first + 1] != CX_S32)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): labels are %s; expected int64 or int32",
                   n->name, n->op->name, cx_dtype_name(ctx->in_dtype[first + 1]));
  bool ok = s->ndim >= 2 && l->ndim == s->ndim - 1 && l->d[0] == s->d[0];
  for (int i = 1; ok && i < l->ndim; i++) ok = l->d[i] == s->d[i + 1];
  if (!ok)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): scores %s and labels %s; expected scores "
                   "[N,C,d...] and labels [N,d...]", n->name, n->op->name, cx_shape_str(s, a),
                   cx_shape_str(l, b));
  int w = first + 2;
  if (n->n_in > w && n->in[w] >= 0) {
    CX_TRY(need_f32(ctx, w));
    if (ctx->in_shape[w].ndim != 1 || ctx->in_shape[w].d[0] != s->d[1])
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): weights %s; expected [%lld] (one per class)",
                     n->name, n->op->name, cx_shape_str(&ctx->in_shape[w], a),
                     (long long)s->d[1]);
  }
  return CX_OK;
}

static cx_status infer_sce(const cx_infer_ctx *ctx) {
  int mode = 0;
  CX_TRY(reduction_mode(ctx->node, &mode));
  CX_TRY(check_sce_inputs(ctx, 0));
  ctx->out_shape[0] = mode == 0 ? ctx->in_shape[1] : (cx_shape){.ndim = 0};
  ctx->out_dtype[0] = CX_F32;
  if (ctx->node->n_out > 1) {
    ctx->out_shape[1] = ctx->in_shape[0];
    ctx->out_dtype[1] = CX_F32;
  }
  return CX_OK;
}

/* (dLoss, scores, labels[, weights]) -> dScores */
static cx_status infer_sce_grad(const cx_infer_ctx *ctx) {
  int mode = 0;
  CX_TRY(reduction_mode(ctx->node, &mode));
  CX_TRY(need_f32(ctx, 0));
  CX_TRY(check_sce_inputs(ctx, 1));
  cx_shape want = mode == 0 ? ctx->in_shape[2] : (cx_shape){.ndim = 0};
  if (!cx_shape_equal(&ctx->in_shape[0], &want)) {
    char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): dLoss has shape %s; expected %s",
                   ctx->node->name, ctx->node->op->name, cx_shape_str(&ctx->in_shape[0], a),
                   cx_shape_str(&want, b));
  }
  ctx->out_shape[0] = ctx->in_shape[1];
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

/* student and teacher logits of one shape [N,C,d...]: inputs first, first+1 */
static cx_status check_kd_inputs(const cx_infer_ctx *ctx, int first) {
  CX_TRY(need_f32(ctx, first));
  CX_TRY(need_f32(ctx, first + 1));
  const cx_shape *s = &ctx->in_shape[first], *t = &ctx->in_shape[first + 1];
  if (s->ndim < 2 || !cx_shape_equal(s, t)) {
    char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): student %s and teacher %s; expected two equal "
                   "shapes [N,C,...]", ctx->node->name, ctx->node->op->name, cx_shape_str(s, a),
                   cx_shape_str(t, b));
  }
  if (!(cx_node_float(ctx->node, "temperature", 1.0f) > 0))
    return cx_fail(CX_ERR_ARG, "node '%s' (%s): temperature %g must be positive", ctx->node->name,
                   ctx->node->op->name, (double)cx_node_float(ctx->node, "temperature", 1.0f));
  return CX_OK;
}

static cx_status infer_kd(const cx_infer_ctx *ctx) {
  CX_TRY(check_kd_inputs(ctx, 0));
  ctx->out_shape[0] = (cx_shape){.ndim = 0};
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

static cx_status infer_kd_grad(const cx_infer_ctx *ctx) {
  CX_TRY(need_f32(ctx, 0));
  CX_TRY(check_kd_inputs(ctx, 1));
  if (cx_shape_numel(&ctx->in_shape[0]) != 1)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): dLoss must be a scalar", ctx->node->name,
                   ctx->node->op->name);
  ctx->out_shape[0] = ctx->in_shape[1];
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

/* ---- gradient rules ---- */

/* dScores from the loss (fused op) plus, when the log_prob output is used too, its LogSoftmax
 * gradient. */
static cx_status grad_sce(const cx_grad_ctx *c) {
  const cx_node *n = &c->g->nodes[c->node];
  if (n->n_in > 2 && n->in[2] >= 0 && c->need[2])
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (SoftmaxCrossEntropyLoss): no gradient for "
                   "the class weights; make them a constant", n->name);
  if (!c->need[0]) return CX_OK;
  int parts[2], np = 0;
  int in[4] = {c->dy[0], n->in[0], n->in[1], n->n_in > 2 ? n->in[2] : -1};
  int n_in = n->n_in > 2 ? 4 : 3;
  int dy1 = n->n_out > 1 ? c->dy[1] : -1, log_prob = n->n_out > 1 ? n->out[1] : -1;
  if (c->dy[0] >= 0) {
    int node = cx_grad_node(c, "SoftmaxCrossEntropyLossGrad", in, n_in, 1);
    if (node < 0) return cx_graph_status(c->g);
    cx_grad_copy_attrs(c, node);
    parts[np++] = cx_node_output(c->g, node, 0);
  }
  if (dy1 >= 0) {
    int lin[2] = {dy1, log_prob};
    int node = cx_grad_node(c, "LogSoftmaxGrad", lin, 2, 1);
    if (node < 0) return cx_graph_status(c->g);
    cx_node_set_int(c->g, node, "axis", 1);
    parts[np++] = cx_node_output(c->g, node, 0);
  }
  if (np == 1) c->dx[0] = parts[0];
  if (np == 2) c->dx[0] = cx_grad_emit(c, "Sum", parts, 2);
  return cx_graph_status(c->g);
}

/* Only the student learns: the teacher's input gets no gradient. */
static cx_status grad_kd(const cx_grad_ctx *c) {
  if (!c->need[0] || c->dy[0] < 0) return CX_OK;
  const cx_node *n = &c->g->nodes[c->node];
  int in[3] = {c->dy[0], n->in[0], n->in[1]};
  int node = cx_grad_node(c, "KLDivTemperatureGrad", in, 3, 1);
  if (node < 0) return cx_graph_status(c->g);
  cx_grad_copy_attrs(c, node);
  c->dx[0] = cx_node_output(c->g, node, 0);
  return cx_graph_status(c->g);
}

/* ---- op records ---- */

static const cx_attr_schema sce_attrs[] = {
    {"reduction", CX_ATTR_STRING, false},
    {"ignore_index", CX_ATTR_INT, false},
    {"label_smoothing", CX_ATTR_FLOAT, false},
    {NULL, 0, false},
};
static const cx_attr_schema kd_attrs[] = {{"temperature", CX_ATTR_FLOAT, false}, {NULL, 0, false}};

static const cx_op_def op_sce = {"SoftmaxCrossEntropyLoss", CX_DOMAIN_ONNX, 2, 3, 1, 2, sce_attrs,
                                 infer_sce, grad_sce, NULL, 0};
static const cx_op_def op_sce_grad = {"SoftmaxCrossEntropyLossGrad", CX_DOMAIN_COMPRESS, 3, 4, 1,
                                      1, sce_attrs, infer_sce_grad, NULL, NULL, 0};
static const cx_op_def op_kd = {"KLDivTemperature", CX_DOMAIN_COMPRESS, 2, 2, 1, 1, kd_attrs,
                                infer_kd, grad_kd, NULL, 0};
static const cx_op_def op_kd_grad = {"KLDivTemperatureGrad", CX_DOMAIN_COMPRESS, 3, 3, 1, 1,
                                     kd_attrs, infer_kd_grad, NULL, NULL, 0};

const cx_op_def *const cx_ops_loss[] = {&op_sce, &op_sce_grad, &op_kd, &op_kd_grad, NULL};
