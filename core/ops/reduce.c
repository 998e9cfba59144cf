/* Reductions and normalisations along axes: ReduceSum, ReduceMean, ReduceMax, Softmax,
 * LogSoftmax, their gradient ops, and BroadcastTo (the adjoint of ReduceSumTo). */

#include <stddef.h>
#include <string.h>

#include "eltwise.h"
#include "families.h"

cx_status cx_reduce_shapes(const cx_node *n, const cx_shape *x, const int64_t *axes, int n_axes,
                           cx_shape *keep, cx_shape *out, bool reduced[CX_MAX_DIMS]) {
  bool red[CX_MAX_DIMS] = {false};
  bool noop = n_axes == 0 && cx_node_int(n, "noop_with_empty_axes", 0) != 0;
  for (int i = 0; i < n_axes; i++) {
    int a = 0;
    CX_TRY(cx_axis_normalize(n, axes[i], x->ndim, &a));
    red[a] = true;
  }
  for (int i = 0; i < x->ndim && n_axes == 0 && !noop; i++) red[i] = true;
  bool keepdims = cx_node_int(n, "keepdims", 1) != 0;
  *keep = *x;
  *out = (cx_shape){.ndim = 0};
  for (int i = 0; i < x->ndim; i++) {
    if (red[i]) keep->d[i] = 1;
    if (!red[i] || keepdims) out->d[out->ndim++] = keep->d[i];
  }
  if (reduced) memcpy(reduced, red, sizeof red);
  return CX_OK;
}

cx_status cx_reduce_keep_shape(const cx_node *n, const cx_shape *x, const int64_t *axes,
                               int64_t n_axes, cx_shape *keep) {
  if (n_axes > CX_MAX_DIMS)
    return cx_fail(CX_ERR_SHAPE, "node '%s': %d axes given", n->name, (int)n_axes);
  cx_shape out;
  return cx_reduce_shapes(n, x, axes, (int)n_axes, keep, &out, NULL);
}

/* ---- shape inference ---- */

static cx_status need_f32(const cx_infer_ctx *ctx, int i) {
  if (ctx->in_dtype[i] == CX_F32) return CX_OK;
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): input %d is %s; expected f32", ctx->node->name,
                 ctx->node->op->name, i, cx_dtype_name(ctx->in_dtype[i]));
}

/* The axes of a reduction: the second input when present (it must be a constant), else the
 * attribute. */
static cx_status infer_axes(const cx_infer_ctx *ctx, int64_t *axes, int *na) {
  const cx_node *n = ctx->node;
  if (n->n_in < 2 || n->in[1] < 0) {
    const int64_t *a = NULL;
    *na = cx_node_ints(n, "axes", &a);
    if (*na > CX_MAX_DIMS)
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): %d axes given", n->name, n->op->name, *na);
    if (*na) memcpy(axes, a, sizeof(int64_t) * (size_t)*na);
    return CX_OK;
  }
  const cx_shape *s = &ctx->in_shape[1];
  if (ctx->in_dtype[1] != CX_S64 || s->ndim > 1 || cx_shape_numel(s) > CX_MAX_DIMS)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): input axes must be a 1-D int64 tensor of at "
                   "most %d values", n->name, n->op->name, CX_MAX_DIMS);
  if (!ctx->in_data || !ctx->in_data[1])
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): input axes must be a constant",
                   n->name, n->op->name);
  *na = (int)cx_shape_numel(s);
  memcpy(axes, ctx->in_data[1], sizeof(int64_t) * (size_t)*na);
  return CX_OK;
}

