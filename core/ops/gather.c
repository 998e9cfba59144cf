/* Gather and GatherND (any batch_dims; 0 is the dynamo exporter's form of LeViT's attention
 * biases) on activations with s64 indices, and GatherNDGrad like GatherGrad below; Gather on activations
 * (ViT's class token x[:, 0]), and GatherGrad(dY, indices) -> dData (attribute `shape`: data's shape),
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

/* Indices are s64; constant ones are checked here, computed ones by the kernels when they run. */
static cx_status check_indices(const cx_infer_ctx *c, const cx_gather_split *s) {
  const cx_node *n = c->node;
  if (c->in_dtype[1] != CX_S64)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): indices must be s64, got %s", n->name,
                   n->op->name, cx_dtype_name(c->in_dtype[1]));
  if (!c->in_data[1]) return CX_OK;
  const int64_t *v = c->in_data[1];
  int64_t at;
  for (int64_t k = 0; k < s->count; k++) CX_TRY(cx_gather_index(n, s, v[k], &at));
  return CX_OK;
}

cx_status cx_gather_nd_split_make(const cx_node *n, const cx_shape *data, const cx_shape *indices,
                                  cx_gather_nd_split *s) {
  int q = indices->ndim;
  int64_t b = cx_node_int(n, "batch_dims", 0);
  if (b < 0 || b >= q || b >= data->ndim)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): batch_dims %lld must be at least 0 and below "
                   "the ranks of data (%d) and indices (%d)", n->name, n->op->name, (long long)b,
                   data->ndim, q);
  s->batch_dims = (int)b;
  for (int d = 0; d < s->batch_dims; d++)
    if (data->d[d] != indices->d[d])
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): batch axis %d is %lld in data and %lld in "
                     "indices", n->name, n->op->name, d, (long long)data->d[d],
                     (long long)indices->d[d]);
  s->k = (int)indices->d[q - 1];
  if (s->k < 1 || s->k > data->ndim - s->batch_dims || q - 1 + data->ndim - s->k > CX_MAX_DIMS)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): indices [..., k] need 1 <= k <= rank of data "
                   "less batch_dims (%d)", n->name, n->op->name, data->ndim - s->batch_dims);
  s->tuples = s->slice = s->per_batch = s->batch_slices = 1;
  for (int d = 0; d < q - 1; d++) s->tuples *= indices->d[d];
  for (int d = s->batch_dims; d < q - 1; d++) s->per_batch *= indices->d[d];
  for (int d = s->batch_dims; d < s->batch_dims + s->k; d++) s->batch_slices *= data->d[d];
  for (int d = s->batch_dims + s->k; d < data->ndim; d++) s->slice *= data->d[d];
  return CX_OK;
}

cx_status cx_gather_nd_offset(const cx_node *n, const cx_shape *data,
                              const cx_gather_nd_split *s, int64_t t, const int64_t *idx,
                              int64_t *slice_at) {
  int64_t at = 0;
  for (int j = 0; j < s->k; j++) {
    int axis = s->batch_dims + j;
    int64_t v = idx[j], dim = data->d[axis];
    if (v < -dim || v >= dim)
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): index %lld is outside axis %d of %lld",
                     n->name, n->op->name, (long long)v, axis, (long long)dim);
    at = at * dim + (v < 0 ? v + dim : v);
  }
  *slice_at = t / s->per_batch * s->batch_slices + at; /* the batch's slices come first */
  return CX_OK;
}

/* indices' leading shape (its batch axes included), then data's dimensions from batch_dims + k */
static cx_shape gathered_nd_shape(const cx_shape *data, const cx_shape *ind,
                                  const cx_gather_nd_split *s) {
  cx_shape y = {0};
  for (int d = 0; d < ind->ndim - 1; d++) y.d[y.ndim++] = ind->d[d];
  for (int d = s->batch_dims + s->k; d < data->ndim; d++) y.d[y.ndim++] = data->d[d];
  return y;
}

static cx_status check_nd_indices(const cx_infer_ctx *c, const cx_shape *data,
                                  const cx_gather_nd_split *s) {
  if (c->in_dtype[1] != CX_S64)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): indices must be s64, got %s",
                   c->node->name, c->node->op->name, cx_dtype_name(c->in_dtype[1]));
  const int64_t *v = c->in_data[1];
  int64_t at;
  for (int64_t t = 0; v && t < s->tuples; t++)
    CX_TRY(cx_gather_nd_offset(c->node, data, s, t, v + t * s->k, &at));
  return CX_OK;
}

