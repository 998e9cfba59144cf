/* Masks from weights: magnitude (per layer or one global threshold) and N:M, on the host. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mask.h"

static cx_status nomem(void) { return cx_fail(CX_ERR_NOMEM, "out of memory"); }

static int64_t numel(const cx_prune_target *t) { return t->outer * t->channels * t->inner; }

static int64_t pruned_count(double sparsity, int64_t n) {
  int64_t k = (int64_t)floor(sparsity * (double)n + 0.5);
  return k < 0 ? 0 : k > n ? n : k;
}

/* The value of rank r (0: the smallest) of a[0..n), reordering a: quickselect with a three-way
 * partition, so runs of equal values (the zeros of a pruned layer) cost one pass. */
static float select_rank(float *a, int64_t n, int64_t r) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    float x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi]; /* median of three */
    float p = x < y ? (y < z ? y : x < z ? z : x) : (x < z ? x : y < z ? z : y);
    int64_t lt = lo, i = lo, gt = hi;
    while (i <= gt) {
      if (a[i] < p) {
        float t = a[lt];
        a[lt++] = a[i], a[i++] = t;
      } else if (a[i] > p) {
        float t = a[gt];
        a[gt--] = a[i], a[i] = t;
      } else {
        i++;
      }
    }
    if (r < lt) hi = lt - 1;
    else if (r > gt) lo = gt + 1;
    else return p;
  }
  return a[lo];
}

static cx_status check_finite(const cx_prune_target *t, const float *w) {
  for (int64_t i = 0; i < numel(t); i++)
    if (isnan(w[i]))
      return cx_fail(CX_ERR_NUMERIC, "prune: weight '%s' of node '%s' holds NaN at element %lld",
                     t->weight_name, t->node_name, (long long)i);
  return CX_OK;
}

/* Prunes the k smallest |w| of targets [a, b) together: those below the k-th smallest value,
 * then those equal to it in (target, index) order until k are pruned. */
static cx_status magnitude_range(const cx_prune_targets *t, const float *const *w, int a, int b,
                                 double sparsity, uint8_t *const *masks) {
  int64_t n = 0;
  for (int i = a; i < b; i++) n += numel(&t->t[i]);
  int64_t k = pruned_count(sparsity, n);
  float *mag = k > 0 ? malloc(sizeof *mag * (size_t)n) : NULL;
  if (k > 0 && !mag) return nomem();
  int64_t at = 0;
  for (int i = a; i < b; i++)
    for (int64_t e = 0; k > 0 && e < numel(&t->t[i]); e++) mag[at++] = fabsf(w[i][e]);
  float v = k > 0 ? select_rank(mag, n, k - 1) : -1;
  free(mag);
  int64_t below = 0; /* ties pruned: k minus the count strictly below v */
  for (int i = a; i < b && k > 0; i++)
    for (int64_t e = 0; e < numel(&t->t[i]); e++) below += fabsf(w[i][e]) < v;
  int64_t ties = k - below;
  for (int i = a; i < b; i++)
    for (int64_t e = 0; e < numel(&t->t[i]); e++) {
      float x = fabsf(w[i][e]);
      bool prune = x < v || (x == v && ties > 0);
      if (x == v && prune) ties--;
      masks[i][e] = !prune;
    }
  return CX_OK;
}

cx_status cx_prune_masks_magnitude(const cx_prune_targets *t, const float *const *w,
                                   cx_prune_scope scope, double sparsity, uint8_t *const *masks) {
  if (!(sparsity >= 0 && sparsity < 1))
    return cx_fail(CX_ERR_ARG, "prune: sparsity %g must be in [0, 1)", sparsity);
  for (int i = 0; i < t->n; i++) CX_TRY(check_finite(&t->t[i], w[i]));
  if (scope == CX_PRUNE_GLOBAL) return magnitude_range(t, w, 0, t->n, sparsity, masks);
  for (int i = 0; i < t->n; i++) CX_TRY(magnitude_range(t, w, i, i + 1, sparsity, masks));
  return CX_OK;
}

cx_status cx_prune_nm_check_shapes(const cx_prune_targets *t, int m, const char *model) {
  for (int i = 0; i < t->n; i++)
    if (m <= 0 || t->t[i].channels % m)
      return cx_fail(CX_ERR_ARG, "%s: node '%s' has %lld input channels (weight '%s'), not a "
                     "multiple of %d: N:M pruning needs whole groups of %d input channels "
                     "(exclude the node)", model ? model : "the model", t->t[i].node_name,
                     (long long)t->t[i].channels, t->t[i].weight_name, m, m);
  return CX_OK;
}

cx_status cx_prune_nm_fit(cx_prune_targets *t, const cx_prune_config *c, const char *model,
                          FILE *log) {
  if (c->n_include > 0) return cx_prune_nm_check_shapes(t, c->m, model);
  int kept = 0;
  for (int i = 0; i < t->n; i++) {
    if (t->t[i].channels % c->m == 0) {
      t->t[kept++] = t->t[i];
      continue;
    }
    if (log)
      fprintf(log, "prune: %d:%d leaves node '%s' dense (%lld input channels per group)\n", c->n,
              c->m, t->t[i].node_name, (long long)t->t[i].channels);
    free(t->t[i].node_name), free(t->t[i].weight_name);
  }
  t->n = kept;
  if (kept == 0)
    return cx_fail(CX_ERR_ARG, "%s: nothing to prune with %d:%d: no prunable layer has a multiple "
                   "of %d input channels per group", model ? model : "the model", c->n, c->m, c->m);
  return CX_OK;
}

