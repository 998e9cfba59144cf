/* The pruned graph (prune/channel.h): a clone whose initializers, `group` attributes and
 * Reshape targets are cut to the kept channels, as the analysis's edits say. */
#include <stdlib.h>
#include <string.h>

#include "../core/graph_shapes.h"
#include "../core/op.h"
#include "channel.h"

/* Keeps the entries of v along axis where mask[] is true (mask has v's size there). */
static cx_status slice_axis(cx_value *v, int axis, const bool *mask) {
  cx_shape s = v->shape;
  size_t es = cx_dtype_size(v->dtype);
  int64_t outer = 1, inner = 1, n = s.d[axis], kept = 0;
  for (int k = 0; k < axis; k++) outer *= s.d[k];
  for (int k = axis + 1; k < s.ndim; k++) inner *= s.d[k];
  for (int64_t j = 0; j < n; j++) kept += mask[j];
  if (kept == n) return CX_OK;
  char *out = malloc(es * (size_t)(outer * kept * inner) + 1), *src = v->init, *at = out;
  if (!out) return cx_fail(CX_ERR_NOMEM, "out of memory");
  size_t row = es * (size_t)inner;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < n; j++)
      if (mask[j]) {
        memcpy(at, src + ((size_t)(o * n + j)) * row, row);
        at += row;
      }
  free(v->init);
  v->init = out;
  v->shape.d[axis] = kept;
  return CX_OK;
}

static int64_t mask_of(const cx_channel_groups *cg, const bool *keep, int by, bool *mask) {
  int64_t kept = 0;
  for (int64_t k = 0; k < cg->channels[by]; k++) kept += mask[k] = keep[cx_channel_unit(cg, by, k)];
  return kept;
}

static cx_status apply(const cx_channel_groups *cg, const bool *keep, const cx_channel_edit *e,
                       cx_graph *out, bool *mask) {
  int64_t c = cg->channels[e->by], kept = mask_of(cg, keep, e->by, mask);
  cx_node *n = &out->nodes[e->node];
  if (e->kind == CX_CHANNEL_GROUPS) {
    int64_t groups = cx_node_int(n, "group", 1);
    cx_node_set_int(out, e->node, "group", groups * kept / c);
    return cx_graph_status(out);
  }
  cx_value *v = &out->values[e->value];
  if (e->kind == CX_CHANNEL_RESHAPE) {
    int64_t *t = v->init;
    if (cx_shape_numel(&v->shape) > 1 && t[1] > 0) t[1] = kept;
    return CX_OK;
  }
  if (e->axis >= v->shape.ndim || v->shape.d[e->axis] != c)
    return cx_fail(CX_ERR_SHAPE,
                   "prune: '%s' (node '%s') has %lld entries on axis %d, the "
                   "analysis expected %lld",
                   v->name, n->name,
                   (long long)(e->axis < v->shape.ndim ? v->shape.d[e->axis] : -1), e->axis,
                   (long long)c);
  return slice_axis(v, e->axis, mask);
}

cx_status cx_channel_rewrite(const cx_channel_groups *cg, const bool *keep, cx_graph **out) {
  *out = NULL;
  cx_graph *g = cx_graph_clone(cg->g);
  int64_t most = 1;
  for (int v = 0; v < cg->g->n_values; v++) most = cg->channels[v] > most ? cg->channels[v] : most;
  bool *mask = malloc((size_t)most * sizeof *mask);
  size_t nv = (size_t)cg->g->n_values + 1;
  cx_shape *shape = calloc(nv, sizeof *shape);
  cx_dtype *dtype = calloc(nv, sizeof *dtype);
  cx_status s = g && mask && shape && dtype ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = 0; s == CX_OK && i < cg->n_edits; i++) s = apply(cg, keep, &cg->edits[i], g, mask);
  if (s == CX_OK) s = cx_graph_validate(g);
  /* every node's shapes must still agree: a wrong slice shows up here, not in a user's runtime */
  if (s == CX_OK) s = cx_graph_infer_shapes(g, 1, shape, dtype);
  free(mask), free(shape), free(dtype);
  if (s != CX_OK) {
    cx_graph_free(g);
    return s;
  }
  *out = g;
  return CX_OK;
}
