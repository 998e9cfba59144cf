/* Gradual channel pruning's masks (prune/channel.h, docs/prune.md "Gradual channel pruning"):
 * the channel analysis of the model being trained, the channels kept so far, and the masks
 * that zero a removed channel everywhere the rewrite would cut it — its filters, biases and
 * BatchNorm parameters, and every consumer's weight columns. So the trained, masked model
 * computes exactly what the rewritten smaller one does: a removed channel's value (a constant
 * BatchNorm shift, a sigmoid's 0.5) reaches no kept output, because every weight that reads it
 * is zero. */
#include <stdlib.h>
#include <string.h>

#include "channel.h"

struct cx_channel_masks {
  cx_graph *g; /* a clone of the model: the live weights go into it before importance */
  cx_channel_groups *cg;
  cx_prune_config c;
  uint8_t *keep; /* per unit, 1 kept: the checkpoint state */
  bool *chosen;  /* per unit: this update's choice, then what is kept */
  double *score;
};

static cx_status nomem(void) { return cx_fail(CX_ERR_NOMEM, "out of memory"); }

void cx_channel_masks_free(cx_channel_masks *cm) {
  if (!cm) return;
  cx_channel_groups_free(cm->cg);
  cx_graph_free(cm->g);
  free(cm->keep), free(cm->chosen), free(cm->score);
  free(cm);
}

/* Whether value v already is one of t's first n targets. */
static bool has_target(const cx_prune_targets *t, int v) {
  for (int i = 0; i < t->n; i++)
    if (t->t[i].weight == v) return true;
  return false;
}

static cx_status add_target(cx_prune_targets *t, const cx_graph *g, const cx_channel_edit *e) {
  const cx_value *v = &g->values[e->value];
  cx_prune_target *n = &t->t[t->n];
  *n = (cx_prune_target){.node = e->node, .weight = e->value, .outer = cx_shape_numel(&v->shape),
                         .channels = 1, .inner = 1};
  n->node_name = strdup(g->nodes[e->node].name);
  n->weight_name = strdup(v->name);
  t->n++;
  return n->node_name && n->weight_name ? CX_OK : nomem();
}

/* The masked tensors: every trainable f32 initializer an edit slices (Conv and Gemm weights
 * and biases, BatchNorm scales and shifts). Statistics and constants are not trained: the
 * rewrite slices them, and no kept output reads their removed entries. */
static cx_status make_targets(const cx_channel_groups *cg, cx_prune_targets *t) {
  const cx_graph *g = cg->g;
  t->n = 0;
  if (!(t->t = calloc((size_t)cg->n_edits + 1, sizeof *t->t))) return nomem();
  for (int k = 0; k < cg->n_edits; k++) {
    const cx_channel_edit *e = &cg->edits[k];
    if (e->kind != CX_CHANNEL_SLICE) continue;
    const cx_value *v = &g->values[e->value];
    if (v->kind != CX_VALUE_PARAM || v->dtype != CX_F32 || has_target(t, e->value)) continue;
    CX_TRY(add_target(t, g, e));
  }
  return CX_OK;
}

/* Sensitivity allocation's ratios are per layer, fixed before training: one-shot only. */
static cx_status check_config(const cx_prune_config *c) {
  if (c->n_ratios > 0)
    return cx_fail(CX_ERR_ARG, "prune: per-layer channel ratios (allocate = \"sensitivity\") "
                   "are for one-shot channel pruning (start = end = 0)");
  return CX_OK;
}

