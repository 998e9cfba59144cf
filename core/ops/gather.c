/* Gather on activations (ViT's class token x[:, 0], a Swin window's position table) with
 * constant indices, and GatherGrad(dY, indices) -> dData (attribute `shape`: data's shape),
 * which adds each gathered slice's gradient back where it came from (repeated indices add up).
 * Gather of constants is folded at import (import/onnx_fold.c). */

#include <string.h>

#include "families.h"
#include "gather.h"

cx_status cx_gather_split_make(const cx_node *n, const cx_shape *data, const cx_shape *indices,
                               cx_gather_split *s) {
  CX_TRY(cx_axis_normalize(n, cx_node_int(n, "axis", 0), data->ndim, &s->axis));
  s->outer = s->inner = 1;
  for (int d = 0; d < data->ndim; d++)
    if (d < s->axis) s->outer *= data->d[d];
    else if (d > s->axis) s->inner *= data->d[d];
  s->dim = data->d[s->axis];
  s->count = cx_shape_numel(indices);
  return CX_OK;
}

cx_status cx_gather_index(const cx_node *n, const cx_gather_split *s, int64_t k, int64_t *out) {
  if (k < -s->dim || k >= s->dim)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): index %lld is outside an axis of %lld", n->name,
                   n->op->name, (long long)k, (long long)s->dim);
  *out = k < 0 ? k + s->dim : k;
  return CX_OK;
}

/* data's shape with the axis replaced by the indices' shape */
static cx_status gathered_shape(const cx_node *n, const cx_shape *data, const cx_shape *ind,
                                const cx_gather_split *s, cx_shape *y) {
  if (data->ndim - 1 + ind->ndim > CX_MAX_DIMS)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): the output would have more than %d dimensions",
                   n->name, n->op->name, CX_MAX_DIMS);
  *y = (cx_shape){0};
  for (int d = 0; d < s->axis; d++) y->d[y->ndim++] = data->d[d];
  for (int d = 0; d < ind->ndim; d++) y->d[y->ndim++] = ind->d[d];
  for (int d = s->axis + 1; d < data->ndim; d++) y->d[y->ndim++] = data->d[d];
  return CX_OK;
}

/* Indices must be constant s64 in range: shapes and the gradient's scatter are fixed when
 * compiling. */
static cx_status check_indices(const cx_infer_ctx *c, const cx_gather_split *s) {
  const cx_node *n = c->node;
  if (c->in_dtype[1] != CX_S64 || !c->in_data[1])
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): indices must be a constant s64 tensor "
                   "(got %s%s)", n->name, n->op->name, cx_dtype_name(c->in_dtype[1]),
                   c->in_data[1] ? "" : ", computed");
  const int64_t *v = c->in_data[1];
  int64_t at;
  for (int64_t k = 0; k < s->count; k++) CX_TRY(cx_gather_index(n, s, v[k], &at));
  return CX_OK;
}

static cx_status infer_gather(const cx_infer_ctx *c) {
  cx_gather_split s;
  CX_TRY(cx_gather_split_make(c->node, &c->in_shape[0], &c->in_shape[1], &s));
  CX_TRY(check_indices(c, &s));
  CX_TRY(gathered_shape(c->node, &c->in_shape[0], &c->in_shape[1], &s, &c->out_shape[0]));
  c->out_dtype[0] = c->in_dtype[0];
  return CX_OK;
}

static cx_status infer_gather_grad(const cx_infer_ctx *c) {
  const int64_t *v = NULL;
  int k = cx_node_ints(c->node, "shape", &v);
  if (k < 1 || k > CX_MAX_DIMS)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (GatherGrad): the shape attribute is missing or too "
                   "long", c->node->name);
  cx_shape data = cx_shape_make(k, v), y;
  cx_gather_split s;
  CX_TRY(cx_gather_split_make(c->node, &data, &c->in_shape[1], &s));
  CX_TRY(check_indices(c, &s));
  CX_TRY(gathered_shape(c->node, &data, &c->in_shape[1], &s, &y));
  if (!cx_shape_equal(&y, &c->in_shape[0]) || c->in_dtype[0] != CX_F32) {
    char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
    return cx_fail(CX_ERR_SHAPE, "node '%s' (GatherGrad): dY is %s %s; expected f32 %s",
                   c->node->name, cx_dtype_name(c->in_dtype[0]), cx_shape_str(&c->in_shape[0], a),
                   cx_shape_str(&y, b));
  }
  c->out_shape[0] = data;
  c->out_dtype[0] = CX_F32;
  return CX_OK;
}

static cx_status grad_gather(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  if (!ctx->need[0] || ctx->dy[0] < 0) return CX_OK;
  cx_shape xs = ctx->shape[n->in[0]];
  int node = cx_grad_node(ctx, "GatherGrad", (int[]){ctx->dy[0], n->in[1]}, 2, 1);
  if (node < 0) return cx_graph_status(ctx->g);
  cx_grad_copy_attrs(ctx, node);
  cx_node_set_ints(ctx->g, node, "shape", xs.d, xs.ndim);
  ctx->dx[0] = cx_node_output(ctx->g, node, 0);
  return cx_graph_status(ctx->g);
}

static const cx_attr_schema gather_attrs[] = {{"axis", CX_ATTR_INT, false}, {NULL, 0, false}};
static const cx_attr_schema gather_grad_attrs[] = {
    {"axis", CX_ATTR_INT, false}, {"shape", CX_ATTR_INTS, true}, {NULL, 0, false}};

static const cx_op_def op_gather = {"Gather", CX_DOMAIN_ONNX, 2, 2, 1, 1, gather_attrs,
                                    infer_gather, grad_gather, NULL, 0};
static const cx_op_def op_gather_grad = {"GatherGrad", CX_DOMAIN_COMPRESS, 2, 2, 1, 1,
                                         gather_grad_attrs, infer_gather_grad, NULL, NULL, 0};

const cx_op_def *const cx_ops_gather[] = {&op_gather, &op_gather_grad, NULL};
