/* Shape inference without compiling (core/graph_shapes.h). */
#include "graph_shapes.h"

#include <stdlib.h>
#include <string.h>

#include "op.h"

static cx_status nomem(void) { return cx_fail(CX_ERR_NOMEM, "shape inference: out of memory"); }

static bool node_ready(const cx_graph *g, const bool *ready, int i) {
  const cx_node *n = &g->nodes[i];
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0 && !ready[n->in[k]]) return false;
  return true;
}

cx_status cx_graph_topo_order(const cx_graph *g, int *order) {
  bool *done = calloc((size_t)g->n_nodes + 1, sizeof(bool));
  bool *ready = calloc((size_t)g->n_values + 1, sizeof(bool));
  if (!done || !ready) {
    free(done);
    free(ready);
    return nomem();
  }
  for (int v = 0; v < g->n_values; v++) ready[v] = g->values[v].producer < 0;
  int placed = 0, first = 0; /* first: the lowest node not placed yet */
  while (placed < g->n_nodes) {
    int pick = -1;
    for (int i = first; i < g->n_nodes && pick < 0; i++)
      if (!done[i] && node_ready(g, ready, i)) pick = i;
    if (pick < 0) break;
    done[pick] = true;
    order[placed++] = pick;
    for (int k = 0; k < g->nodes[pick].n_out; k++) ready[g->nodes[pick].out[k]] = true;
    while (first < g->n_nodes && done[first]) first++;
  }
  free(done);
  free(ready);
  return placed == g->n_nodes ? CX_OK : cx_fail(CX_ERR_FORMAT, "the graph has a cycle");
}

/* The op's infer, given its inputs gathered from the per-value arrays. */
static cx_status run_infer(const cx_graph *g, const cx_node *n, cx_shape *shape, cx_dtype *dtype,
                           void *scratch) {
  cx_shape *in_shape = scratch, *out_shape = in_shape + n->n_in;
  const void **in_data = (const void **)(out_shape + n->n_out);
  cx_dtype *in_dtype = (cx_dtype *)(in_data + n->n_in), *out_dtype = in_dtype + n->n_in;
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    in_shape[k] = v >= 0 ? shape[v] : (cx_shape){.ndim = 0};
    in_dtype[k] = v >= 0 ? dtype[v] : CX_F32;
    in_data[k] = v >= 0 && g->values[v].kind == CX_VALUE_CONST ? g->values[v].init : NULL;
  }
  for (int k = 0; k < n->n_out; k++) {
    out_shape[k] = (cx_shape){.ndim = 0};
    out_dtype[k] = CX_F32;
  }
  cx_infer_ctx ctx = {.node = n, .in_shape = in_shape, .in_dtype = in_dtype, .in_data = in_data,
                      .out_shape = out_shape, .out_dtype = out_dtype};
  CX_TRY(n->op->infer(&ctx));
  for (int k = 0; k < n->n_out; k++) {
    for (int d = 0; d < out_shape[k].ndim; d++)
      if (out_shape[k].d[d] < 0 || out_shape[k].d[d] > ((int64_t)1 << 40))
        return cx_fail(CX_ERR_SHAPE, "output %d gets dimension %lld", k,
                       (long long)out_shape[k].d[d]);
    shape[n->out[k]] = out_shape[k];
    dtype[n->out[k]] = out_dtype[k];
  }
  return CX_OK;
}

cx_status cx_graph_infer_node(const cx_graph *g, int node, cx_shape *shape, cx_dtype *dtype) {
  const cx_node *n = &g->nodes[node];
  /* one block for the gathered inputs and the outputs (a Concat or Sum may have many inputs):
   * shapes, then pointers, then dtypes, so that every part stays aligned */
  size_t bytes = (size_t)(n->n_in + n->n_out) * (sizeof(cx_shape) + sizeof(cx_dtype)) +
                 (size_t)n->n_in * sizeof(void *) + sizeof(void *);
  void *scratch = malloc(bytes);
  if (!scratch) return nomem();
  cx_status s = run_infer(g, n, shape, dtype, scratch);
  free(scratch);
  if (s != CX_OK && !strstr(cx_last_error(), n->name))
    cx_error_prefix("node '%s' (%s)", n->name, n->op->name);
  return s;
}

static cx_status set_batch(const cx_graph *g, int64_t batch, cx_shape *shape, cx_dtype *dtype) {
  for (int v = 0; v < g->n_values; v++) {
    const cx_value *x = &g->values[v];
    shape[v] = x->shape;
    dtype[v] = x->dtype;
    if (x->kind != CX_VALUE_INPUT) continue;
    for (int d = 0; d < x->shape.ndim; d++)
      if (x->shape.d[d] < 0) {
        if (batch <= 0)
          return cx_fail(CX_ERR_ARG, "input '%s' has a symbolic dimension; give a batch size",
                         x->name);
        shape[v].d[d] = batch;
      }
  }
  return CX_OK;
}

cx_status cx_graph_infer_shapes(const cx_graph *g, int64_t batch, cx_shape *shape,
                                cx_dtype *dtype) {
  CX_TRY(cx_graph_validate(g));
  int *order = malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
  cx_status s = order ? cx_graph_topo_order(g, order) : nomem();
  if (s == CX_OK) s = set_batch(g, batch, shape, dtype);
  for (int i = 0; s == CX_OK && i < g->n_nodes; i++)
    s = cx_graph_infer_node(g, order[i], shape, dtype);
  free(order);
  return s;
}

cx_status cx_graph_value_shape(const cx_graph *g, int value, int64_t batch, cx_shape *out) {
  if (value < 0 || value >= g->n_values)
    return cx_fail(CX_ERR_ARG, "shape inference: value %d is not in the graph", value);
  cx_shape *shape = malloc(sizeof(cx_shape) * ((size_t)g->n_values + 1));
  cx_dtype *dtype = malloc(sizeof(cx_dtype) * ((size_t)g->n_values + 1));
  cx_status s = shape && dtype ? cx_graph_infer_shapes(g, batch, shape, dtype) : nomem();
  if (s == CX_OK) *out = shape[value];
  free(shape);
  free(dtype);
  return s;
}

void cx_shape_symbolic(const cx_shape *one, const cx_shape *two, cx_shape *out) {
  *out = *one;
  for (int d = 0; d < one->ndim; d++)
    if (one->d[d] != two->d[d]) out->d[d] = one->d[d] == 1 && two->d[d] == 2 ? -1 : -2;
}

cx_status cx_graph_symbolic_shapes(const cx_graph *g, cx_shape *shape, cx_dtype *dtype) {
  cx_shape *two = malloc(sizeof(cx_shape) * ((size_t)g->n_values + 1));
  cx_status s = two ? cx_graph_infer_shapes(g, 2, two, dtype) : nomem();
  if (s == CX_OK) s = cx_graph_infer_shapes(g, 1, shape, dtype);
  for (int v = 0; s == CX_OK && v < g->n_values; v++) cx_shape_symbolic(&shape[v], &two[v], &shape[v]);
  free(two);
  return s;
}
