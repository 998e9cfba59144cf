/* cx_graph_fold_bn: BatchNormalization folded into the Conv or Gemm before it, on a clone. */
#include "graph_fold_bn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"

/* How many nodes read value v (a node reading it twice counts twice), plus graph outputs. */
static int consumers(const cx_graph *g, int v) {
  int count = 0;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) count += g->nodes[i].in[k] == v;
  for (int k = 0; k < g->n_outputs; k++) count += g->outputs[k] == v;
  return count;
}

static bool is_init(const cx_value *x) {
  return (x->kind == CX_VALUE_PARAM || x->kind == CX_VALUE_STATE || x->kind == CX_VALUE_CONST) &&
         x->init;
}

/* An f32 initializer of exactly `numel` elements (any shape), else NULL. */
static const float *f32_init(const cx_graph *g, int v, int64_t numel) {
  if (v < 0) return NULL;
  const cx_value *x = &g->values[v];
  if (!is_init(x) || x->dtype != CX_F32 || cx_shape_numel(&x->shape) != numel) return NULL;
  return x->init;
}

/* Weights only this node reads, so they can be rewritten in place. */
static bool private_init(const cx_graph *g, int v) {
  return v >= 0 && is_init(&g->values[v]) && consumers(g, v) == 1;
}

/* The per-channel factor and shift of a BN node over c channels; false when it cannot fold.
 * With `constant`, a channel whose running variance is below 1e-6·eps folds to its constant B
 * (f = 0): its input varied by under 1e-3·sqrt(eps) in training, so the exact factor, about
 * scale/sqrt(eps), only amplifies a signal that was not there (a dead input, typically). */
static bool bn_affine(const cx_graph *g, const cx_node *bn, int64_t c, bool constant, double *f,
                      double *shift) {
  if (cx_node_int(bn, "training_mode", 0) != 0 || bn->n_in < 5 || bn->n_out != 1) return false;
  const float *p[4];
  for (int k = 0; k < 4; k++)
    if (!(p[k] = f32_init(g, bn->in[k + 1], c))) return false;
  double eps = cx_node_float(bn, "epsilon", 1e-5f);
  for (int64_t j = 0; j < c; j++) {
    f[j] = constant && p[3][j] < 1e-6 * eps ? 0.0 : p[0][j] / sqrt((double)p[3][j] + eps);
    shift[j] = p[1][j] - p[2][j] * f[j];
  }
  return true;
}

/* The channel count of a Conv/Gemm node whose weights can be folded into; 0 when not. */
static int64_t foldable_channels(const cx_graph *g, const cx_node *n) {
  bool conv = !strcmp(n->op->name, "Conv"), gemm = !strcmp(n->op->name, "Gemm");
  if ((!conv && !gemm) || n->n_in < 2 || n->n_out != 1 || !private_init(g, n->in[1])) return 0;
  int b = n->n_in > 2 ? n->in[2] : -1;
  if (b >= 0 && !private_init(g, b)) return 0;
  const cx_value *w = &g->values[n->in[1]];
  if (w->dtype != CX_F32 || w->shape.ndim < 2) return 0;
  if (conv) return b >= 0 && !f32_init(g, b, w->shape.d[0]) ? 0 : w->shape.d[0];
  if (w->shape.ndim != 2) return 0;
  int64_t c = w->shape.d[cx_node_int(n, "transB", 0) ? 0 : 1];
  if (b >= 0 && !f32_init(g, b, c) && !f32_init(g, b, 1)) return 0; /* a [M,N] C */
  return c; /* transA does not matter: Y's columns are B's */
}

/* Node `node`'s bias input (slot 2) holds c new values: rewritten in place when it has one (only
 * it reads it), else a new initializer of the weight's kind. */
static cx_status set_bias(cx_graph *g, int node, const float *b, int64_t c) {
  cx_node *n = &g->nodes[node];
  cx_shape s = {.ndim = 1, .d = {c}};
  if (n->n_in > 2 && n->in[2] >= 0) {
    cx_value *v = &g->values[n->in[2]];
    float *p = malloc(sizeof(float) * (size_t)c);
    if (!p) return cx_fail(CX_ERR_NOMEM, "BatchNormalization folding: out of memory");
    memcpy(p, b, sizeof(float) * (size_t)c);
    free(v->init);
    v->init = p;
    v->shape = s;
    return CX_OK;
  }
  char base[1024];
  snprintf(base, sizeof base, "%s.bias", n->name);
  char *name = cx_graph_unique_name(g, base);
  int *in = realloc(n->in, sizeof(int) * 3);
  if (!name || !in) {
    free(name);
    return cx_fail(CX_ERR_NOMEM, "BatchNormalization folding: out of memory");
  }
  n->in = in;
  int v = cx_graph_init(g, g->values[n->in[1]].kind, name, CX_F32, &s, b);
  free(name);
  CX_TRY(cx_graph_status(g));
  n = &g->nodes[node]; /* cx_graph_init may move the value array, never the nodes */
  n->in[2] = v;
  n->n_in = 3;
  return CX_OK;
}

