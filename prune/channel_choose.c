/* Which channel units to remove for a MAC target (prune/channel.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "channel.h"

/* MACs of the graph given the kept channels of every value: each Conv, Gemm and MatMul costs
 * its dense MACs times the fraction of output channels kept, times the fraction of input
 * channels kept unless it is grouped (a grouped conv loses whole groups, so its input width
 * per group stays). Exact: dense MACs are out·(Cin/group)·kernel. */
static int64_t macs_of(const cx_channel_groups *cg, const int64_t *kept) {
  const cx_graph *g = cg->g;
  int64_t total = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    int64_t m = cg->node_macs[i];
    if (m == 0) continue;
    const cx_node *n = &g->nodes[i];
    int x = n->in[0], y = n->out[0];
    int64_t cy = cg->channels[y], cx = cg->channels[x];
    if (cy > 0) m = m / cy * kept[y];
    if (cx > 0 && cx_node_int(n, "group", 1) == 1) m = m / cx * kept[x];
    total += m;
  }
  return total;
}

static void kept_of(const cx_channel_groups *cg, const bool *keep, int64_t *kept) {
  for (int v = 0; v < cg->g->n_values; v++) {
    kept[v] = 0;
    for (int64_t k = 0; k < cg->channels[v]; k++)
      kept[v] += keep[cg->elem_unit[cg->elem_start[v] + k]];
  }
}

int64_t cx_channel_macs(const cx_channel_groups *cg, const bool *keep) {
  int64_t *kept = malloc(((size_t)cg->g->n_values + 1) * sizeof *kept);
  if (!kept) return -1;
  kept_of(cg, keep, kept);
  int64_t m = macs_of(cg, kept);
  free(kept);
  return m;
}

/* ---- ranking ---- */

static const double *sort_score;
static int by_score(const void *a, const void *b) {
  double x = sort_score[*(const int *)a], y = sort_score[*(const int *)b];
  if (x != y) return x < y ? -1 : 1;
  return *(const int *)a - *(const int *)b; /* stable: the lower channel first */
}

typedef struct chooser {
  const cx_channel_groups *cg;
  int round, *order;      /* units of each group, least important first (group's slice) */
  double *norm;           /* score / the group's mean */
  int *left;              /* per group: units kept */
  int64_t *kept;          /* per value */
  bool *may_empty;        /* per group: every activation it occupies has channels of other groups */
  int64_t *unit_elems_at; /* CSR: the elements of each unit */
  int *unit_elems;
  int *elem_value;
} chooser;

/* The kept count a pruned group steps down to from `left`: a multiple of round, and 0 only
 * where the group is a part of the activations it occupies (a Concat input, one group of a
 * grouped convolution: `may_empty`); -1 when there is none. */
static int next_left(const chooser *ch, int k, int left) {
  int r = ch->round, n = ch->cg->groups[k].n, min = ch->may_empty[k] ? 0 : r < n ? r : n;
  int next = left % r ? left - left % r : left - r;
  return next >= min && (next >= 1 || ch->may_empty[k]) ? next : -1;
}

static void remove_unit(chooser *ch, int u) {
  for (int64_t j = ch->unit_elems_at[u]; j < ch->unit_elems_at[u + 1]; j++)
    ch->kept[ch->elem_value[ch->unit_elems[j]]]--;
}

static void restore_unit(chooser *ch, int u) {
  for (int64_t j = ch->unit_elems_at[u]; j < ch->unit_elems_at[u + 1]; j++)
    ch->kept[ch->elem_value[ch->unit_elems[j]]]++;
}

/* Whether removing the group's units [from, to) left an activation without channels. */
static bool emptied(const chooser *ch, const cx_channel_group *gr, int from, int to) {
  for (int j = from; j < to; j++) {
    int u = ch->order[gr->first + j];
    for (int64_t e = ch->unit_elems_at[u]; e < ch->unit_elems_at[u + 1]; e++)
      if (ch->kept[ch->elem_value[ch->unit_elems[e]]] == 0) return true;
  }
  return false;
}