cx_status cx_channel_masks_open(const cx_graph *model, const cx_prune_config *c, FILE *log,
                                cx_channel_masks **out, cx_prune_targets *t) {
  *out = NULL;
  *t = (cx_prune_targets){0};
  CX_TRY(check_config(c));
  cx_channel_masks *cm = calloc(1, sizeof *cm);
  if (!cm || !(cm->g = cx_graph_clone(model))) return free(cm), nomem();
  cm->c = *c;
  cx_status s = cx_channel_groups_build(cm->g, log, &cm->cg);
  if (s == CX_OK) s = cx_channel_select(cm->cg, c, log);
  cm->c.include = cm->c.exclude = NULL, cm->c.n_include = cm->c.n_exclude = 0;
  int n = s == CX_OK ? cm->cg->n_units : 0;
  if (s == CX_OK) {
    cm->keep = malloc((size_t)n + 1);
    cm->chosen = malloc(((size_t)n + 1) * sizeof *cm->chosen);
    cm->score = malloc(((size_t)n + 1) * sizeof *cm->score);
    if (!cm->keep || !cm->chosen || !cm->score) s = nomem();
  }
  if (s == CX_OK) memset(cm->keep, 1, (size_t)n), s = make_targets(cm->cg, t);
  if (s != CX_OK) return cx_prune_targets_free(t), cx_channel_masks_free(cm), s;
  *out = cm;
  return CX_OK;
}

cx_tensor cx_channel_masks_state(cx_channel_masks *cm) {
  cx_shape s = {1, {cm->cg->n_units}};
  return cx_tensor_view(CX_U8, &s, cm->keep);
}

/* Zeroes the entries of target value v that an edit along a removed channel cuts. */
static void cut(const cx_channel_masks *cm, const cx_channel_edit *e, uint8_t *mask) {
  const cx_channel_groups *cg = cm->cg;
  const cx_shape *s = &cg->g->values[e->value].shape;
  int64_t outer = 1, inner = 1, n = s->d[e->axis];
  for (int k = 0; k < e->axis; k++) outer *= s->d[k];
  for (int k = e->axis + 1; k < s->ndim; k++) inner *= s->d[k];
  for (int64_t j = 0; j < n; j++) {
    if (cm->keep[cx_channel_unit(cg, e->by, j)]) continue;
    for (int64_t o = 0; o < outer; o++) memset(mask + (o * n + j) * inner, 0, (size_t)inner);
  }
}

static void fill_masks(const cx_channel_masks *cm, const cx_prune_targets *t,
                       uint8_t *const *masks) {
  for (int i = 0; i < t->n; i++) {
    memset(masks[i], 1, (size_t)t->t[i].outer);
    for (int k = 0; k < cm->cg->n_edits; k++) {
      const cx_channel_edit *e = &cm->cg->edits[k];
      if (e->kind == CX_CHANNEL_SLICE && e->value == t->t[i].weight) cut(cm, e, masks[i]);
    }
  }
}

cx_status cx_channel_masks_update(cx_channel_masks *cm, const cx_prune_targets *t,
                                  const float *const *w, double sparsity,
                                  uint8_t *const *masks) {
  const cx_channel_groups *cg = cm->cg;
  for (int i = 0; i < t->n; i++)
    memcpy(cm->g->values[t->t[i].weight].init, w[i], sizeof(float) * (size_t)t->t[i].outer);
  cx_prune_config c = cm->c;
  c.sparsity = sparsity;
  CX_TRY(cx_channel_importance(cg, c.importance, NULL, NULL, cm->score));
  CX_TRY(cx_channel_choose(cg, &c, cm->score, cm->chosen));
  /* a channel once removed stays removed: its weights are zero, and the choice may only add */
  for (int u = 0; u < cg->n_units; u++) cm->keep[u] = cm->keep[u] && cm->chosen[u];
  fill_masks(cm, t, masks);
  return CX_OK;
}

static void kept_units(cx_channel_masks *cm) {
  for (int u = 0; u < cm->cg->n_units; u++) cm->chosen[u] = cm->keep[u] != 0;
}

double cx_channel_masks_macs_kept(cx_channel_masks *cm) {
  kept_units(cm);
  return (double)cx_channel_macs(cm->cg, cm->chosen) / (double)(cm->cg->macs ? cm->cg->macs : 1);
}

cx_status cx_channel_masks_rewrite(cx_channel_masks *cm, const cx_graph *trained, FILE *log,
                                   cx_graph **out, cx_prune_channel_stats *st) {
  kept_units(cm);
  return cx_channel_rewrite_kept(trained, cm->cg->n_units, cm->chosen, log, out, st);
}
