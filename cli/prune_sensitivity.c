/* Sensitivity (docs/prune.md, "Sensitivity"): each prunable layer pruned alone at 10% ... 90%
 * and evaluated. Magnitude: the layer's weights at that sparsity (the rows are the prunable
 * layers); channel: that fraction of the channels of one channel group (the rows are the
 * unfrozen groups, named by their producer). `compress prune scan` prints it, and `allocate =
 * "sensitivity"` turns it into per-layer channel fractions (cx_channel_allocate).
 *
 * Each point is a graph of its own, compiled and evaluated: a channel-pruned layer has other
 * shapes, so one program cannot serve them. */
#include <stdlib.h>
#include <string.h>

#include "../prune/mask.h"
#include "commands.h"
#include "prune_config.h"

const double cx_cli_sensitivity_levels[CX_CLI_SENSITIVITY_STEPS] = {0.1, 0.2, 0.3, 0.4, 0.5,
                                                                     0.6, 0.7, 0.8, 0.9};

void cx_cli_sensitivity_free(cx_cli_sensitivity *s) {
  for (int i = 0; s->names && i < s->n; i++) free(s->names[i]);
  free(s->names), free(s->top1);
  memset(s, 0, sizeof *s);
}

/* The rows: the prunable layers (magnitude) or the producers of the unfrozen groups (channel). */
static cx_status rows(const cx_graph *g, const cx_prune_config *c, const char *model,
                      cx_cli_sensitivity *s) {
  cx_prune_targets t = {0};
  cx_channel_groups *cg = NULL;
  cx_status st = c->method == CX_PRUNE_CHANNEL ? cx_channel_groups_build(g, NULL, &cg)
                                               : cx_prune_select(g, c, model, &t);
  if (st == CX_OK && cg) st = cx_channel_select(cg, c, NULL);
  int n = cg ? cg->n_groups : t.n;
  if (st == CX_OK && !(s->names = calloc((size_t)n + 1, sizeof *s->names)))
    st = cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = 0; st == CX_OK && i < n; i++) {
    if (cg && (cg->groups[i].frozen || cg->groups[i].producer < 0)) continue;
    const char *name = cg ? g->nodes[cg->groups[i].producer].name : t.t[i].node_name;
    if (!(s->names[s->n++] = strdup(name))) st = cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  if (st == CX_OK && s->n == 0)
    st = cx_fail(CX_ERR_ARG, "prune: %s has no channel group left to prune (all frozen)", model);
  if (st == CX_OK && !(s->top1 = calloc((size_t)s->n * CX_CLI_SENSITIVITY_STEPS,
                                        sizeof *s->top1)))
    st = cx_fail(CX_ERR_NOMEM, "out of memory");
  cx_channel_groups_free(cg);
  cx_prune_targets_free(&t);
  return st;
}

/* The model with only row `name` pruned at level f, evaluated. */
static cx_status point(const cx_graph *g, const cx_prune_config *base, const char *model,
                       const cx_prune_scores *taylor, const cx_cli_eval_data *ev,
                       const char *name, double f, double *top1) {
  cx_prune_config c = *base;
  cx_graph *p = NULL;
  cx_status st;
  if (c.method == CX_PRUNE_CHANNEL) {
    c.ratio_nodes = &name, c.ratios = &f, c.n_ratios = 1;
    st = cx_prune_channels(g, &c, taylor, NULL, &p, NULL);
  } else {
    c.include = &name, c.n_include = 1, c.n_exclude = 0;
    c.scope = CX_PRUNE_LAYER, c.sparsity = f;
    p = cx_graph_clone(g);
    st = p ? cx_prune_mask_graph(p, &c, model) : cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  cx_eval_result r = {0};
  if (st == CX_OK) st = cx_evaluate(p, ev->backend, ev->path, ev->part, ev->pre, 256, &r);
  *top1 = r.top1;
  cx_graph_free(p);
  return st;
}

cx_status cx_cli_sensitivity_scan(const cx_graph *model, const cx_prune_config *c,
                                  const cx_prune_scores *taylor, const char *name,
                                  const cx_cli_eval_data *ev, FILE *log,
                                  cx_cli_sensitivity *out) {
  memset(out, 0, sizeof *out);
  cx_graph *g = cx_graph_clone(model);
  if (!g) return cx_fail(CX_ERR_NOMEM, "out of memory");
  char *old = NULL;
  cx_cli_rename_input(g, &old);
  free(old);
  cx_eval_result r = {0};
  cx_status st = rows(g, c, name, out);
  if (st == CX_OK) st = cx_evaluate(g, ev->backend, ev->path, ev->part, ev->pre, 256, &r);
  out->base = r.top1;
  for (int i = 0; st == CX_OK && i < out->n; i++) {
    for (int k = 0; st == CX_OK && k < CX_CLI_SENSITIVITY_STEPS; k++)
      st = point(g, c, name, taylor, ev, out->names[i], cx_cli_sensitivity_levels[k],
                 &out->top1[i * CX_CLI_SENSITIVITY_STEPS + k]);
    if (st == CX_OK && log) {
      fprintf(log, "prune: sensitivity of %s (%d of %d): top-1 at 50%% %.2f%% (unpruned %.2f%%)\n",
              out->names[i], i + 1, out->n, out->top1[i * CX_CLI_SENSITIVITY_STEPS + 4],
              out->base);
      fflush(log);
    }
  }
  cx_graph_free(g);
  if (st != CX_OK) cx_cli_sensitivity_free(out);
  return st;
}
