/* Per-layer channel fractions from a sensitivity scan (prune/channel.h): the tolerance of top-1
 * loss is raised until the fractions it allows reach the MAC target. As in Distiller's
 * sensitivity pruning and NNI's SensitivityPruner: one threshold over all layers, so a layer
 * whose accuracy holds gives more channels than one that breaks early. */
#include <math.h>
#include <stdlib.h>

#include "channel.h"

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Each group's fraction under tolerance t: the largest level before the first drop above t. */
static void fractions_at(int n, int n_levels, const double *levels, const double *drop, double t,
                         double *f) {
  for (int i = 0; i < n; i++) {
    f[i] = 0;
    for (int k = 0; k < n_levels && drop[i * n_levels + k] <= t; k++) f[i] = levels[k];
  }
}

/* MACs of the choice under tolerance t into *macs. */
static cx_status macs_at(const cx_channel_groups *cg, const cx_prune_config *c,
                         const double *score, int n, const char *const *names, int n_levels,
                         const double *levels, const double *drop, double t, double *f,
                         bool *keep, int64_t *macs) {
  fractions_at(n, n_levels, levels, drop, t, f);
  cx_prune_config r = *c;
  r.ratio_nodes = names, r.ratios = f, r.n_ratios = n;
  CX_TRY(cx_channel_choose(cg, &r, score, keep));
  *macs = cx_channel_macs(cg, keep);
  return *macs < 0 ? cx_fail(CX_ERR_NOMEM, "out of memory") : CX_OK;
}

cx_status cx_channel_allocate(const cx_channel_groups *cg, const cx_prune_config *c,
                              const double *score, int n, const char *const *names,
                              int n_levels, const double *levels, const double *drop,
                              double *fraction) {
  if (n < 1 || n_levels < 1)
    return cx_fail(CX_ERR_ARG, "prune: allocate = \"sensitivity\": no layer was scanned");
  int64_t target = (int64_t)floor((1 - c->sparsity) * (double)cg->macs), macs;
  size_t m = (size_t)n * (size_t)n_levels;
  double *t = malloc(m * sizeof *t);
  bool *keep = malloc(((size_t)cg->n_units + 1) * sizeof *keep);
  if (!t || !keep) return free(t), free(keep), cx_fail(CX_ERR_NOMEM, "out of memory");
  for (size_t j = 0; j < m; j++) t[j] = drop[j];
  qsort(t, m, sizeof *t, by_value);
  /* the MACs fall as the tolerance rises: bisect over the sorted drops */
  cx_status s = macs_at(cg, c, score, n, names, n_levels, levels, drop, t[m - 1], fraction, keep,
                        &macs);
  if (s == CX_OK && macs > target)
    s = cx_fail(CX_ERR_ARG, "prune: allocate = \"sensitivity\": every scanned layer at its "
                "largest fraction (%g) leaves %.1f%% of the %lld MACs; sparsity %g needs %.1f%%",
                levels[n_levels - 1], 100.0 * (double)macs / (double)cg->macs,
                (long long)cg->macs, c->sparsity, 100.0 * (1 - c->sparsity));
  size_t lo = 0, hi = m - 1; /* hi meets the target */
  while (s == CX_OK && lo < hi) {
    size_t mid = (lo + hi) / 2;
    s = macs_at(cg, c, score, n, names, n_levels, levels, drop, t[mid], fraction, keep, &macs);
    if (macs <= target) hi = mid;
    else lo = mid + 1;
  }
  if (s == CX_OK) fractions_at(n, n_levels, levels, drop, t[hi], fraction);
  free(t), free(keep);
  return s;
}