/* Conv: W [C, ...] scales by f per output channel. Gemm: Y = alpha·A·B + beta·C, channel j is
 * column j of Y: B's column j scales by f[j], and the new C (written with beta = 1) is
 * f·beta·C + shift. */
static cx_status fold_into(cx_graph *g, int node, const double *f, const double *shift,
                           int64_t c, float *nb) {
  cx_node *n = &g->nodes[node];
  bool gemm = !strcmp(n->op->name, "Gemm"), trans_b = cx_node_int(n, "transB", 0) != 0;
  float *w = g->values[n->in[1]].init;
  int64_t per = cx_shape_numel(&g->values[n->in[1]].shape) / c;
  for (int64_t j = 0; j < c; j++)
    for (int64_t i = 0; i < per; i++) {
      int64_t at = !gemm || trans_b ? j * per + i : i * c + j;
      w[at] = (float)(w[at] * f[j]);
    }
  int b = n->n_in > 2 ? n->in[2] : -1;
  const float *old = b >= 0 ? g->values[b].init : NULL;
  bool scalar = b >= 0 && cx_shape_numel(&g->values[b].shape) == 1 && c != 1;
  double beta = gemm ? cx_node_float(n, "beta", 1.0f) : 1.0;
  for (int64_t j = 0; j < c; j++)
    nb[j] = (float)((old ? old[scalar ? 0 : j] * beta : 0.0) * f[j] + shift[j]);
  CX_TRY(set_bias(g, node, nb, c));
  if (gemm) cx_node_set_float(g, node, "beta", 1.0f);
  return cx_graph_status(g);
}

/* Folds BN node i when it can; *done tells whether it did. */
static cx_status fold_one(cx_graph *g, int i, bool constant, bool *done) {
  *done = false;
  const cx_node *bn = &g->nodes[i];
  if (strcmp(bn->op->name, "BatchNormalization") || bn->n_in < 1 || bn->in[0] < 0) return CX_OK;
  int y = bn->in[0], p = g->values[y].producer;
  if (p < 0 || consumers(g, y) != 1) return CX_OK;
  int64_t c = foldable_channels(g, &g->nodes[p]);
  if (c <= 0) return CX_OK;
  double *f = malloc(sizeof(double) * (size_t)c), *shift = malloc(sizeof(double) * (size_t)c);
  float *nb = malloc(sizeof(float) * (size_t)c);
  cx_status s = f && shift && nb ? CX_OK
                                 : cx_fail(CX_ERR_NOMEM, "BatchNormalization folding: out of memory");
  if (s == CX_OK && bn_affine(g, bn, c, constant, f, shift)) {
    s = fold_into(g, p, f, shift, c, nb);
    if (s == CX_OK) { /* the weighted op now writes the BN's output */
      int out = g->nodes[i].out[0];
      g->nodes[p].out[0] = out;
      g->values[out].producer = p;
      g->values[y].producer = -1;
      *done = true;
    }
  }
  free(f);
  free(shift);
  free(nb);
  return s;
}

/* A folded BN reads nothing any more, so later consumer counts ignore it; its parameters that
 * nothing else reads become unproduced, unread activations, which cx_graph_remove_nodes deletes
 * with their bytes (the one way values leave a graph). */
static void drop_bn_inputs(cx_graph *g, int i) {
  cx_node *bn = &g->nodes[i];
  int n_in = bn->n_in;
  bn->n_in = 0;
  for (int k = 1; k < n_in; k++) {
    int v = bn->in[k];
    if (v >= 0 && consumers(g, v) == 0) g->values[v].kind = CX_VALUE_ACT;
  }
}

static cx_status fold_all(cx_graph *g, bool constant, int *n_folded) {
  bool *dead = calloc((size_t)g->n_nodes + 1, sizeof(bool));
  if (!dead) return cx_fail(CX_ERR_NOMEM, "BatchNormalization folding: out of memory");
  cx_status s = CX_OK;
  int count = 0;
  for (int i = 0; s == CX_OK && i < g->n_nodes; i++) {
    s = fold_one(g, i, constant, &dead[i]);
    if (dead[i]) {
      drop_bn_inputs(g, i);
      count++;
    }
  }
  if (s == CX_OK && count) s = cx_graph_remove_nodes(g, dead);
  free(dead);
  if (n_folded) *n_folded = count;
  return s;
}

cx_status cx_graph_fold_bn(const cx_graph *g, bool constant_channels, cx_graph **out,
                           int *n_folded) {
  *out = NULL;
  if (n_folded) *n_folded = 0;
  CX_TRY(cx_graph_validate(g));
  cx_graph *c = cx_graph_clone(g);
  if (!c) return cx_fail(CX_ERR_NOMEM, "BatchNormalization folding: out of memory cloning the graph");
  cx_status s = fold_all(c, constant_channels, n_folded);
  if (s != CX_OK) {
    cx_graph_free(c);
    return s;
  }
  *out = c;
  return CX_OK;
}
