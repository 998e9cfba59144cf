/* Element-wise activations (Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish, Tanh, Exp, Log,
 * Sqrt, Erf, Gelu, Reciprocal) and their single gradient op ActivationGrad(dY, X, Y[, min, max]) with attribute `op`,
 * which reads whichever of X and Y the derivative needs (the other is omitted: it can be freed). */

#include "activation.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "families.h"

static const cx_act_info acts[CX_ACT_COUNT] = {
    [CX_ACT_RELU] = {"Relu", false, true}, /* y > 0 exactly where x > 0 */
    [CX_ACT_LEAKY_RELU] = {"LeakyRelu", true, false},
    [CX_ACT_CLIP] = {"Clip", true, false},
    [CX_ACT_SIGMOID] = {"Sigmoid", false, true},
    [CX_ACT_HARD_SIGMOID] = {"HardSigmoid", true, false},
    [CX_ACT_HARD_SWISH] = {"HardSwish", true, false},
    [CX_ACT_TANH] = {"Tanh", false, true},
    [CX_ACT_EXP] = {"Exp", false, true},
    [CX_ACT_LOG] = {"Log", true, false},
    [CX_ACT_SQRT] = {"Sqrt", false, true},
    [CX_ACT_ERF] = {"Erf", true, false},
    [CX_ACT_GELU] = {"Gelu", true, false},
    [CX_ACT_RECIPROCAL] = {"Reciprocal", false, true}, /* d(1/x) = -y^2 */
};

const cx_act_info *cx_act_get(cx_act a) { return &acts[a]; }

int cx_act_find(const char *name) {
  for (int a = 0; name && a < CX_ACT_COUNT; a++)
    if (strcmp(acts[a].name, name) == 0) return a;
  return -1;
}

int cx_act_of_node(const cx_node *n) {
  if (strcmp(n->op->name, "ActivationGrad") == 0) return cx_act_find(cx_node_string(n, "op", NULL));
  return cx_act_find(n->op->name);
}

void cx_act_params(const cx_node *n, cx_act a, float *alpha, float *beta) {
  *alpha = *beta = 0;
  if (a == CX_ACT_LEAKY_RELU) *alpha = cx_node_float(n, "alpha", 0.01f);
  if (a == CX_ACT_HARD_SIGMOID) {
    *alpha = cx_node_float(n, "alpha", 0.2f);
    *beta = cx_node_float(n, "beta", 0.5f);
  }
  if (a == CX_ACT_GELU) *alpha = strcmp(cx_node_string(n, "approximate", "none"), "tanh") ? 0 : 1;
}

void cx_act_clip_bounds(const cx_node *n, const float *min_in, const float *max_in, float *lo,
                        float *hi) {
  *lo = min_in ? *min_in : cx_node_float(n, "min", -INFINITY);
  *hi = max_in ? *max_in : cx_node_float(n, "max", INFINITY);
}

/* ---- shape inference ---- */

static cx_status need_f32(const cx_infer_ctx *ctx, int i) {
  if (ctx->in_dtype[i] == CX_F32) return CX_OK;
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): input %d is %s; expected f32", ctx->node->name,
                 ctx->node->op->name, i, cx_dtype_name(ctx->in_dtype[i]));
}

/* Clip's optional bounds (and ActivationGrad's copies of them) must be f32 scalars. */
static cx_status need_bound(const cx_infer_ctx *ctx, int i) {
  if (i >= ctx->node->n_in || ctx->node->in[i] < 0) return CX_OK;
  CX_TRY(need_f32(ctx, i));
  if (cx_shape_numel(&ctx->in_shape[i]) == 1) return CX_OK;
  char s[CX_SHAPE_STR];
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): input %d (a bound) has shape %s; expected a "
                 "scalar", ctx->node->name, ctx->node->op->name, i,
                 cx_shape_str(&ctx->in_shape[i], s));
}

/* Gelu (opset 20): approximate is "none" (the erf form) or "tanh". */
static cx_status need_approximation(const cx_node *n) {
  const char *m = cx_node_string(n, "approximate", "none");
  if (cx_act_of_node(n) != CX_ACT_GELU || !strcmp(m, "none") || !strcmp(m, "tanh")) return CX_OK;
  return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): approximate '%s' is not one of \"none\" "
                 "and \"tanh\"", n->name, n->op->name, m);
}

