/* The prune stage's configuration: defaults and the checks every entry point runs first. */
#include <math.h>
#include <stddef.h>

#include "prune.h"

cx_prune_config cx_prune_defaults(void) {
  return (cx_prune_config){.method = CX_PRUNE_MAGNITUDE, .sparsity = 0.5, .scope = CX_PRUNE_GLOBAL,
                           .importance = CX_IMPORTANCE_L1, .n = 2, .m = 4, .every = 1};
}

static cx_status check_globs(const char *key, const char *const *globs, int n) {
  if (n < 0 || (n > 0 && !globs))
    return cx_fail(CX_ERR_ARG, "prune: %s: %d globs and no list of them", key, n);
  for (int i = 0; i < n; i++)
    if (!globs[i] || !globs[i][0])
      return cx_fail(CX_ERR_ARG, "prune: %s: entry %d is empty; expected a node-name glob", key,
                     i + 1);
  return CX_OK;
}

static cx_status check_schedule(const cx_prune_config *c) {
  if (c->start < 0) return cx_fail(CX_ERR_ARG, "prune: start %lld < 0", (long long)c->start);
  if (c->end < c->start)
    return cx_fail(CX_ERR_ARG, "prune: end %lld is before start %lld (start = end: one-shot)",
                   (long long)c->end, (long long)c->start);
  if (c->every < 1)
    return cx_fail(CX_ERR_ARG, "prune: every %lld must be >= 1 (steps between pruning steps)",
                   (long long)c->every);
  /* masks only grow: a weight once pruned is zero, so it stays the smallest */
  if (!(c->initial_sparsity >= 0 && c->initial_sparsity <= c->sparsity))
    return cx_fail(CX_ERR_ARG, "prune: initial_sparsity %g must be in [0, sparsity = %g]",
                   c->initial_sparsity, c->sparsity);
  return CX_OK;
}

/* Magnitude and N:M rank single weights by |w|; the filter criteria are channel pruning's. */
static cx_status check_method(const cx_prune_config *c) {
  if (c->method != CX_PRUNE_MAGNITUDE && c->method != CX_PRUNE_NM && c->method != CX_PRUNE_CHANNEL)
    return cx_fail(CX_ERR_ARG, "prune: unknown method %d", (int)c->method);
  if (c->scope != CX_PRUNE_GLOBAL && c->scope != CX_PRUNE_LAYER)
    return cx_fail(CX_ERR_ARG, "prune: unknown scope %d", (int)c->scope);
  if (c->importance < CX_IMPORTANCE_L1 || c->importance > CX_IMPORTANCE_TAYLOR)
    return cx_fail(CX_ERR_ARG, "prune: unknown importance %d", (int)c->importance);
  if (c->method != CX_PRUNE_CHANNEL && c->importance != CX_IMPORTANCE_L1 &&
      c->importance != CX_IMPORTANCE_L2)
    return cx_fail(CX_ERR_ARG, "prune: importance \"%s\" is for method \"channel\"; %s pruning "
                   "ranks weights by |w| (\"l1\")", c->importance == CX_IMPORTANCE_BN ? "bn"
                   : "taylor", c->method == CX_PRUNE_NM ? "N:M" : "magnitude");
  if (c->method == CX_PRUNE_NM && !(c->n >= 1 && c->m >= 2 && c->n < c->m))
    return cx_fail(CX_ERR_ARG, "prune: N:M needs 1 <= n < m; got %d:%d", c->n, c->m);
  return CX_OK;
}

static cx_status check_ratios(const cx_prune_config *c) {
  if (c->n_ratios < 0 || (c->n_ratios > 0 && (!c->ratio_nodes || !c->ratios)))
    return cx_fail(CX_ERR_ARG, "prune: %d channel ratios and no list of them", c->n_ratios);
  if (c->n_ratios > 0 && c->method != CX_PRUNE_CHANNEL)
    return cx_fail(CX_ERR_ARG, "prune: per-layer channel ratios are for method \"channel\"");
  for (int i = 0; i < c->n_ratios; i++)
    if (!c->ratio_nodes[i] || !(c->ratios[i] >= 0 && c->ratios[i] < 1))
      return cx_fail(CX_ERR_ARG, "prune: the channel ratio of '%s' is %g; expected [0, 1)",
                     c->ratio_nodes[i] ? c->ratio_nodes[i] : "?", c->ratios[i]);
  return CX_OK;
}

cx_status cx_prune_config_check(const cx_prune_config *c) {
  if (!(c->sparsity >= 0 && c->sparsity < 1))
    return cx_fail(CX_ERR_ARG, "prune: sparsity %g must be in [0, 1)%s", c->sparsity,
                   c->method == CX_PRUNE_CHANNEL ? " (the fraction of MACs removed)"
                                                 : " (the fraction of weights zeroed)");
  CX_TRY(check_method(c));
  CX_TRY(check_schedule(c));
  if (cx_prune_channel_gradual(c) && c->importance == CX_IMPORTANCE_TAYLOR)
    return cx_fail(CX_ERR_ARG, "prune: importance \"taylor\" ranks channels once, from a scoring "
                   "pass before they are removed; a gradual channel schedule (end > start, or "
                   "start > 0) ranks them again at every pruning step: use l1, l2 or bn");
  if (c->round_to < 0) return cx_fail(CX_ERR_ARG, "prune: round_to %d < 0", c->round_to);
  CX_TRY(check_globs("include", c->include, c->n_include));
  CX_TRY(check_globs("exclude", c->exclude, c->n_exclude));
  return check_ratios(c);
}
