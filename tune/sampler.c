/* The samplers' shared parts: the random stream of a trial, and the random sampler. */
#include <math.h>

#include "../core/rng.h"
#include "sampler_impl.h"

double cx_tune_uniform(cx_tune_stream *s) {
  /* two 24-bit draws: 48 bits, so log ranges over decades are not visibly discrete */
  double a = cx_rng_uniform(s->key, s->at++), b = cx_rng_uniform(s->key, s->at++);
  return a + b / 16777216.0;
}

double cx_tune_normal(cx_tune_stream *s) { return cx_rng_normal(s->key, s->at++); }

cx_tune_stream cx_tune_stream_of(const cx_tune_sampler *s, int trial, int dim) {
  return (cx_tune_stream){.key = cx_rng_key(s->seed, (uint64_t)trial, (uint64_t)dim)};
}

/* The internal range a dimension is sampled in: log bounds for LOG, and for INT and CHOICE
 * half a step beyond each end, so that rounding gives every integer the same width. */
void cx_tune_internal_range(const cx_tune_dim *d, double *lo, double *hi) {
  bool discrete = d->kind == CX_TUNE_INT || d->kind == CX_TUNE_CHOICE;
  *lo = cx_tune_dim_internal(d, d->lo) - (discrete ? 0.5 : 0);
  *hi = cx_tune_dim_internal(d, d->hi) + (discrete ? 0.5 : 0);
}

/* An internal coordinate snapped to what the dimension can hold. */
double cx_tune_snap(const cx_tune_dim *d, double x) {
  double lo = cx_tune_dim_internal(d, d->lo), hi = cx_tune_dim_internal(d, d->hi);
  if (d->kind == CX_TUNE_INT || d->kind == CX_TUNE_CHOICE) x = round(x);
  return x < lo ? lo : x > hi ? hi : x;
}

double cx_tune_random_dim(const cx_tune_dim *d, cx_tune_stream *s) {
  double lo, hi;
  cx_tune_internal_range(d, &lo, &hi);
  return cx_tune_snap(d, lo + cx_tune_uniform(s) * (hi - lo));
}

cx_status cx_tune_sample(const cx_tune_space *sp, const cx_tune_sampler *s,
                         const cx_tune_obs *obs, int n_obs, int trial, double *x) {
  if (!sp || !s || !x || trial < 0 || n_obs < 0 || (n_obs && !obs))
    return cx_fail(CX_ERR_ARG, "cx_tune_sample: bad arguments");
  bool model = s->kind == CX_TUNE_TPE && n_obs >= s->n_startup;
  for (int d = 0; d < sp->n; d++) {
    cx_tune_stream st = cx_tune_stream_of(s, trial, d);
    if (model) CX_TRY(cx_tune_tpe_dim(&sp->dims[d], d, s, obs, n_obs, &st, &x[d]));
    else x[d] = cx_tune_random_dim(&sp->dims[d], &st);
  }
  return CX_OK;
}