static cx_status chooser_init(chooser *ch, const cx_channel_groups *cg, const cx_prune_config *c,
                              const double *score) {
  *ch = (chooser){.cg = cg, .round = c->round_to > 1 ? c->round_to : 1};
  size_t nu = (size_t)cg->n_units + 1, ne = (size_t)cg->n_elems + 1;
  ch->order = malloc(nu * sizeof(int));
  ch->norm = malloc(nu * sizeof(double));
  ch->left = malloc(((size_t)cg->n_groups + 1) * sizeof(int));
  ch->kept = malloc(((size_t)cg->g->n_values + 1) * sizeof(int64_t));
  ch->unit_elems_at = calloc(nu + 1, sizeof(int64_t));
  ch->unit_elems = malloc(ne * sizeof(int));
  ch->elem_value = malloc(ne * sizeof(int));
  ch->may_empty = calloc((size_t)cg->n_groups + 1, sizeof(bool));
  if (!ch->may_empty || !ch->order || !ch->norm || !ch->left || !ch->kept || !ch->unit_elems_at ||
      !ch->unit_elems || !ch->elem_value)
    return cx_fail(CX_ERR_NOMEM, "out of memory");
  memcpy(ch->order, cg->unit_order, (size_t)cg->n_units * sizeof(int));
  sort_score = score;
  for (int k = 0; k < cg->n_groups; k++) {
    const cx_channel_group *gr = &cg->groups[k];
    qsort(ch->order + gr->first, (size_t)gr->n, sizeof(int), by_score);
    double mean = 0;
    for (int j = 0; j < gr->n; j++) mean += score[ch->order[gr->first + j]];
    mean /= gr->n;
    for (int j = 0; j < gr->n; j++) {
      int u = ch->order[gr->first + j];
      ch->norm[u] = mean > 0 ? score[u] / mean : 0;
    }
    ch->left[k] = gr->n;
  }
  for (int v = 0; v < cg->g->n_values; v++)
    for (int64_t k = 0; k < cg->channels[v]; k++) {
      ch->elem_value[cg->elem_start[v] + k] = v;
      ch->unit_elems_at[cg->elem_unit[cg->elem_start[v] + k] + 1]++;
    }
  for (int u = 0; u < cg->n_units; u++) ch->unit_elems_at[u + 1] += ch->unit_elems_at[u];
  int64_t *fill = calloc(nu, sizeof *fill);
  if (!fill) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int64_t e = 0; e < cg->n_elems; e++) {
    int u = cg->elem_unit[e];
    ch->unit_elems[ch->unit_elems_at[u] + fill[u]++] = (int)e;
  }
  free(fill);
  /* a group may go entirely when no activation would be left without channels */
  for (int k = 0; k < cg->n_groups; k++) ch->may_empty[k] = true;
  for (int v = 0; v < cg->g->n_values; v++) {
    int64_t c = cg->channels[v];
    if (c == 0) continue;
    int first = cg->unit_group[cg->elem_unit[cg->elem_start[v]]];
    bool one = true;
    for (int64_t k = 1; k < c && one; k++)
      one = cg->unit_group[cg->elem_unit[cg->elem_start[v] + k]] == first;
    if (one) ch->may_empty[first] = false;
  }
  return CX_OK;
}

static void chooser_free(chooser *ch) {
  free(ch->order), free(ch->norm), free(ch->left), free(ch->kept), free(ch->unit_elems_at);
  free(ch->unit_elems), free(ch->elem_value), free(ch->may_empty);
}

/* Global: repeatedly takes the step (one unit, or down to the next multiple of round_to) whose
 * units have the lowest mean normalised score, over all groups. */
static cx_status choose_global(chooser *ch, int64_t target, bool *keep) {
  const cx_channel_groups *cg = ch->cg;
  for (int u = 0; u < cg->n_units; u++) keep[u] = true;
  kept_of(cg, keep, ch->kept);
  int64_t macs = macs_of(cg, ch->kept);
  while (macs > target) {
    int best = -1, best_next = 0;
    double best_score = INFINITY;
    for (int k = 0; k < cg->n_groups; k++) {
      const cx_channel_group *gr = &cg->groups[k];
      int next = gr->frozen ? -1 : next_left(ch, k, ch->left[k]);
      if (next < 0) continue;
      double s = 0;
      for (int j = gr->n - ch->left[k]; j < gr->n - next; j++)
        s += ch->norm[ch->order[gr->first + j]];
      s /= ch->left[k] - next;
      if (s < best_score) best = k, best_next = next, best_score = s;
    }
    if (best < 0) break;
    const cx_channel_group *gr = &cg->groups[best];
    int from = gr->n - ch->left[best], to = gr->n - best_next;
    for (int j = from; j < to; j++) remove_unit(ch, ch->order[gr->first + j]);
    if (best_next == 0 && emptied(ch, gr, from, to)) {
      /* the other groups of an activation went first: this one keeps what it has */
      for (int j = from; j < to; j++) restore_unit(ch, ch->order[gr->first + j]);
      ch->may_empty[best] = false;
      continue;
    }
    for (int j = from; j < to; j++) keep[ch->order[gr->first + j]] = false;
    ch->left[best] = best_next;
    macs = macs_of(cg, ch->kept);
  }
  if (macs <= target) return CX_OK;
  return cx_fail(CX_ERR_ARG,
                 "prune: sparsity cannot be reached: removing every prunable channel "
                 "leaves %.1f%% of the %lld MACs (the rest are frozen or kept by round_to)",
                 100.0 * (double)macs / (double)cg->macs, (long long)cg->macs);
}

