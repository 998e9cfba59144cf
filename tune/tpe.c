/* The Tree-structured Parzen Estimator (Bergstra et al. 2011, "Algorithms for Hyper-Parameter
 * Optimization"), with the defaults of Optuna's TPESampler (independent per dimension): the
 * observations are split by value into the best gamma(n) = min(ceil(n / 10), 25) ("good", l(x))
 * and the rest ("bad", g(x)); each group is a Parzen estimator in the dimension's internal
 * coordinate (log for log ranges): a truncated Gaussian per observation, its width the larger
 * gap to its sorted neighbours clipped to [range / min(100, 1 + m), range], plus a flat prior
 * (mean mid-range, width the range, weight prior_weight); categorical dimensions weigh each
 * choice by its count plus prior_weight / n_choices. Observations beyond the newest 25 of a
 * group weigh less, linearly (Optuna's default_weights). n_candidates points drawn from l(x),
 * the one with the largest l(x) / g(x) is the trial's. */
#include <math.h>
#include <stdlib.h>

#include "sampler_impl.h"

typedef struct parzen {
  int m;             /* components: the observations, then the prior */
  double *mu, *sigma, *w; /* numerical; w normalised */
  double *p;         /* choice: probability of each choice */
  double lo, hi;     /* internal range (INT: half a step beyond each end) */
} parzen;

static double phi_cdf(double z) { return 0.5 * erfc(-z / sqrt(2.0)); }

/* Optuna's default_weights: the newest 25 weigh 1, older ones a ramp from 1/n up. */
static void age_weights(int n, double *w) {
  int ramp = n < 25 ? 0 : n - 25; /* np.linspace(1 / n, 1, ramp), then 25 ones */
  for (int i = 0; i < n; i++)
    w[i] = i >= ramp ? 1.0 : ramp == 1 ? 1.0 / n : 1.0 / n + (1.0 - 1.0 / n) * i / (ramp - 1);
}

