/* Element-wise arithmetic with numpy broadcasting: Add, Sub, Mul, Div, Sum, Neg, and the internal
 * ReduceSumTo that undoes a broadcast in gradients. */

#include "eltwise.h"

#include <stddef.h>
#include <string.h>

#include "families.h"

/* ---- shape helpers (declared in eltwise.h) ---- */

cx_status cx_shape_insert_axes(const cx_shape *base, const int64_t *axes, int n_axes,
                               cx_shape *out) {
  int rank = base->ndim + n_axes;
  if (rank > CX_MAX_DIMS)
    return cx_fail(CX_ERR_SHAPE, "inserting %d axes into a rank-%d shape exceeds %d dimensions",
                   n_axes, base->ndim, CX_MAX_DIMS);
  bool one[CX_MAX_DIMS] = {false};
  for (int i = 0; i < n_axes; i++) {
    int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a < 0 || a >= rank || one[a])
      return cx_fail(CX_ERR_SHAPE, "axis %lld is out of range or repeated for rank %d",
                     (long long)axes[i], rank);
    one[a] = true;
  }
  cx_shape r = {.ndim = rank};
  for (int i = 0, j = 0; i < rank; i++) r.d[i] = one[i] ? 1 : base->d[j++];
  *out = r;
  return CX_OK;
}

bool cx_shape_broadcasts_to(const cx_shape *from, const cx_shape *to) {
  if (from->ndim > to->ndim) return false;
  for (int i = 0; i < from->ndim; i++) {
    int64_t f = from->d[i], t = to->d[i + to->ndim - from->ndim];
    if (f != t && f != 1) return false;
  }
  return true;
}

cx_status cx_reduce_to_keep_shape(const cx_node *n, const cx_shape *small, const cx_shape *full,
                                  cx_shape *keep) {
  const int64_t *axes = NULL;
  int na = cx_node_ints(n, "axes", &axes);
  if (cx_shape_insert_axes(small, axes, na, keep) != CX_OK) {
    cx_error_prefix("node '%s' (%s): attribute axes", n->name, n->op->name);
    return CX_ERR_SHAPE;
  }
  if (!cx_shape_broadcasts_to(keep, full)) {
    char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): shape %s (with axes inserted) does not broadcast "
                   "to %s", n->name, n->op->name, cx_shape_str(keep, a), cx_shape_str(full, b));
  }
  return CX_OK;
}

/* ---- shape inference ---- */

static cx_status need_f32(const cx_infer_ctx *ctx, int i) {
  if (ctx->in_dtype[i] == CX_F32) return CX_OK;
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): input %d is %s; expected f32", ctx->node->name,
                 ctx->node->op->name, i, cx_dtype_name(ctx->in_dtype[i]));
}

/* numpy broadcasting over every present input */
static cx_status infer_broadcast_all(const cx_infer_ctx *ctx) {
  const cx_node *n = ctx->node;
  cx_shape s = {.ndim = 0};
  bool first = true;
  for (int i = 0; i < n->n_in; i++) {
    if (n->in[i] < 0) continue;
    CX_TRY(need_f32(ctx, i));
    if (first) s = ctx->in_shape[i];
    else if (cx_shape_broadcast(&s, &ctx->in_shape[i], &s) != CX_OK) {
      cx_error_prefix("node '%s' (%s): input %d", n->name, n->op->name, i);
      return CX_ERR_SHAPE;
    }
    first = false;
  }
  if (first)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): no inputs", n->name, n->op->name);
  ctx->out_shape[0] = s;
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