static cx_status infer_act(const cx_infer_ctx *ctx) {
  CX_TRY(need_approximation(ctx->node));
  CX_TRY(need_f32(ctx, 0));
  CX_TRY(need_bound(ctx, 1));
  CX_TRY(need_bound(ctx, 2));
  ctx->out_shape[0] = ctx->in_shape[0];
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

static cx_status infer_act_grad(const cx_infer_ctx *ctx) {
  const cx_node *n = ctx->node;
  int a = cx_act_of_node(n);
  if (a < 0)
    return cx_fail(CX_ERR_ARG, "node '%s' (ActivationGrad): attribute op '%s' is not an "
                   "activation", n->name, cx_node_string(n, "op", "(missing)"));
  CX_TRY(need_approximation(n));
  const cx_act_info *info = cx_act_get((cx_act)a);
  for (int i = 0; i < 3; i++) {
    bool wanted = i == 0 || (i == 1 && info->grad_x) || (i == 2 && info->grad_y);
    if (n->in[i] < 0) {
      if (wanted)
        return cx_fail(CX_ERR_ARG, "node '%s' (ActivationGrad of %s): input %d is needed",
                       n->name, info->name, i);
      continue;
    }
    CX_TRY(need_f32(ctx, i));
    if (!cx_shape_equal(&ctx->in_shape[i], &ctx->in_shape[0])) {
      char s0[CX_SHAPE_STR], si[CX_SHAPE_STR];
      return cx_fail(CX_ERR_SHAPE, "node '%s' (ActivationGrad): input %d has shape %s; dY has %s",
                     n->name, i, cx_shape_str(&ctx->in_shape[i], si),
                     cx_shape_str(&ctx->in_shape[0], s0));
    }
  }
  CX_TRY(need_bound(ctx, 3));
  CX_TRY(need_bound(ctx, 4));
  ctx->out_shape[0] = ctx->in_shape[0];
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

/* ---- gradient rule: one ActivationGrad node for every activation ---- */

static cx_status grad_act(const cx_grad_ctx *c) {
  const cx_node *n = &c->g->nodes[c->node];
  const char *name = n->op->name; /* static storage: survives the node array growing */
  if (n->n_in > 1 && (c->need[1] || (n->n_in > 2 && c->need[2])))
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (Clip): gradients for the min/max inputs are "
                   "not implemented; make them constants", n->name);
  if (!c->need[0] || c->dy[0] < 0) return CX_OK;
  const cx_act_info *info = cx_act_get((cx_act)cx_act_find(name));
  int in[5] = {c->dy[0], info->grad_x ? n->in[0] : -1, info->grad_y ? n->out[0] : -1, -1, -1};
  int n_in = 3;
  for (int i = 1; i < n->n_in; i++) in[n_in++] = n->in[i];
  int node = cx_grad_node(c, "ActivationGrad", in, n_in, 1);
  if (node < 0) return cx_graph_status(c->g);
  cx_grad_copy_attrs(c, node);
  cx_node_set_string(c->g, node, "op", name);
  c->dx[0] = cx_node_output(c->g, node, 0);
  return cx_graph_status(c->g);
}

/* ---- op records ---- */

static const cx_attr_schema no_attrs[] = {{NULL, 0, false}};
static const cx_attr_schema alpha_attrs[] = {{"alpha", CX_ATTR_FLOAT, false}, {NULL, 0, false}};
static const cx_attr_schema alpha_beta_attrs[] = {
    {"alpha", CX_ATTR_FLOAT, false}, {"beta", CX_ATTR_FLOAT, false}, {NULL, 0, false}};
static const cx_attr_schema clip_attrs[] = { /* opset 6 kept its bounds here */
    {"min", CX_ATTR_FLOAT, false}, {"max", CX_ATTR_FLOAT, false}, {NULL, 0, false}};
static const cx_attr_schema act_grad_attrs[] = {
    {"op", CX_ATTR_STRING, true}, {"alpha", CX_ATTR_FLOAT, false},
    {"beta", CX_ATTR_FLOAT, false}, {"min", CX_ATTR_FLOAT, false},
    {"max", CX_ATTR_FLOAT, false}, {"approximate", CX_ATTR_STRING, false}, {NULL, 0, false}};
static const cx_attr_schema gelu_attrs[] = {{"approximate", CX_ATTR_STRING, false},
                                            {NULL, 0, false}};

#define ACT(var, name, attrs)                                                                      \
  static const cx_op_def var = {name, CX_DOMAIN_ONNX, 1, 1, 1, 1, attrs,                           \
                                infer_act, grad_act, NULL, 0}

ACT(op_relu, "Relu", no_attrs);
ACT(op_leaky_relu, "LeakyRelu", alpha_attrs);
ACT(op_sigmoid, "Sigmoid", no_attrs);
ACT(op_hard_sigmoid, "HardSigmoid", alpha_beta_attrs);
ACT(op_hard_swish, "HardSwish", no_attrs);
ACT(op_tanh, "Tanh", no_attrs);
ACT(op_exp, "Exp", no_attrs);
ACT(op_log, "Log", no_attrs);
ACT(op_sqrt, "Sqrt", no_attrs);
ACT(op_erf, "Erf", no_attrs);
ACT(op_gelu, "Gelu", gelu_attrs);
ACT(op_reciprocal, "Reciprocal", no_attrs);
static const cx_op_def op_clip = {"Clip", CX_DOMAIN_ONNX, 1, 3, 1, 1, clip_attrs,
                                  infer_act, grad_act, NULL, 0};
static const cx_op_def op_act_grad = {"ActivationGrad", CX_DOMAIN_COMPRESS, 3, 5, 1, 1,
                                      act_grad_attrs, infer_act_grad, NULL, NULL, 0};

const cx_op_def *const cx_ops_activation[] = {
    &op_relu, &op_leaky_relu, &op_clip, &op_sigmoid, &op_hard_sigmoid, &op_hard_swish,
    &op_tanh, &op_exp, &op_log, &op_sqrt, &op_erf, &op_gelu, &op_reciprocal,
    &op_act_grad, NULL,
};