static cx_status infer_gather_nd(const cx_infer_ctx *c) {
  cx_gather_nd_split s;
  CX_TRY(cx_gather_nd_split_make(c->node, &c->in_shape[0], &c->in_shape[1], &s));
  CX_TRY(check_nd_indices(c, &c->in_shape[0], &s));
  c->out_shape[0] = gathered_nd_shape(&c->in_shape[0], &c->in_shape[1], &s);
  c->out_dtype[0] = c->in_dtype[0];
  return CX_OK;
}

/* The `shape` attribute of GatherGrad and GatherNDGrad: the forward data's shape. */
static cx_status grad_data_shape(const cx_infer_ctx *c, cx_shape *data) {
  const int64_t *v = NULL;
  int k = cx_node_ints(c->node, "shape", &v);
  if (k < 1 || k > CX_MAX_DIMS)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): the shape attribute is missing or too long",
                   c->node->name, c->node->op->name);
  *data = cx_shape_make(k, v);
  return CX_OK;
}

static cx_status check_dy(const cx_infer_ctx *c, const cx_shape *y) {
  if (cx_shape_equal(y, &c->in_shape[0]) && c->in_dtype[0] == CX_F32) return CX_OK;
  char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): dY is %s %s; expected f32 %s", c->node->name,
                 c->node->op->name, cx_dtype_name(c->in_dtype[0]),
                 cx_shape_str(&c->in_shape[0], a), cx_shape_str(y, b));
}

static cx_status infer_gather_nd_grad(const cx_infer_ctx *c) {
  cx_shape data;
  CX_TRY(grad_data_shape(c, &data));
  cx_gather_nd_split s;
  CX_TRY(cx_gather_nd_split_make(c->node, &data, &c->in_shape[1], &s));
  CX_TRY(check_nd_indices(c, &data, &s));
  cx_shape y = gathered_nd_shape(&data, &c->in_shape[1], &s);
  CX_TRY(check_dy(c, &y));
  c->out_shape[0] = data;
  c->out_dtype[0] = CX_F32;
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
  cx_shape data, y;
  CX_TRY(grad_data_shape(c, &data));
  cx_gather_split s;
  CX_TRY(cx_gather_split_make(c->node, &data, &c->in_shape[1], &s));
  CX_TRY(check_indices(c, &s));
  CX_TRY(gathered_shape(c->node, &data, &c->in_shape[1], &s, &y));
  CX_TRY(check_dy(c, &y));
  c->out_shape[0] = data;
  c->out_dtype[0] = CX_F32;
  return CX_OK;
}

/* Gather and GatherND: a gradient op of the same name + "Grad" reading dY and the indices. */
static cx_status grad_gather(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  if (!ctx->need[0] || ctx->dy[0] < 0) return CX_OK;
  cx_shape xs = ctx->shape[n->in[0]];
  const char *op = strcmp(n->op->name, "GatherND") ? "GatherGrad" : "GatherNDGrad";
  int node = cx_grad_node(ctx, op, (int[]){ctx->dy[0], n->in[1]}, 2, 1);
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

static const cx_attr_schema gather_nd_attrs[] = {{"batch_dims", CX_ATTR_INT, false},
                                                 {NULL, 0, false}};
static const cx_attr_schema gather_nd_grad_attrs[] = {
    {"batch_dims", CX_ATTR_INT, false}, {"shape", CX_ATTR_INTS, true}, {NULL, 0, false}};
static const cx_op_def op_gather_nd = {"GatherND", CX_DOMAIN_ONNX, 2, 2, 1, 1, gather_nd_attrs,
                                       infer_gather_nd, grad_gather, NULL, 0};
static const cx_op_def op_gather_nd_grad = {"GatherNDGrad", CX_DOMAIN_COMPRESS, 2, 2, 1, 1,
                                            gather_nd_grad_attrs, infer_gather_nd_grad, NULL, NULL,
                                            0};

const cx_op_def *const cx_ops_gather[] = {&op_gather, &op_gather_grad, &op_gather_nd,
                                          &op_gather_nd_grad, NULL};