static cx_status infer_reduce(const cx_infer_ctx *ctx) {
  CX_TRY(need_f32(ctx, 0));
  int64_t axes[CX_MAX_DIMS];
  int na = 0;
  CX_TRY(infer_axes(ctx, axes, &na));
  cx_shape keep;
  CX_TRY(cx_reduce_shapes(ctx->node, &ctx->in_shape[0], axes, na, &keep, &ctx->out_shape[0], NULL));
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

/* ReduceMaxGrad(dY, X, Y): dX of X's shape. */
static cx_status infer_reduce_max_grad(const cx_infer_ctx *ctx) {
  for (int k = 0; k < 3; k++) CX_TRY(need_f32(ctx, k));
  if (cx_shape_numel(&ctx->in_shape[0]) != cx_shape_numel(&ctx->in_shape[2])) {
    char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
    return cx_fail(CX_ERR_SHAPE, "node '%s' (ReduceMaxGrad): dY %s and Y %s differ",
                   ctx->node->name, cx_shape_str(&ctx->in_shape[0], a),
                   cx_shape_str(&ctx->in_shape[2], b));
  }
  ctx->out_shape[0] = ctx->in_shape[1];
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

static cx_status infer_broadcast_to(const cx_infer_ctx *ctx) {
  CX_TRY(need_f32(ctx, 0));
  const int64_t *dims = NULL;
  int nd = cx_node_ints(ctx->node, "shape", &dims);
  if (nd > CX_MAX_DIMS)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (BroadcastTo): attribute shape has %d dimensions",
                   ctx->node->name, nd);
  cx_shape to = cx_shape_make(nd, dims), keep;
  CX_TRY(cx_reduce_to_keep_shape(ctx->node, &ctx->in_shape[0], &to, &keep));
  ctx->out_shape[0] = to;
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

static cx_status infer_softmax(const cx_infer_ctx *ctx) {
  CX_TRY(need_f32(ctx, 0));
  int axis = 0;
  CX_TRY(cx_axis_normalize(ctx->node, cx_node_int(ctx->node, "axis", -1), ctx->in_shape[0].ndim,
                           &axis));
  ctx->out_shape[0] = ctx->in_shape[0];
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

/* (dY, Y) of equal shapes */
static cx_status infer_softmax_grad(const cx_infer_ctx *ctx) {
  CX_TRY(need_f32(ctx, 1));
  if (!cx_shape_equal(&ctx->in_shape[0], &ctx->in_shape[1])) {
    char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): dY %s and Y %s differ", ctx->node->name,
                   ctx->node->op->name, cx_shape_str(&ctx->in_shape[0], a),
                   cx_shape_str(&ctx->in_shape[1], b));
  }
  return infer_softmax(ctx);
}

/* ---- gradient rules ---- */

static int in_id(const cx_grad_ctx *c, int i) { return c->g->nodes[c->node].in[i]; }
static int out_id(const cx_grad_ctx *c, int k) { return c->g->nodes[c->node].out[k]; }

/* The reduction's axes again, now read from the graph (a constant input, or the attribute). */
static cx_status grad_axes(const cx_grad_ctx *c, int64_t *axes, int *na) {
  const cx_node *n = &c->g->nodes[c->node];
  if (n->n_in < 2 || n->in[1] < 0) {
    const int64_t *a = NULL;
    *na = cx_node_ints(n, "axes", &a);
    if (*na) memcpy(axes, a, sizeof(int64_t) * (size_t)*na);
    return CX_OK;
  }
  const cx_value *v = &c->g->values[n->in[1]];
  if (!v->init)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): input axes must be a constant", n->name,
                   n->op->name);
  *na = (int)cx_shape_numel(&v->shape);
  memcpy(axes, v->init, sizeof(int64_t) * (size_t)*na);
  return CX_OK;
}

/* d ReduceSum = dy broadcast back over the reduced axes; ReduceMean also divides by their size. */
static cx_status grad_reduce(const cx_grad_ctx *c, bool mean) {
  if (!c->need[0] || c->dy[0] < 0) return CX_OK;
  int64_t axes[CX_MAX_DIMS], dropped[CX_MAX_DIMS];
  int na = 0, nd = 0;
  bool red[CX_MAX_DIMS];
  cx_shape keep, out;
  const cx_shape *xs = &c->shape[in_id(c, 0)];
  const cx_node *n = &c->g->nodes[c->node];
  CX_TRY(grad_axes(c, axes, &na));
  CX_TRY(cx_reduce_shapes(n, xs, axes, na, &keep, &out, red));
  bool keepdims = cx_node_int(n, "keepdims", 1) != 0;
  for (int i = 0; i < xs->ndim; i++)
    if (red[i] && !keepdims) dropped[nd++] = i;
  int64_t count = cx_shape_numel(xs) / (cx_shape_numel(&keep) ? cx_shape_numel(&keep) : 1);
  if (cx_shape_equal(&keep, xs) && nd == 0 && (!mean || count == 1)) {
    c->dx[0] = c->dy[0]; /* nothing reduced */
    return CX_OK;
  }
  int node = cx_grad_node(c, "BroadcastTo", &c->dy[0], 1, 1);
  if (node < 0) return cx_graph_status(c->g);
  cx_node_set_ints(c->g, node, "shape", xs->d, xs->ndim);
  if (nd) cx_node_set_ints(c->g, node, "axes", dropped, nd);
  if (mean && count > 1) cx_node_set_float(c->g, node, "scale", 1.0f / (float)count);
  c->dx[0] = cx_node_output(c->g, node, 0);
  return cx_graph_status(c->g);
}

/* d ReduceMax: dY goes to the maxima, shared equally where several tie (as torch.amax):
 * ReduceMaxGrad(dY, X, Y) with the axes resolved into its attribute. */
static cx_status grad_reduce_max(const cx_grad_ctx *c) {
  if (!c->need[0] || c->dy[0] < 0) return CX_OK;
  int64_t axes[CX_MAX_DIMS];
  int na = 0;
  CX_TRY(grad_axes(c, axes, &na));
  const cx_node *n = &c->g->nodes[c->node];
  int64_t keepdims = cx_node_int(n, "keepdims", 1);
  int64_t noop = cx_node_int(n, "noop_with_empty_axes", 0);
  int in[3] = {c->dy[0], in_id(c, 0), out_id(c, 0)};
  int node = cx_grad_node(c, "ReduceMaxGrad", in, 3, 1);
  if (node < 0) return cx_graph_status(c->g);
  if (na) cx_node_set_ints(c->g, node, "axes", axes, na);
  cx_node_set_int(c->g, node, "keepdims", keepdims);
  cx_node_set_int(c->g, node, "noop_with_empty_axes", noop);
  c->dx[0] = cx_node_output(c->g, node, 0);
  return cx_graph_status(c->g);
}

