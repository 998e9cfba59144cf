#ifndef CX_TUNE_SAMPLER_IMPL_H
#define CX_TUNE_SAMPLER_IMPL_H

/* Inside tune/: what the random and TPE samplers share. */

#include "tune.h"

/* A trial's random numbers for one dimension: Philox at (seed, trial, dimension), counter at. */
typedef struct cx_tune_stream {
  uint64_t key, at;
} cx_tune_stream;

cx_tune_stream cx_tune_stream_of(const cx_tune_sampler *s, int trial, int dim);
double cx_tune_uniform(cx_tune_stream *s); /* [0, 1) */
double cx_tune_normal(cx_tune_stream *s);
void cx_tune_internal_range(const cx_tune_dim *d, double *lo, double *hi);
double cx_tune_snap(const cx_tune_dim *d, double x);
double cx_tune_random_dim(const cx_tune_dim *d, cx_tune_stream *s);
/* TPE's choice for dimension `dim` (tune/tpe.c) into *x. */
cx_status cx_tune_tpe_dim(const cx_tune_dim *d, int dim, const cx_tune_sampler *s,
                          const cx_tune_obs *obs, int n_obs, cx_tune_stream *st, double *x);

#endif
