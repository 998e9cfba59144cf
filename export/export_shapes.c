/* Shape inference without compiling: each op's own `infer`, run over the graph in topological
 * order for a given batch size. Running it for batch 1 and 2 tells which dimensions follow the
 * batch, which is what an ONNX file's symbolic "N" needs. */
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "export_internal.h"
#include "graph_shapes.h"

/* Stable: nodes keep their index order where it is already valid (it always is for graphs made
 * with the builder, whose inputs must exist before the node). */
cx_status cx_ex_topo_order(const cx_graph *g, int *order) {
  bool *done = calloc((size_t)g->n_nodes + 1, sizeof(bool));
  bool *ready = calloc((size_t)g->n_values + 1, sizeof(bool));
  if (!done || !ready) {
    free(done);
    free(ready);
    return cx_ex_nomem();
  }
  for (int v = 0; v < g->n_values; v++) ready[v] = g->values[v].producer < 0;
  int n = 0;
  for (bool progress = true; progress && n < g->n_nodes;) {
    progress = false;
    for (int i = 0; i < g->n_nodes; i++) {
      const cx_node *nd = &g->nodes[i];
      bool ok = !done[i];
      for (int k = 0; ok && k < nd->n_in; k++) ok = nd->in[k] < 0 || ready[nd->in[k]];
      if (!ok) continue;
      done[i] = progress = true;
      order[n++] = i;
      for (int k = 0; k < nd->n_out; k++) ready[nd->out[k]] = true;
    }
  }
  free(done);
  free(ready);
  if (n < g->n_nodes) return cx_fail(CX_ERR_FORMAT, "the graph has a cycle");
  return CX_OK;
}

static cx_status infer_node(const cx_graph *g, const cx_node *n, cx_shape *shape,
                            cx_dtype *dtype, cx_shape *in_shape, cx_dtype *in_dtype,
                            const void **in_data, cx_shape *out_shape, cx_dtype *out_dtype) {
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    in_shape[k] = v >= 0 ? shape[v] : (cx_shape){0};
    in_dtype[k] = v >= 0 ? dtype[v] : CX_F32;
    in_data[k] = v >= 0 && g->values[v].kind == CX_VALUE_CONST ? g->values[v].init : NULL;
  }
  memset(out_shape, 0, sizeof(cx_shape) * (size_t)n->n_out);
  memset(out_dtype, 0, sizeof(cx_dtype) * (size_t)n->n_out);
  cx_infer_ctx ctx = {.node = n, .in_shape = in_shape, .in_dtype = in_dtype, .in_data = in_data,
                      .out_shape = out_shape, .out_dtype = out_dtype};
  CX_TRY(n->op->infer(&ctx));
  for (int k = 0; k < n->n_out; k++) {
    shape[n->out[k]] = out_shape[k];
    dtype[n->out[k]] = out_dtype[k];
  }
  return CX_OK;
}

cx_status cx_ex_infer(const cx_graph *g, const int *order, int64_t batch, cx_shape *shape,
                      cx_dtype *dtype) {
  int max_in = 1, max_out = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].n_in > max_in) max_in = g->nodes[i].n_in;
    if (g->nodes[i].n_out > max_out) max_out = g->nodes[i].n_out;
  }
  for (int v = 0; v < g->n_values; v++) {
    shape[v] = g->values[v].shape;
    dtype[v] = g->values[v].dtype;
    for (int d = 0; d < shape[v].ndim; d++)
      if (shape[v].d[d] < 0) shape[v].d[d] = batch;
  }
  cx_shape *in_shape = malloc(sizeof(cx_shape) * (size_t)max_in);
  cx_dtype *in_dtype = malloc(sizeof(cx_dtype) * (size_t)max_in);
  const void **in_data = malloc(sizeof(void *) * (size_t)max_in);
  cx_shape *out_shape = malloc(sizeof(cx_shape) * (size_t)max_out);
  cx_dtype *out_dtype = malloc(sizeof(cx_dtype) * (size_t)max_out);
  cx_status s = in_shape && in_dtype && in_data && out_shape && out_dtype ? CX_OK : cx_ex_nomem();
  for (int i = 0; s == CX_OK && i < g->n_nodes; i++)
    s = infer_node(g, &g->nodes[order[i]], shape, dtype, in_shape, in_dtype, in_data, out_shape,
                   out_dtype);
  free(in_shape);
  free(in_dtype);
  free(in_data);
  free(out_shape);
  free(out_dtype);
  return s;
}

void cx_ex_symbolic(const cx_shape *a, const cx_shape *b, cx_shape *out) {
  *out = *a;
  for (int d = 0; d < a->ndim; d++)
    if (a->d[d] != b->d[d]) out->d[d] = a->d[d] == 1 && b->d[d] == 2 ? -1 : -2;
}

cx_status cx_graph_infer_shapes(const cx_graph *g, int64_t batch, cx_shape *shape,
                                cx_dtype *dtype) {
  CX_TRY(cx_graph_validate(g));
  int *order = malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
  cx_status s = order ? cx_ex_topo_order(g, order) : cx_ex_nomem();
  if (s == CX_OK) s = cx_ex_infer(g, order, batch, shape, dtype);
  free(order);
  return s;
}

cx_status cx_graph_symbolic_shapes(const cx_graph *g, cx_shape *shape, cx_dtype *dtype) {
  cx_shape *two = malloc(sizeof(cx_shape) * ((size_t)g->n_values + 1));
  cx_status s = two ? cx_graph_infer_shapes(g, 2, two, dtype) : cx_ex_nomem();
  if (s == CX_OK) s = cx_graph_infer_shapes(g, 1, shape, dtype);
  for (int v = 0; s == CX_OK && v < g->n_values; v++) cx_ex_symbolic(&shape[v], &two[v], &shape[v]);
  free(two);
  return s;
}