static cx_status grad_reduce_sum(const cx_grad_ctx *c) { return grad_reduce(c, false); }
static cx_status grad_reduce_mean(const cx_grad_ctx *c) { return grad_reduce(c, true); }

/* The adjoint of BroadcastTo(x; shape, axes, scale) is ReduceSumTo(dy; x's shape, axes, scale). */
static cx_status grad_broadcast_to(const cx_grad_ctx *c) {
  if (!c->need[0] || c->dy[0] < 0) return CX_OK;
  int node = cx_grad_node(c, "ReduceSumTo", &c->dy[0], 1, 1);
  if (node < 0) return cx_graph_status(c->g);
  cx_grad_copy_attrs(c, node);
  const cx_shape *xs = &c->shape[in_id(c, 0)];
  cx_node_set_ints(c->g, node, "shape", xs->d, xs->ndim);
  c->dx[0] = cx_node_output(c->g, node, 0);
  return cx_graph_status(c->g);
}

/* Softmax and LogSoftmax: the grad op reads dY and the forward output Y. */
static cx_status grad_softmax_like(const cx_grad_ctx *c, const char *op) {
  if (!c->need[0] || c->dy[0] < 0) return CX_OK;
  int in[2] = {c->dy[0], out_id(c, 0)};
  int node = cx_grad_node(c, op, in, 2, 1);
  if (node < 0) return cx_graph_status(c->g);
  cx_grad_copy_attrs(c, node);
  c->dx[0] = cx_node_output(c->g, node, 0);
  return cx_graph_status(c->g);
}

static cx_status grad_softmax(const cx_grad_ctx *c) { return grad_softmax_like(c, "SoftmaxGrad"); }
static cx_status grad_log_softmax(const cx_grad_ctx *c) {
  return grad_softmax_like(c, "LogSoftmaxGrad");
}

/* ---- op records ---- */

static const cx_attr_schema reduce_attrs[] = {
    {"axes", CX_ATTR_INTS, false},
    {"keepdims", CX_ATTR_INT, false},
    {"noop_with_empty_axes", CX_ATTR_INT, false},
    {NULL, 0, false},
};
static const cx_attr_schema broadcast_to_attrs[] = {
    {"shape", CX_ATTR_INTS, true},
    {"axes", CX_ATTR_INTS, false},
    {"scale", CX_ATTR_FLOAT, false},
    {NULL, 0, false},
};
static const cx_attr_schema softmax_attrs[] = {{"axis", CX_ATTR_INT, false}, {NULL, 0, false}};

static const cx_op_def op_reduce_sum = {"ReduceSum", CX_DOMAIN_ONNX, 1, 2, 1, 1, reduce_attrs,
                                        infer_reduce, grad_reduce_sum, NULL, 0};
static const cx_op_def op_reduce_mean = {"ReduceMean", CX_DOMAIN_ONNX, 1, 2, 1, 1, reduce_attrs,
                                         infer_reduce, grad_reduce_mean, NULL, 0};
static const cx_op_def op_reduce_max = {"ReduceMax", CX_DOMAIN_ONNX, 1, 2, 1, 1, reduce_attrs,
                                        infer_reduce, grad_reduce_max, NULL, 0};
static const cx_op_def op_reduce_max_grad = {"ReduceMaxGrad", CX_DOMAIN_COMPRESS, 3, 3, 1, 1,
                                             reduce_attrs, infer_reduce_max_grad, NULL, NULL, 0};
static const cx_op_def op_broadcast_to = {"BroadcastTo", CX_DOMAIN_COMPRESS, 1, 1, 1, 1,
                                          broadcast_to_attrs, infer_broadcast_to,
                                          grad_broadcast_to, NULL, 0};
static const cx_op_def op_softmax = {"Softmax", CX_DOMAIN_ONNX, 1, 1, 1, 1, softmax_attrs,
                                     infer_softmax, grad_softmax, NULL, 0};
static const cx_op_def op_log_softmax = {"LogSoftmax", CX_DOMAIN_ONNX, 1, 1, 1, 1, softmax_attrs,
                                         infer_softmax, grad_log_softmax, NULL, 0};
static const cx_op_def op_softmax_grad = {"SoftmaxGrad", CX_DOMAIN_COMPRESS, 2, 2, 1, 1,
                                          softmax_attrs, infer_softmax_grad, NULL, NULL, 0};
static const cx_op_def op_log_softmax_grad = {"LogSoftmaxGrad", CX_DOMAIN_COMPRESS, 2, 2, 1, 1,
                                              softmax_attrs, infer_softmax_grad, NULL, NULL, 0};

const cx_op_def *const cx_ops_reduce[] = {
    &op_reduce_sum,   &op_reduce_mean,  &op_reduce_max,       &op_reduce_max_grad,
    &op_broadcast_to, &op_softmax,      &op_log_softmax,      &op_softmax_grad,
    &op_log_softmax_grad, NULL,
};
