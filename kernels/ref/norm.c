#include <math.h>

#include "../../core/ops/norm.h"
#include "ref.h"

/* Batch normalization references. X is [N, C, spatial...]; element (n, c, i) sits at
 * (n * C + c) * S + i. BatchNormTrain's reference never touches the running statistics: the
 * harness calls it many times for finite differences. */

static void dims(const cx_shape *x, int64_t *n, int64_t *c, int64_t *s) {
  *n = x->d[0];
  *c = x->d[1];
  *s = 1;
  for (int i = 2; i < x->ndim; i++) *s *= x->d[i];
}

static double at(const double *p, int64_t n, int64_t c, int64_t i, int64_t C, int64_t S) {
  return p[(n * C + c) * S + i];
}

static cx_status ref_bn(const cx_ref_args *a) {
  int64_t N, C, S;
  dims(&a->in[0].shape, &N, &C, &S);
  double eps = cx_node_float(a->node, "epsilon", 1e-5f);
  const double *x = a->in[0].data, *scale = a->in[1].data, *b = a->in[2].data;
  const double *mean = a->in[3].data, *var = a->in[4].data;
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t i = 0; i < S; i++)
        a->out[0].data[(n * C + c) * S + i] =
            scale[c] * (at(x, n, c, i, C, S) - mean[c]) / sqrt(var[c] + eps) + b[c];
  return CX_OK;
}

static void channel_stats(const double *x, int64_t N, int64_t C, int64_t S, int64_t c,
                          double *mean, double *var) {
  double m = 0, v = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t i = 0; i < S; i++) m += at(x, n, c, i, C, S);
  m /= (double)(N * S);
  for (int64_t n = 0; n < N; n++)
    for (int64_t i = 0; i < S; i++) v += (at(x, n, c, i, C, S) - m) * (at(x, n, c, i, C, S) - m);
  *mean = m;
  *var = v / (double)(N * S); /* biased, as the normalisation uses */
}

static cx_status ref_bn_train(const cx_ref_args *a) {
  int64_t N, C, S;
  dims(&a->in[0].shape, &N, &C, &S);
  double eps = cx_node_float(a->node, "epsilon", 1e-5f);
  const double *x = a->in[0].data, *scale = a->in[1].data, *b = a->in[2].data;
  float lo, hi;
  bool act = cx_bn_activation(a->node, &lo, &hi);
  for (int64_t c = 0; c < C; c++) {
    double mean, var;
    channel_stats(x, N, C, S, c, &mean, &var);
    double invstd = 1 / sqrt(var + eps);
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < S; i++) {
        double z = scale[c] * (at(x, n, c, i, C, S) - mean) * invstd + b[c];
        a->out[0].data[(n * C + c) * S + i] = act ? fmin(fmax(z, lo), hi) : z;
      }
    if (a->n_out > 1) a->out[1].data[c] = mean;
    if (a->n_out > 2) a->out[2].data[c] = invstd;
  }
  return CX_OK;
}

/* dY at element (n, c, i), masked by the fused activation's gradient when there is one: passed
 * where lo < z < hi for the normalised value z. */
static double dy_at(const cx_ref_args *a, int64_t n, int64_t c, int64_t i, int64_t C,
                    int64_t S) {
  const double *x = a->in[1].data, *scale = a->in[2].data;
  const double *mean = a->in[3].data, *invstd = a->in[4].data;
  double dy = at(a->in[0].data, n, c, i, C, S);
  float lo, hi;
  if (!cx_bn_activation(a->node, &lo, &hi)) return dy;
  double z = scale[c] * (at(x, n, c, i, C, S) - mean[c]) * invstd[c] + a->in[5].data[c];
  return z > lo && z < hi ? dy : 0;
}

/* The textbook form: dxhat = dY * scale;
 * dX = invstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)). */
static cx_status ref_bn_grad(const cx_ref_args *a) {
  int64_t N, C, S;
  dims(&a->in[1].shape, &N, &C, &S);
  const double *x = a->in[1].data, *scale = a->in[2].data;
  const double *mean = a->in[3].data, *invstd = a->in[4].data;
  double m = (double)(N * S);
  for (int64_t c = 0; c < C; c++) {
    double sdy = 0, sdyxh = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < S; i++) {
        double xh = (at(x, n, c, i, C, S) - mean[c]) * invstd[c];
        sdy += dy_at(a, n, c, i, C, S);
        sdyxh += dy_at(a, n, c, i, C, S) * xh;
      }
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < S; i++) {
        double xh = (at(x, n, c, i, C, S) - mean[c]) * invstd[c];
        double dxh = dy_at(a, n, c, i, C, S) * scale[c];
        a->out[0].data[(n * C + c) * S + i] =
            invstd[c] * (dxh - scale[c] * sdy / m - xh * scale[c] * sdyxh / m);
      }
    a->out[1].data[c] = sdyxh;
    a->out[2].data[c] = sdy;
  }
  return CX_OK;
}

const cx_ref_entry cx_ref_norm[] = {
    {"BatchNormalization", ref_bn},
    {"BatchNormTrain", ref_bn_train},
    {"BatchNormGrad", ref_bn_grad},
    {NULL, NULL},
};
