/* What a model costs: parameters and multiply-accumulates (core/graph_cost.h). */
#include "graph_cost.h"

#include <stdlib.h>
#include <string.h>

#include "graph_shapes.h"
#include "op.h"

/* Elements of an initializer that are not exactly zero (-0.0 is zero). */
static int64_t nonzero(const cx_value *v) {
  int64_t n = cx_shape_numel(&v->shape), k = 0;
  if (v->dtype == CX_F32) {
    const float *p = v->init;
    for (int64_t i = 0; i < n; i++) k += p[i] != 0.0f;
  } else {
    for (int64_t i = 0; i < n; i++) k += cx_dtype_load(v->dtype, v->init, (size_t)i) != 0.0;
  }
  return k;
}

static bool is_init(const cx_graph *g, int v) {
  return v >= 0 && g->values[v].kind != CX_VALUE_ACT && g->values[v].kind != CX_VALUE_INPUT &&
         g->values[v].init;
}

/* The initializer value v holds: v itself, or the one a DequantizeLinear producing v reads (an
 * INT8 file's weight); -1 when v is computed. */
static int stored(const cx_graph *g, int v) {
  if (is_init(g, v)) return v;
  int p = v >= 0 ? g->values[v].producer : -1;
  if (p < 0 || strcmp(g->nodes[p].op->name, "DequantizeLinear")) return -1;
  return is_init(g, g->nodes[p].in[0]) ? g->nodes[p].in[0] : -1;
}

/* The node's weight: the operand among its first two that is stored (B before A, as Conv and
 * Gemm put it), or NULL when both are computed. */
static const cx_value *weight(const cx_graph *g, const cx_node *n) {
  for (int k = 1; k >= 0; k--) {
    int v = stored(g, n->in[k]);
    if (v >= 0) return &g->values[v];
  }
  return NULL;
}

int64_t cx_graph_node_params(const cx_graph *g, const cx_node *n) {
  if (!strcmp(n->op->name, "DequantizeLinear") || !strcmp(n->op->name, "QuantizeLinear")) return 0;
  int64_t count = 0;
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k], s = stored(g, v);
    bool repeat = false;
    for (int j = 0; j < k && !repeat; j++) repeat = n->in[j] == v;
    bool quantized = s >= 0 && s != v; /* behind a DequantizeLinear */
    if (!repeat && s >= 0 && (quantized || g->values[s].kind == CX_VALUE_PARAM))
      count += cx_shape_numel(&g->values[s].shape);
  }
  return count;
}

/* Which values are the model's weights (graph_cost.h): parameters that are no quantization
 * scale or zero point, and the initializers DequantizeLinear nodes read. */
static bool *weights_of(const cx_graph *g) {
  bool *w = calloc((size_t)g->n_values + 1, sizeof *w), *qparam = calloc((size_t)g->n_values + 1, 1);
  if (!w || !qparam) return free(w), free(qparam), NULL;
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *n = &g->nodes[i];
    if (strcmp(n->op->name, "DequantizeLinear") && strcmp(n->op->name, "QuantizeLinear")) continue;
    for (int k = 1; k < n->n_in && k < 3; k++)
      if (n->in[k] >= 0) qparam[n->in[k]] = true;
    if (!strcmp(n->op->name, "DequantizeLinear") && is_init(g, n->in[0])) w[n->in[0]] = true;
  }
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].kind == CX_VALUE_PARAM && !qparam[v]) w[v] = true;
  free(qparam);
  return w;
}

int64_t cx_graph_node_macs(const cx_graph *g, const cx_node *n, const cx_shape *one,
                           int64_t *effective) {
  const char *op = n->op->name;
  int64_t macs = 0;
  if (effective) *effective = 0;
  if (n->n_in < 2 || n->n_out < 1 || n->in[0] < 0 || n->in[1] < 0) return 0;
  const cx_shape *a = &one[n->in[0]], *w = &one[n->in[1]], *y = &one[n->out[0]];
  int64_t out = cx_shape_numel(y);
  /* the inference fusions' forms (core/ops/fused.c) count as the op they extend */
  if (!strcmp(op, "ConvFused")) op = "Conv";
  if (!strcmp(op, "GemmFused")) op = "Gemm";
  if (!strcmp(op, "Conv") && w->ndim >= 1 && w->d[0] > 0)
    macs = out * (cx_shape_numel(w) / w->d[0]); /* Cin/group · kernel per output element */
  else if (!strcmp(op, "Gemm") && a->ndim == 2)
    macs = out * a->d[cx_node_int(n, "transA", 0) ? 0 : 1];
  else if (!strcmp(op, "MatMul") && a->ndim >= 1)
    macs = out * a->d[a->ndim - 1];
  if (!effective) return macs;
  *effective = macs;
  /* Each weight element takes part in the same number of MACs (macs / its size: the output
   * pixels of a Conv, the rows of a Gemm), so a zero removes that many. */
  const cx_value *wv = weight(g, n);
  int64_t size = wv ? cx_shape_numel(&wv->shape) : 0;
  if (macs > 0 && size > 0 && macs % size == 0) *effective = macs / size * nonzero(wv);
  return macs;
}

cx_status cx_graph_measure_cost(const cx_graph *g, cx_graph_cost *cost) {
  *cost = (cx_graph_cost){.params = -1, .params_nonzero = -1, .macs = -1, .macs_effective = -1};
  size_t nv = (size_t)g->n_values + 1;
  cx_shape *one = calloc(nv, sizeof *one);
  cx_dtype *dtype = calloc(nv, sizeof *dtype);
  cx_status s = one && dtype ? cx_graph_infer_shapes(g, 1, one, dtype)
                             : cx_fail(CX_ERR_NOMEM, "out of memory");
  int64_t macs = 0, effective = 0;
  for (int i = 0; s == CX_OK && i < g->n_nodes; i++) {
    int64_t e;
    macs += cx_graph_node_macs(g, &g->nodes[i], one, &e);
    effective += e;
  }
  free(one);
  free(dtype);
  if (s != CX_OK) return s;
  bool *w = weights_of(g);
  if (!w) return cx_fail(CX_ERR_NOMEM, "out of memory");
  int64_t params = 0, nz = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (!w[v]) continue;
    params += cx_shape_numel(&g->values[v].shape);
    nz += nonzero(&g->values[v]);
  }
  free(w);
  *cost = (cx_graph_cost){.params = params, .params_nonzero = nz, .macs = macs,
                           .macs_effective = effective};
  return CX_OK;
}
