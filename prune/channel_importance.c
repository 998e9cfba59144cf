/* How important each channel unit is (prune/channel.h): norms of the filters that write it, its
 * BatchNorms' |gamma|, or accumulated Taylor scores. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "channel.h"

static bool is_producer(const cx_node *n) {
  const char *op = n->op->name;
  return !strcmp(op, "Conv") || !strcmp(op, "Gemm") || !strcmp(op, "MatMul");
}

static const float *taylor_of(const cx_prune_scores *t, const cx_value *w) {
  for (int k = 0; t && k < t->n; k++)
    if (!strcmp(t->names[k], w->name)) return t->values[k];
  return NULL;
}

/* Adds, for each output channel of producer n, the filter's L1 or L2 norm or its Taylor sum. */
static cx_status add_filters(const cx_channel_groups *cg, const cx_node *n, cx_prune_importance imp,
                             const cx_prune_scores *taylor, double *score) {
  const cx_graph *g = cg->g;
  int y = n->out[0], w = n->in[1];
  int64_t cout = cg->channels[y];
  if (cout == 0 || w < 0 || !g->values[w].init || g->values[w].dtype != CX_F32) return CX_OK;
  const cx_value *wv = &g->values[w];
  int64_t size = cx_shape_numel(&wv->shape);
  if (size % cout) return CX_OK; /* not a per-channel weight: the analysis froze it */
  /* Conv and transB Gemm rows are contiguous; a [K, M] weight's filter is column k. */
  bool rows = !strcmp(n->op->name, "Conv") || cx_node_int(n, "transB", 0);
  int64_t len = size / cout, step = rows ? 1 : cout;
  const float *data = wv->init, *t = NULL;
  if (imp == CX_IMPORTANCE_TAYLOR) {
    t = taylor_of(taylor, wv);
    if (!t)
      return cx_fail(CX_ERR_ARG, "prune: no Taylor scores for '%s' (node '%s')", wv->name, n->name);
  }
  for (int64_t k = 0; k < cout; k++) {
    int64_t base = rows ? k * len : k;
    double sum = 0;
    for (int64_t j = 0; j < len; j++) {
      int64_t at = base + j * step;
      double x = data[at];
      sum += t ? t[at] : imp == CX_IMPORTANCE_L2 ? x * x : fabs(x);
    }
    score[cx_channel_unit(cg, y, k)] += imp == CX_IMPORTANCE_L2 ? sqrt(sum) : sum;
  }
  return CX_OK;
}

/* |gamma| of every BatchNormalization; marks the groups that have one. */
static void add_bn(const cx_channel_groups *cg, double *score, bool *has_bn) {
  const cx_graph *g = cg->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *n = &g->nodes[i];
    if (strcmp(n->op->name, "BatchNormalization") || n->n_in < 2) continue;
    int x = n->in[0], gm = n->in[1];
    if (!g->values[gm].init || g->values[gm].dtype != CX_F32 ||
        cx_shape_numel(&g->values[gm].shape) != cg->channels[x])
      continue;
    const float *gamma = g->values[gm].init;
    for (int64_t k = 0; k < cg->channels[x]; k++) {
      int u = cx_channel_unit(cg, x, k);
      score[u] += fabsf(gamma[k]);
      has_bn[cg->unit_group[u]] = true;
    }
  }
}

cx_status cx_channel_importance(const cx_channel_groups *cg, cx_prune_importance importance,
                                const cx_prune_scores *taylor, FILE *log, double *score) {
  const cx_graph *g = cg->g;
  if (importance == CX_IMPORTANCE_TAYLOR && !taylor)
    return cx_fail(CX_ERR_ARG, "prune: importance \"taylor\" needs accumulated scores");
  for (int u = 0; u < cg->n_units; u++) score[u] = 0;
  bool bn = importance == CX_IMPORTANCE_BN;
  for (int i = 0; !bn && i < g->n_nodes; i++)
    if (is_producer(&g->nodes[i])) CX_TRY(add_filters(cg, &g->nodes[i], importance, taylor, score));
  if (bn) {
    bool *has_bn = calloc((size_t)cg->n_groups + 1, sizeof *has_bn);
    double *l1 = calloc((size_t)cg->n_units + 1, sizeof *l1);
    if (!has_bn || !l1) {
      free(has_bn), free(l1);
      return cx_fail(CX_ERR_NOMEM, "out of memory");
    }
    add_bn(cg, score, has_bn);
    cx_status s = CX_OK;
    for (int i = 0; s == CX_OK && i < g->n_nodes; i++)
      if (is_producer(&g->nodes[i])) s = add_filters(cg, &g->nodes[i], CX_IMPORTANCE_L1, NULL, l1);
    /* a group without a BatchNorm (folded into its conv by the exporter) is ranked by L1;
     * the global ranking normalises per group, so the two scales never meet */
    for (int k = 0; s == CX_OK && k < cg->n_groups; k++) {
      const cx_channel_group *gr = &cg->groups[k];
      if (has_bn[k] || gr->frozen) continue;
      for (int j = 0; j < gr->n; j++)
        score[cg->unit_order[gr->first + j]] = l1[cg->unit_order[gr->first + j]];
      if (log)
        fprintf(log,
                "prune: the channels written by '%s' have no BatchNormalization: ranked by L1\n",
                gr->producer >= 0 ? g->nodes[gr->producer].name : "?");
    }
    free(has_bn), free(l1);
    CX_TRY(s);
  }
  for (int u = 0; u < cg->n_units; u++)
    if (cg->groups[cg->unit_group[u]].frozen) score[u] = 0;
  return CX_OK;
}
