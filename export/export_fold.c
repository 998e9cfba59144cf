/* Folding inference BatchNormalization into the Conv or Gemm before it:
 *   BN(y) = f·y + shift,  f = scale / sqrt(var + eps),  shift = B - mean·f,
 * so W' = f·W (per output channel) and b' = f·b + shift. Computed in double, written in f32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "export_internal.h"

int cx_ex_consumers(const cx_graph *g, int v) {
  int count = 0;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) count += g->nodes[i].in[k] == v;
  for (int k = 0; k < g->n_outputs; k++) count += g->outputs[k] == v;
  return count;
}

/* An f32 initializer of exactly `numel` elements (any shape), else NULL. */
static const float *f32_init(const cx_exporter *ex, int v, int64_t numel) {
  if (v < 0) return NULL;
  const cx_value *x = &ex->g->values[v];
  if (x->kind == CX_VALUE_INPUT || x->kind == CX_VALUE_ACT || x->dtype != CX_F32 ||
      cx_shape_numel(&x->shape) != numel)
    return NULL;
  return cx_ex_value_data(ex, v);
}

/* The per-channel factor and shift of a BN node over c channels; false when it cannot fold. */
static bool bn_affine(const cx_exporter *ex, const cx_node *bn, int64_t c, double *f,
                      double *shift) {
  if (cx_node_int(bn, "training_mode", 0) != 0 || bn->n_in < 5 || bn->n_out != 1) return false;
  const float *p[4];
  for (int k = 0; k < 4; k++)
    if (!(p[k] = f32_init(ex, bn->in[k + 1], c))) return false;
  double eps = cx_node_float(bn, "epsilon", 1e-5f);
  for (int64_t j = 0; j < c; j++) {
    f[j] = p[0][j] / sqrt((double)p[3][j] + eps);
    shift[j] = p[1][j] - p[2][j] * f[j];
  }
  return true;
}

/* Weights only this node reads, so they can be rewritten in place. */
static bool private_init(const cx_exporter *ex, int v) {
  return v >= 0 && ex->g->values[v].init && cx_ex_consumers(ex->g, v) == 1;
}

static cx_status fold_conv(cx_exporter *ex, int conv, const double *f, const double *shift,
                           int64_t c) {
  const cx_node *n = &ex->g->nodes[conv];
  int w = n->in[1], b = n->n_in > 2 ? n->in[2] : -1;
  const cx_value *wv = &ex->g->values[w];
  int64_t per = cx_shape_numel(&wv->shape) / c;
  const float *wd = cx_ex_value_data(ex, w), *bd = b >= 0 ? cx_ex_value_data(ex, b) : NULL;
  float *nw = cx_ex_alloc(ex, sizeof(float) * (size_t)(c * per));
  float *nb = cx_ex_alloc(ex, sizeof(float) * (size_t)c);
  if (!nw || !nb) return cx_ex_nomem();
  for (int64_t j = 0; j < c; j++) {
    for (int64_t i = 0; i < per; i++) nw[j * per + i] = (float)(wd[j * per + i] * f[j]);
    nb[j] = (float)((bd ? bd[j] : 0.0) * f[j] + shift[j]);
  }
  ex->data[w] = nw;
  cx_shape bs = {.ndim = 1, .d = {c}};
  char base[1024];
  snprintf(base, sizeof base, "%s.bias", n->name);
  /* an existing bias only this Conv read keeps its name: the old value is not written */
  const char *name = b >= 0 ? ex->g->values[b].name : cx_ex_unique_name(ex, base);
  ex->fold[conv].bias = name ? cx_ex_add_init(ex, name, CX_F32, &bs, nb) : NULL;
  return ex->fold[conv].bias ? CX_OK : cx_ex_nomem();
}

/* Gemm: Y = alpha·A·B + beta·C, channel j is column j of Y. B's column j scales by f[j]; the new
 * C (written with beta = 1) is f·beta·C + shift. */