static cx_status infer_unary(const cx_infer_ctx *ctx) {
  CX_TRY(need_f32(ctx, 0));
  ctx->out_shape[0] = ctx->in_shape[0];
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

static cx_status infer_reduce_sum_to(const cx_infer_ctx *ctx) {
  CX_TRY(need_f32(ctx, 0));
  const int64_t *dims = NULL;
  int nd = cx_node_ints(ctx->node, "shape", &dims);
  if (nd > CX_MAX_DIMS)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (ReduceSumTo): attribute shape has %d dimensions",
                   ctx->node->name, nd);
  cx_shape to = cx_shape_make(nd, dims), keep;
  CX_TRY(cx_reduce_to_keep_shape(ctx->node, &to, &ctx->in_shape[0], &keep));
  ctx->out_shape[0] = to;
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

/* ---- gradient rules ---- */

static int in_id(const cx_grad_ctx *c, int i) { return c->g->nodes[c->node].in[i]; }
static int out_id(const cx_grad_ctx *c, int k) { return c->g->nodes[c->node].out[k]; }

/* dy summed down to input i's shape */
static int reduced(const cx_grad_ctx *c, int v, int i) {
  return cx_grad_reduce_to(c, v, &c->shape[out_id(c, 0)], &c->shape[in_id(c, i)]);
}

static int emit2(const cx_grad_ctx *c, const char *op, int a, int b) {
  int in[2] = {a, b};
  return cx_grad_emit(c, op, in, 2);
}

static cx_status grad_add(const cx_grad_ctx *c) {
  for (int i = 0; i < 2; i++)
    if (c->need[i] && c->dy[0] >= 0) c->dx[i] = reduced(c, c->dy[0], i);
  return cx_graph_status(c->g);
}

static cx_status grad_sub(const cx_grad_ctx *c) {
  if (c->dy[0] < 0) return CX_OK;
  if (c->need[0]) c->dx[0] = reduced(c, c->dy[0], 0);
  if (c->need[1]) { /* reduce first: the negation then runs on the smaller tensor */
    int r = reduced(c, c->dy[0], 1);
    c->dx[1] = cx_grad_emit(c, "Neg", &r, 1);
  }
  return cx_graph_status(c->g);
}

static cx_status grad_mul(const cx_grad_ctx *c) {
  if (c->dy[0] < 0) return CX_OK;
  if (c->need[0]) c->dx[0] = reduced(c, emit2(c, "Mul", c->dy[0], in_id(c, 1)), 0);
  if (c->need[1]) c->dx[1] = reduced(c, emit2(c, "Mul", c->dy[0], in_id(c, 0)), 1);
  return cx_graph_status(c->g);
}

/* y = a / b: da = dy / b, db = -dy * y / b = -(dy / b) * y */
static cx_status grad_div(const cx_grad_ctx *c) {
  if (c->dy[0] < 0) return CX_OK;
  int t = emit2(c, "Div", c->dy[0], in_id(c, 1));
  if (c->need[0]) c->dx[0] = reduced(c, t, 0);
  if (c->need[1]) {
    int r = reduced(c, emit2(c, "Mul", t, out_id(c, 0)), 1);
    c->dx[1] = cx_grad_emit(c, "Neg", &r, 1);
  }
  return cx_graph_status(c->g);
}

static cx_status grad_sum(const cx_grad_ctx *c) {
  if (c->dy[0] < 0) return CX_OK;
  int n_in = c->g->nodes[c->node].n_in;
  for (int i = 0; i < n_in; i++)
    if (c->need[i] && in_id(c, i) >= 0) c->dx[i] = reduced(c, c->dy[0], i);
  return cx_graph_status(c->g);
}

static cx_status grad_neg(const cx_grad_ctx *c) {
  if (c->need[0] && c->dy[0] >= 0) c->dx[0] = cx_grad_emit(c, "Neg", &c->dy[0], 1);
  return cx_graph_status(c->g);
}

/* The adjoint of ReduceSumTo(x; shape, axes, scale) is BroadcastTo(dy; x's shape, axes, scale). */
static cx_status grad_reduce_sum_to(const cx_grad_ctx *c) {
  if (!c->need[0] || c->dy[0] < 0) return CX_OK;
  int node = cx_grad_node(c, "BroadcastTo", &c->dy[0], 1, 1);
  if (node < 0) return cx_graph_status(c->g);
  cx_grad_copy_attrs(c, node);
  const cx_shape *xs = &c->shape[in_id(c, 0)];
  cx_node_set_ints(c->g, node, "shape", xs->d, xs->ndim);
  c->dx[0] = cx_node_output(c->g, node, 0);
  return cx_graph_status(c->g);
}

/* ---- op records ---- */

static const cx_attr_schema no_attrs[] = {{NULL, 0, false}};
static const cx_attr_schema reduce_to_attrs[] = {
    {"shape", CX_ATTR_INTS, true},
    {"axes", CX_ATTR_INTS, false},
    {"scale", CX_ATTR_FLOAT, false},
    {NULL, 0, false},
};

static const cx_op_def op_add = {"Add", CX_DOMAIN_ONNX, 2, 2, 1, 1, no_attrs,
                                 infer_broadcast_all, grad_add, NULL, 0};
static const cx_op_def op_sub = {"Sub", CX_DOMAIN_ONNX, 2, 2, 1, 1, no_attrs,
                                 infer_broadcast_all, grad_sub, NULL, 0};
static const cx_op_def op_mul = {"Mul", CX_DOMAIN_ONNX, 2, 2, 1, 1, no_attrs,
                                 infer_broadcast_all, grad_mul, NULL, 0};
static const cx_op_def op_div = {"Div", CX_DOMAIN_ONNX, 2, 2, 1, 1, no_attrs,
                                 infer_broadcast_all, grad_div, NULL, 0};
static const cx_op_def op_sum = {"Sum", CX_DOMAIN_ONNX, 1, 1 << 16, 1, 1, no_attrs,
                                 infer_broadcast_all, grad_sum, NULL, 0};
static const cx_op_def op_neg = {"Neg", CX_DOMAIN_ONNX, 1, 1, 1, 1, no_attrs,
                                 infer_unary, grad_neg, NULL, 0};
static const cx_op_def op_reduce_sum_to = {"ReduceSumTo", CX_DOMAIN_COMPRESS, 1, 1, 1, 1,
                                           reduce_to_attrs, infer_reduce_sum_to,
                                           grad_reduce_sum_to, NULL, 0};

const cx_op_def *const cx_ops_eltwise[] = {
    &op_add, &op_sub, &op_mul, &op_div, &op_sum, &op_neg, &op_reduce_sum_to, NULL,
};