/* Keeps the n largest |w| of one group (ties: the lower channel) of m weights `stride` apart. */
static void nm_group(const float *w, uint8_t *mask, int64_t stride, int n, int m) {
  for (int r = 0; r < m; r++) {
    float x = fabsf(w[r * stride]);
    int above = 0;
    for (int q = 0; q < m; q++) {
      float y = fabsf(w[q * stride]);
      above += y > x || (y == x && q < r);
    }
    mask[r * stride] = above < n;
  }
}

cx_status cx_prune_masks_nm(const cx_prune_targets *t, const float *const *w, int n, int m,
                            uint8_t *const *masks) {
  if (!(n >= 1 && n < m)) return cx_fail(CX_ERR_ARG, "prune: N:M needs 1 <= n < m; got %d:%d", n, m);
  CX_TRY(cx_prune_nm_check_shapes(t, m, NULL));
  for (int i = 0; i < t->n; i++) {
    const cx_prune_target *g = &t->t[i];
    CX_TRY(check_finite(g, w[i]));
    for (int64_t o = 0; o < g->outer; o++)
      for (int64_t c = 0; c < g->channels; c += m)
        for (int64_t s = 0; s < g->inner; s++) {
          int64_t at = (o * g->channels + c) * g->inner + s;
          nm_group(w[i] + at, masks[i] + at, g->inner, n, m);
        }
  }
  return CX_OK;
}

cx_status cx_prune_masks(const cx_prune_config *c, const cx_prune_targets *t,
                         const float *const *w, double sparsity, uint8_t *const *masks) {
  switch (c->method) {
  case CX_PRUNE_MAGNITUDE: return cx_prune_masks_magnitude(t, w, c->scope, sparsity, masks);
  case CX_PRUNE_NM: return cx_prune_masks_nm(t, w, c->n, c->m, masks);
  default:
    return cx_fail(CX_ERR_ARG, "prune: masks are for methods \"magnitude\" and N:M; channel "
                   "pruning removes the channels instead");
  }
}

bool cx_prune_nm_holds(const cx_prune_target *t, const float *w, int n, int m) {
  if (m <= 0 || t->channels % m) return false;
  for (int64_t o = 0; o < t->outer; o++)
    for (int64_t c = 0; c < t->channels; c += m)
      for (int64_t s = 0; s < t->inner; s++) {
        int nz = 0;
        for (int r = 0; r < m; r++) nz += w[(o * t->channels + c + r) * t->inner + s] != 0.0f;
        if (nz > n) return false;
      }
  return true;
}

void cx_prune_count_zeros(const cx_graph *g, const cx_prune_targets *t, cx_prune_count *per,
                          cx_prune_count *all) {
  *all = (cx_prune_count){0};
  for (int i = 0; i < t->n; i++) {
    const float *w = g->values[t->t[i].weight].init;
    cx_prune_count c = {.total = numel(&t->t[i])};
    for (int64_t e = 0; e < c.total; e++) c.zeros += w[e] == 0.0f;
    if (per) per[i] = c;
    all->zeros += c.zeros, all->total += c.total;
  }
}

/* Host buffers for one mask per target, in one allocation. */
static uint8_t **alloc_masks(const cx_prune_targets *t) {
  int64_t n = 0;
  for (int i = 0; i < t->n; i++) n += numel(&t->t[i]);
  uint8_t **m = malloc(sizeof *m * (size_t)(t->n + 1) + (size_t)n + 1);
  if (!m) return NULL;
  uint8_t *at = (uint8_t *)(m + t->n + 1);
  for (int i = 0; i < t->n; i++) m[i] = at, at += numel(&t->t[i]);
  return m;
}

static cx_status mask_graph(cx_graph *g, const cx_prune_config *c, const cx_prune_targets *t) {
  uint8_t **masks = alloc_masks(t);
  const float **w = malloc(sizeof *w * (size_t)(t->n + 1));
  if (!masks || !w) return free(masks), free(w), nomem();
  for (int i = 0; i < t->n; i++) w[i] = g->values[t->t[i].weight].init;
  cx_status s = cx_prune_masks(c, t, w, c->sparsity, masks);
  for (int i = 0; s == CX_OK && i < t->n; i++) {
    float *x = g->values[t->t[i].weight].init;
    for (int64_t e = 0; e < numel(&t->t[i]); e++)
      if (!masks[i][e]) x[e] = 0.0f;
  }
  free(masks), free(w);
  return s;
}

cx_status cx_prune_mask_graph(cx_graph *g, const cx_prune_config *c, const char *model) {
  CX_TRY(cx_prune_config_check(c));
  if (c->method == CX_PRUNE_CHANNEL)
    return cx_fail(CX_ERR_ARG, "prune: cx_prune_mask_graph is for methods \"magnitude\" and "
                   "N:M; channel pruning rewrites the graph instead");
  cx_prune_targets t;
  CX_TRY(cx_prune_select(g, c, model, &t));
  cx_status s = c->method == CX_PRUNE_NM ? cx_prune_nm_fit(&t, c, model, NULL) : CX_OK;
  if (s == CX_OK) s = mask_graph(g, c, &t);
  cx_prune_targets_free(&t);
  return s;
}