static cx_status fold_gemm(cx_exporter *ex, int gemm, const double *f, const double *shift,
                           int64_t c) {
  const cx_node *n = &ex->g->nodes[gemm];
  int w = n->in[1], cv = n->n_in > 2 ? n->in[2] : -1;
  bool trans_b = cx_node_int(n, "transB", 0) != 0;
  int64_t k_dim = cx_shape_numel(&ex->g->values[w].shape) / c;
  double beta = cx_node_float(n, "beta", 1.0f);
  const float *wd = cx_ex_value_data(ex, w), *cd = NULL;
  if (cv >= 0) cd = f32_init(ex, cv, c) ? f32_init(ex, cv, c) : f32_init(ex, cv, 1);
  int64_t c_step = cv >= 0 && cx_shape_numel(&ex->g->values[cv].shape) == c ? 1 : 0;
  float *nw = cx_ex_alloc(ex, sizeof(float) * (size_t)(c * k_dim));
  float *nc = cx_ex_alloc(ex, sizeof(float) * (size_t)c);
  if (!nw || !nc) return cx_ex_nomem();
  for (int64_t i = 0; i < k_dim; i++)
    for (int64_t j = 0; j < c; j++) {
      int64_t at = trans_b ? j * k_dim + i : i * c + j;
      nw[at] = (float)(wd[at] * f[j]);
    }
  for (int64_t j = 0; j < c; j++)
    nc[j] = (float)((cd ? cd[j * c_step] * beta : 0.0) * f[j] + shift[j]);
  ex->data[w] = nw;
  cx_shape cs = {.ndim = 1, .d = {c}};
  char base[1024];
  snprintf(base, sizeof base, "%s.bias", n->name);
  const char *name = cv >= 0 ? ex->g->values[cv].name : cx_ex_unique_name(ex, base);
  ex->fold[gemm].bias = name ? cx_ex_add_init(ex, name, CX_F32, &cs, nc) : NULL;
  ex->fold[gemm].unit_beta = true;
  return ex->fold[gemm].bias ? CX_OK : cx_ex_nomem();
}

/* The channel count of a Conv/Gemm node whose weights can be folded into; 0 when not. */
static int64_t foldable_channels(const cx_exporter *ex, const cx_node *n) {
  bool conv = !strcmp(n->op->name, "Conv"), gemm = !strcmp(n->op->name, "Gemm");
  if ((!conv && !gemm) || n->n_in < 2 || !private_init(ex, n->in[1])) return 0;
  int b = n->n_in > 2 ? n->in[2] : -1;
  if (b >= 0 && !private_init(ex, b)) return 0;
  const cx_value *w = &ex->g->values[n->in[1]];
  if (w->dtype != CX_F32 || w->shape.ndim < 2) return 0;
  if (conv) return w->shape.d[0];
  int64_t c = w->shape.d[cx_node_int(n, "transB", 0) ? 0 : 1];
  if (b >= 0 && !f32_init(ex, b, c) && !f32_init(ex, b, 1)) return 0; /* a [M,N] C */
  return w->shape.ndim == 2 ? c : 0; /* transA does not matter: Y's columns are B's */
}

cx_status cx_ex_fold_bn(cx_exporter *ex) {
  const cx_graph *g = ex->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *bn = &g->nodes[i];
    if (strcmp(bn->op->name, "BatchNormalization") || bn->n_in < 1) continue;
    int y = bn->in[0], p = g->values[y].producer;
    if (p < 0 || ex->skip[p] || ex->fold[p].bias || cx_ex_consumers(g, y) != 1) continue;
    int64_t c = foldable_channels(ex, &g->nodes[p]);
    if (c <= 0 || ex->shape[0][y].ndim < 2 || ex->shape[0][y].d[1] != c) continue;
    double *f = malloc(sizeof(double) * (size_t)c), *shift = malloc(sizeof(double) * (size_t)c);
    cx_status s = f && shift ? CX_OK : cx_ex_nomem();
    if (s == CX_OK && bn_affine(ex, bn, c, f, shift)) {
      bool conv = !strcmp(g->nodes[p].op->name, "Conv");
      s = conv ? fold_conv(ex, p, f, shift, c) : fold_gemm(ex, p, f, shift, c);
      if (s == CX_OK) {
        ex->skip[i] = true;
        ex->name[y] = g->values[bn->out[0]].name; /* the Conv now writes the BN's output */
        ex->n_folded++;
      }
    }
    free(f);
    free(shift);
    CX_TRY(s);
  }
  return CX_OK;
}