static int by_mu(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The estimator of the observations xs (in trial order) of one group. */
static cx_status parzen_fit(parzen *pz, const cx_tune_dim *d, const double *xs, int n,
                            double prior_weight) {
  cx_tune_internal_range(d, &pz->lo, &pz->hi);
  pz->m = n + 1;
  double *w = malloc(sizeof *w * (size_t)pz->m);
  if (!w) return cx_fail(CX_ERR_NOMEM, "out of memory");
  age_weights(n, w);
  w[n] = prior_weight;
  if (d->kind == CX_TUNE_CHOICE) {
    pz->p = calloc((size_t)d->n_choices, sizeof *pz->p);
    if (!pz->p) return free(w), cx_fail(CX_ERR_NOMEM, "out of memory");
    double total = prior_weight;
    for (int c = 0; c < d->n_choices; c++) pz->p[c] = prior_weight / d->n_choices;
    for (int i = 0; i < n; i++) pz->p[(int)xs[i]] += w[i], total += w[i];
    for (int c = 0; c < d->n_choices; c++) pz->p[c] /= total;
    free(w);
    return CX_OK;
  }
  pz->w = w;
  pz->mu = malloc(sizeof *pz->mu * (size_t)pz->m);
  pz->sigma = malloc(sizeof *pz->sigma * (size_t)pz->m);
  double *sorted = malloc(sizeof *sorted * (size_t)(pz->m + 2));
  if (!pz->mu || !pz->sigma || !sorted)
    return free(sorted), cx_fail(CX_ERR_NOMEM, "out of memory");
  double range = pz->hi - pz->lo, total = 0;
  for (int i = 0; i < n; i++) pz->mu[i] = xs[i];
  pz->mu[n] = 0.5 * (pz->lo + pz->hi);
  for (int i = 0; i < pz->m; i++) total += w[i];
  for (int i = 0; i < pz->m; i++) w[i] /= total;
  /* widths: the larger gap to the neighbours in sorted order, the range's ends as the outer
   * neighbours (Optuna's consider_endpoints = False: the end ones take their inner gap) */
  sorted[0] = pz->lo, sorted[pz->m + 1] = pz->hi;
  for (int i = 0; i < pz->m; i++) sorted[i + 1] = pz->mu[i];
  qsort(sorted + 1, (size_t)pz->m, sizeof *sorted, by_mu);
  double smin = range / fmin(100.0, 1.0 + pz->m), smax = range;
  for (int i = 0; i < n; i++) {
    int k = 1; /* position of mu[i] among the sorted ones (any equal one serves) */
    while (k < pz->m && sorted[k] < pz->mu[i]) k++;
    double left = sorted[k] - sorted[k - 1], right = sorted[k + 1] - sorted[k];
    double s = k == 1 ? right : k == pz->m ? left : fmax(left, right);
    pz->sigma[i] = fmin(fmax(s, smin), smax);
  }
  pz->sigma[n] = range;
  free(sorted);
  return CX_OK;
}

static void parzen_free(parzen *pz) {
  free(pz->mu), free(pz->sigma), free(pz->w), free(pz->p);
}

/* A draw from the estimator: a component by weight, then its Gaussian cut to the range. */
static double parzen_draw(const parzen *pz, const cx_tune_dim *d, cx_tune_stream *st) {
  if (d->kind == CX_TUNE_CHOICE) {
    double u = cx_tune_uniform(st), acc = 0;
    for (int c = 0; c < d->n_choices; c++)
      if ((acc += pz->p[c]) > u) return c;
    return d->n_choices - 1;
  }
  double u = cx_tune_uniform(st), acc = 0;
  int k = pz->m - 1;
  for (int i = 0; i < pz->m; i++)
    if ((acc += pz->w[i]) > u) {
      k = i;
      break;
    }
  /* rejection: every component's mean lies in the range and its width is at most the range,
   * so at least a third of the draws land; after 64 misses, the uniform */
  for (int t = 0; t < 64; t++) {
    double x = pz->mu[k] + pz->sigma[k] * cx_tune_normal(st);
    if (x >= pz->lo && x <= pz->hi) return cx_tune_snap(d, x);
  }
  return cx_tune_snap(d, pz->lo + cx_tune_uniform(st) * (pz->hi - pz->lo));
}

/* log l(x): the density (continuous) or the mass of x's step (INT) or the choice's weight. */
static double parzen_log(const parzen *pz, const cx_tune_dim *d, double x) {
  if (d->kind == CX_TUNE_CHOICE) return log(fmax(pz->p[(int)x], 1e-300));
  double sum = 0;
  for (int i = 0; i < pz->m; i++) {
    double mu = pz->mu[i], s = pz->sigma[i];
    double z = phi_cdf((pz->hi - mu) / s) - phi_cdf((pz->lo - mu) / s);
    double f;
    if (d->kind == CX_TUNE_INT)
      f = phi_cdf((fmin(x + 0.5, pz->hi) - mu) / s) - phi_cdf((fmax(x - 0.5, pz->lo) - mu) / s);
    else
      f = exp(-0.5 * (x - mu) * (x - mu) / (s * s)) / (s * 2.5066282746310002) /* sqrt(2 pi) */;
    sum += pz->w[i] * f / fmax(z, 1e-300);
  }
  return log(fmax(sum, 1e-300));
}

/* Observations ordered best first (complete and feasible before pruned or infeasible, then the
 * larger value), ties by trial order. */
typedef struct ranked {
  double value;
  int i;
  bool bad; /* pruned or infeasible: never a good one */
} ranked;

static int by_value(const void *a, const void *b) {
  const ranked *x = a, *y = b;
  if (x->bad != y->bad) return x->bad ? 1 : -1;
  if (x->value != y->value) return x->value > y->value ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

/* Splits the observations: good (xs[0..*n_good)) and bad (the rest), each in trial order. */
static cx_status split(const cx_tune_obs *obs, int n, int dim, double *xs, int *n_good) {
  ranked *order = malloc(sizeof *order * (size_t)n);
  char *good = calloc((size_t)n, 1);
  if (!order || !good) return free(order), free(good), cx_fail(CX_ERR_NOMEM, "out of memory");
  int complete = 0; /* the ones that may be good */
  for (int i = 0; i < n; i++)
    order[i] = (ranked){obs[i].value, i, obs[i].pruned || obs[i].infeasible};
  for (int i = 0; i < n; i++) complete += !order[i].bad;
  qsort(order, (size_t)n, sizeof *order, by_value);
  int ng = (n + 9) / 10 < 25 ? (n + 9) / 10 : 25;
  if (ng > complete) ng = complete; /* a pruned or infeasible trial is never a good one */
  for (int i = 0; i < ng; i++) good[order[i].i] = 1;
  int a = 0, b = ng;
  for (int i = 0; i < n; i++) xs[good[i] ? a++ : b++] = obs[i].x[dim];
  *n_good = ng;
  free(order), free(good);
  return CX_OK;
}

cx_status cx_tune_tpe_dim(const cx_tune_dim *d, int dim, const cx_tune_sampler *s,
                          const cx_tune_obs *obs, int n_obs, cx_tune_stream *st, double *x) {
  double *xs = malloc(sizeof *xs * (size_t)(n_obs ? n_obs : 1));
  if (!xs) return cx_fail(CX_ERR_NOMEM, "out of memory");
  int ng = 0;
  parzen l = {0}, g = {0};
  cx_status r = split(obs, n_obs, dim, xs, &ng);
  if (r == CX_OK) r = parzen_fit(&l, d, xs, ng, s->prior_weight);
  if (r == CX_OK) r = parzen_fit(&g, d, xs + ng, n_obs - ng, s->prior_weight);
  if (r == CX_OK) {
    double best = -INFINITY;
    for (int c = 0; c < s->n_candidates; c++) {
      double v = parzen_draw(&l, d, st);
      double score = parzen_log(&l, d, v) - parzen_log(&g, d, v);
      if (score > best) best = score, *x = v;
    }
  }
  parzen_free(&l), parzen_free(&g);
  free(xs);
  return r;
}