/* Group k's `f` least important units removed (its kept count rounded up to round_to, at least
 * one and round_to); a frozen group keeps them all. */
static void group_keep(chooser *ch, int k, double f, bool *keep) {
  const cx_channel_group *gr = &ch->cg->groups[k];
  if (gr->frozen) return;
  int r = ch->round, min = r < gr->n ? r : gr->n;
  int left = gr->n - (int)floor(f * gr->n);
  left = (left + r - 1) / r * r;
  if (left > gr->n) left = gr->n;
  if (left < min) left = min;
  if (left < 1) left = 1;
  for (int j = 0; j < gr->n - left; j++) keep[ch->order[gr->first + j]] = false;
}

/* Layer: every pruned group keeps the same fraction (rounded), its least important units
 * removed; the fraction is the smallest (bisection) that meets the target. */
static void layer_keep(chooser *ch, double f, bool *keep) {
  const cx_channel_groups *cg = ch->cg;
  for (int u = 0; u < cg->n_units; u++) keep[u] = true;
  for (int k = 0; k < cg->n_groups; k++) group_keep(ch, k, f, keep);
}

/* Fixed fractions (c->ratios) for the groups their producers name. */
static cx_status choose_ratios(chooser *ch, const cx_prune_config *c, bool *keep) {
  const cx_channel_groups *cg = ch->cg;
  for (int u = 0; u < cg->n_units; u++) keep[u] = true;
  for (int i = 0; i < c->n_ratios; i++) {
    int found = -1;
    for (int k = 0; k < cg->n_groups && found < 0; k++) {
      int p = cg->groups[k].producer;
      if (!cg->groups[k].frozen && p >= 0 && !strcmp(cg->g->nodes[p].name, c->ratio_nodes[i]))
        found = k;
    }
    if (found < 0)
      return cx_fail(CX_ERR_ARG, "prune: no prunable channel group is written by node '%s' "
                     "(a per-layer ratio names the producer of an unfrozen group)",
                     c->ratio_nodes[i]);
    group_keep(ch, found, c->ratios[i], keep);
  }
  return CX_OK;
}

static cx_status choose_layer(chooser *ch, int64_t target, bool *keep) {
  const cx_channel_groups *cg = ch->cg;
  layer_keep(ch, 1, keep);
  kept_of(cg, keep, ch->kept);
  int64_t most = macs_of(cg, ch->kept);
  if (most > target)
    return cx_fail(CX_ERR_ARG,
                   "prune: sparsity cannot be reached: pruning every layer to its "
                   "minimum leaves %.1f%% of the %lld MACs",
                   100.0 * (double)most / (double)cg->macs, (long long)cg->macs);
  double lo = 0, hi = 1;
  for (int it = 0; it < 40; it++) {
    double mid = (lo + hi) / 2;
    layer_keep(ch, mid, keep);
    kept_of(cg, keep, ch->kept);
    if (macs_of(cg, ch->kept) <= target)
      hi = mid;
    else
      lo = mid;
  }
  layer_keep(ch, hi, keep);
  return CX_OK;
}

cx_status cx_channel_choose(const cx_channel_groups *cg, const cx_prune_config *c,
                            const double *score, bool *keep) {
  if (!(c->sparsity >= 0 && c->sparsity < 1))
    return cx_fail(CX_ERR_ARG, "prune: sparsity must be in [0, 1), got %g", c->sparsity);
  int64_t target = (int64_t)floor((1 - c->sparsity) * (double)cg->macs);
  chooser ch;
  cx_status s = chooser_init(&ch, cg, c, score);
  if (s == CX_OK)
    s = c->n_ratios > 0             ? choose_ratios(&ch, c, keep)
        : c->scope == CX_PRUNE_LAYER ? choose_layer(&ch, target, keep)
                                     : choose_global(&ch, target, keep);
  chooser_free(&ch);
  return s;
}
