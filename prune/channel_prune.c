/* Channel pruning from graph to graph (prune/channel.h): analysis, selection, importance,
 * choice, rewrite, and the numbers before and after. */
#include <stdlib.h>
#include <string.h>

#include "../core/graph_cost.h"
#include "../core/op.h"
#include "channel.h"

static bool is_producer(const cx_node *n) {
  const char *op = n->op->name;
  return !strcmp(op, "Conv") || !strcmp(op, "Gemm") || !strcmp(op, "MatMul");
}

cx_status cx_channel_select(cx_channel_groups *cg, const cx_prune_config *c, FILE *log) {
  const cx_graph *g = cg->g;
  cx_prune_targets t;
  CX_TRY(cx_prune_select(g, c, NULL, &t));
  bool *sel = calloc((size_t)g->n_nodes + 1, sizeof *sel);
  if (!sel) {
    cx_prune_targets_free(&t);
    return cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  for (int k = 0; k < t.n; k++) sel[t.t[k].node] = true;
  cx_prune_targets_free(&t);
  /* a group loses channels only when every producer writing it may */
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *n = &g->nodes[i];
    if (!is_producer(n) || sel[i]) continue;
    int u = cx_channel_unit(cg, n->out[0], 0);
    if (u < 0) continue;
    char why[300];
    snprintf(why, sizeof why, "'%s' is not selected for pruning", n->name);
    cx_channel_group_freeze(cg, cg->unit_group[u], log, why);
  }
  free(sel);
  return CX_OK;
}

static void count(const cx_channel_groups *cg, const bool *keep, cx_prune_channel_stats *st) {
  st->channels_before = cg->n_units, st->groups = cg->n_groups,
  st->nodes_frozen = cg->n_frozen_nodes;
  for (int u = 0; u < cg->n_units; u++) st->channels_after += keep[u];
  for (int k = 0; k < cg->n_groups; k++) {
    const cx_channel_group *gr = &cg->groups[k];
    st->groups_frozen += gr->frozen;
    bool cut = false;
    for (int j = 0; j < gr->n; j++) cut |= !keep[cg->unit_order[gr->first + j]];
    st->groups_pruned += cut;
  }
}

/* The rewrite for keep[] and its numbers (before: g's cost), logged. */
static cx_status finish(const cx_channel_groups *cg, const bool *keep, const cx_graph_cost *before,
                        FILE *log, cx_graph **out, cx_prune_channel_stats *st) {
  cx_graph_cost after;
  CX_TRY(cx_channel_rewrite(cg, keep, out));
  cx_status s = cx_graph_measure_cost(*out, &after);
  if (s != CX_OK) {
    cx_graph_free(*out);
    *out = NULL;
    return s;
  }
  count(cg, keep, st);
  st->macs_before = before->macs, st->macs_after = after.macs;
  st->params_before = before->params, st->params_after = after.params;
  if (log)
    fprintf(log,
            "prune: %lld of %lld channels kept in %d of %d groups pruned (%d frozen); MACs "
            "%lld -> %lld (%.1f%%)\n",
            (long long)st->channels_after, (long long)st->channels_before, st->groups_pruned,
            st->groups, st->groups_frozen, (long long)st->macs_before, (long long)st->macs_after,
            100.0 * (double)st->macs_after / (double)(st->macs_before ? st->macs_before : 1));
  return CX_OK;
}

cx_status cx_prune_channels(const cx_graph *g, const cx_prune_config *c,
                            const cx_prune_scores *taylor, FILE *log, cx_graph **out,
                            cx_prune_channel_stats *st) {
  *out = NULL;
  cx_prune_channel_stats local = {0};
  cx_graph_cost before;
  CX_TRY(cx_graph_measure_cost(g, &before));
  cx_channel_groups *cg = NULL;
  CX_TRY(cx_channel_groups_build(g, log, &cg));
  double *score = malloc(((size_t)cg->n_units + 1) * sizeof *score);
  bool *keep = malloc(((size_t)cg->n_units + 1) * sizeof *keep);
  cx_status s =
      score && keep ? cx_channel_select(cg, c, log) : cx_fail(CX_ERR_NOMEM, "out of memory");
  if (s == CX_OK) s = cx_channel_importance(cg, c->importance, taylor, log, score);
  if (s == CX_OK) s = cx_channel_choose(cg, c, score, keep);
  if (s == CX_OK) s = finish(cg, keep, &before, log, out, &local);
  free(score), free(keep);
  cx_channel_groups_free(cg);
  if (st) *st = local;
  return s;
}

cx_status cx_channel_rewrite_kept(const cx_graph *g, int n_units, const bool *keep, FILE *log,
                                  cx_graph **out, cx_prune_channel_stats *st) {
  *out = NULL;
  cx_prune_channel_stats local = {0};
  cx_graph_cost before;
  CX_TRY(cx_graph_measure_cost(g, &before));
  cx_channel_groups *cg = NULL;
  CX_TRY(cx_channel_groups_build(g, NULL, &cg));
  cx_status s = cg->n_units == n_units
                    ? finish(cg, keep, &before, log, out, &local)
                    : cx_fail(CX_ERR_ARG, "prune: the model has %d channel units, the masks %d: "
                              "not the graph they were made for", cg->n_units, n_units);
  cx_channel_groups_free(cg);
  if (st) *st = local;
  return s;
}
