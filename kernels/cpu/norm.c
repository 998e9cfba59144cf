#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../core/ops/norm.h"
#include "cpu.h"
#include "norm_nhwc.h"

/* Batch normalization on NCHW (any rank >= 2: [N, C, spatial...]); channels-last 4-D tensors, and
 * tensors of one value per channel and image, go to norm_nhwc.c. Hand-written: per channel the
 * data is N planes of `S` contiguous floats, so one thread per channel streams its planes with
 * vectorised loops, and the statistics need no cross-thread reduction. */

enum { LANES = 16 };

typedef struct bn_dims {
  int64_t n, c, s; /* batch, channels, spatial size */
} bn_dims;

static bn_dims bn_dims_of(const cx_tensor *x) {
  bn_dims d = {x->shape.d[0], x->shape.d[1], 1};
  for (int i = 2; i < x->shape.ndim; i++) d.s *= x->shape.d[i];
  return d;
}

/* sum(x - k) and sum((x - k)^2), added to *su and *suu; in double, in LANES accumulators (which
 * the compiler vectorises), since the mean is k + sum / n and float sums would leave it an ulp or
 * two off, which moves a fused ReLU's kink */
static void plane_shifted(const float *x, int64_t s, float k, double *su, double *suu) {
  double a[LANES] = {0}, b[LANES] = {0};
  int64_t i = 0;
  for (; i + LANES <= s; i += LANES)
    for (int j = 0; j < LANES; j++) {
      double u = (double)x[i + j] - k;
      a[j] += u;
      b[j] += u * u;
    }
  for (; i < s; i++) {
    double u = (double)x[i] - k;
    *su += u;
    *suu += u * u;
  }
  for (int j = 0; j < LANES; j++) {
    *su += a[j];
    *suu += b[j];
  }
}

/* sum(dy) and sum(dy * (x - m)), in LANES independent float accumulators (which the compiler
 * vectorises without reassociating), folded into double once per plane */
static void plane_dot(const float *dy, const float *x, int64_t s, float m, double *sdy,
                      double *sdyx) {
  float a[LANES] = {0}, b[LANES] = {0};
  int64_t i = 0;
  for (; i + LANES <= s; i += LANES)
    for (int j = 0; j < LANES; j++) {
      a[j] += dy[i + j];
      b[j] += dy[i + j] * (x[i + j] - m);
    }
  for (; i < s; i++) {
    *sdy += dy[i];
    *sdyx += (double)dy[i] * (x[i] - m);
  }
  for (int j = 0; j < LANES; j++) {
    *sdy += a[j];
    *sdyx += b[j];
  }
}

/* restrict + simd: without them GCC's -O2 cost model keeps these loops scalar (x and y may alias). */
static void plane_affine(const float *restrict x, float *restrict y, int64_t s, float a, float b) {
#pragma omp simd
  for (int64_t i = 0; i < s; i++) y[i] = x[i] * a + b;
}

static void plane_affine_clamp(const float *restrict x, float *restrict y, int64_t s, float a,
                               float b, float lo, float hi) {
#pragma omp simd
  for (int64_t i = 0; i < s; i++) { /* fmaxf and fminf would not vectorise (NaN rules) */
    float z = x[i] * a + b;
    z = z > lo ? z : lo;
    y[i] = z < hi ? z : hi;
  }
}

/* dy where the fused activation passes it: lo < x * kf + bf < hi (the forward's z), else 0 */
static void plane_mask(const float *restrict dy, const float *restrict x, float *restrict dz,
                       int64_t s, float kf, float bf, float lo, float hi) {
#pragma omp simd
  for (int64_t i = 0; i < s; i++) {
    float z = x[i] * kf + bf;
    dz[i] = z > lo && z < hi ? dy[i] : 0.0f;
  }
}

/* dx = k * dy - kx * x + b */
static void plane_grad(const float *restrict dy, const float *restrict x, float *restrict dx,
                       int64_t s, float k, float kx, float b) {
#pragma omp simd
  for (int64_t i = 0; i < s; i++) dx[i] = k * dy[i] - kx * x[i] + b;
}

/* the same with dy in dx */
static void plane_grad_in_place(float *restrict dx, const float *restrict x, int64_t s, float k,
                                float kx, float b) {
#pragma omp simd
  for (int64_t i = 0; i < s; i++) dx[i] = k * dx[i] - kx * x[i] + b;
}

/* ---- channels-last X (norm_nhwc.c) needs per-thread partial sums in scratch ------------------ */

typedef struct bn_state {
  int threads; /* the scratch holds partial sums for this many */
} bn_state;

/* Rows of C floats: channels-last, or one value per channel and image (a 1x1 map, or [N, C]),
 * where the planes of the loops below would be single floats. */
static bool bn_rows(const cx_tensor *x) {
  return cx_tensor_nhwc(x) || (cx_tensor_is_contiguous(x) && bn_dims_of(x).s == 1);
}

/* X is input x_in (BatchNormGrad: 1). Plain tensors need no state, only the room for the sums
 * a synchronised BatchNorm pools (BatchNormTrain and BatchNormGrad; a program learns of its
 * replicas after compiling, so the room is always there). */
static cx_status bn_prepare_x(const cx_kernel_args *a, int x_in, void **state, size_t *scratch) {
  *scratch = cx_bn_pool_bytes(a->in[x_in].shape.d[1]);
  if (!bn_rows(&a->in[x_in])) return CX_OK;
  bn_state *s = malloc(sizeof *s);
  if (!s) return cx_fail(CX_ERR_NOMEM, "node '%s': out of memory", a->node->name);
  s->threads = omp_get_max_threads();
  *scratch = cx_bn_nhwc_scratch(a->in[x_in].shape.d[1], s->threads);
  *state = s;
  return CX_OK;
}

static cx_status bn_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  return bn_prepare_x(a, 0, state, scratch);
}

static cx_status bn_grad_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  return bn_prepare_x(a, 1, state, scratch);
}

static int bn_threads(const cx_kernel_args *a) { return ((const bn_state *)a->state)->threads; }

static cx_status bn_infer_run(const cx_kernel_args *a) {
  if (a->state) {
    cx_bn_nhwc_infer(a, bn_threads(a));
    return CX_OK;
  }
  bn_dims d = bn_dims_of(&a->in[0]);
  const float *x = cx_f32(&a->in[0]), *scale = cx_f32(&a->in[1]), *bias = cx_f32(&a->in[2]);
  const float *mean = cx_f32(&a->in[3]), *var = cx_f32(&a->in[4]);
  float *y = cx_f32(&a->out[0]);
  float eps = cx_node_float(a->node, "epsilon", 1e-5f);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < d.n * d.c; p++) {
    int64_t c = p % d.c;
    float k = scale[c] / sqrtf(var[c] + eps);
    plane_affine(x + p * d.s, y + p * d.s, d.s, k, bias[c] - mean[c] * k);
  }
  return CX_OK;
}

/* Channel c's sums of its values' offsets from the shift k */
static void channel_shifted(const float *x, bn_dims d, int64_t c, float k, double *su,
                            double *suu) {
  *su = *suu = 0;
  for (int64_t n = 0; n < d.n; n++) plane_shifted(x + (n * d.c + c) * d.s, d.s, k, su, suu);
}

/* Channel c's output, saved statistics and running statistics from its mean and (biased)
 * variance over m values. */
static void bn_train_out(const cx_kernel_args *a, bn_dims d, int64_t c, float mean, double var,
                         double m, float eps) {
  const float *x = cx_f32(&a->in[0]);
  float *y = cx_f32(&a->out[0]);
  float invstd = (float)(1.0 / sqrt(var + eps));
  float k, b, lo, hi;
  cx_bn_coefficients(cx_f32(&a->in[1])[c], cx_f32(&a->in[2])[c], mean, invstd, &k, &b);
  bool act = cx_bn_activation(a->node, &lo, &hi);
  for (int64_t n = 0; n < d.n; n++) {
    int64_t o = (n * d.c + c) * d.s;
    if (act) plane_affine_clamp(x + o, y + o, d.s, k, b, lo, hi);
    else plane_affine(x + o, y + o, d.s, k, b);
  }
  cx_bn_save_channel(a, c, mean, invstd, var, m);
}

/* Channel c's output and statistics from the sums of its m values' offsets from the shift k. */
static void bn_train_statistics(const cx_kernel_args *a, bn_dims d, int64_t c, float k, double su,
                                double suu, double m, float eps) {
  double u = su / m, var = suu / m - u * u;
  bn_train_out(a, d, c, (float)(k + u), var > 0 ? var : 0, m, eps);
}

/* The statistics take one pass over X, its values shifted by a value of their channel (the
 * first, averaged over the replicas): mean = k + E[u], var = E[u^2] - E[u]^2 with u = x - k,
 * which cancels little as u is about a standard deviation, and gives a constant channel exactly
 * 0 (norm_nhwc.c computes the same). One channel without replicas: */
static void bn_train_channel(const cx_kernel_args *a, bn_dims d, int64_t c, float eps) {
  const float *x = cx_f32(&a->in[0]);
  double su, suu;
  float k = x[c * d.s];
  channel_shifted(x, d, c, k, &su, &suu);
  bn_train_statistics(a, d, c, k, su, suu, (double)d.n * d.s, eps);
}

/* Synchronised BatchNorm: the shifts pooled over the replicas (C values and the replica count),
 * then the sums (2C and the count), so every replica normalises with the statistics of the
 * whole batch. */
static cx_status bn_train_synced(const cx_kernel_args *a, bn_dims d, float eps) {
  const float *x = cx_f32(&a->in[0]);
  double *buf = a->scratch, *su = buf, *suu = buf + d.c;
  float *k = (float *)(buf + 2 * d.c + 1);
  for (int64_t c = 0; c < d.c; c++) buf[c] = x[c * d.s];
  buf[d.c] = 1;
  CX_TRY(cx_bn_pool(a, buf, d.c + 1));
  for (int64_t c = 0; c < d.c; c++) k[c] = (float)(buf[c] / buf[d.c]);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < d.c; c++) channel_shifted(x, d, c, k[c], &su[c], &suu[c]);
  buf[2 * d.c] = (double)d.n * d.s;
  CX_TRY(cx_bn_pool(a, buf, 2 * d.c + 1));
  double m = buf[2 * d.c];
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < d.c; c++) bn_train_statistics(a, d, c, k[c], su[c], suu[c], m, eps);
  return CX_OK;
}

/* 2C + 1 doubles for the pooled sums, and room for the C float shifts after them */
size_t cx_bn_pool_bytes(int64_t c) {
  return (2 * (size_t)c + 1) * sizeof(double) + (size_t)c * sizeof(float);
}

cx_status cx_bn_pool(const cx_kernel_args *a, double *buf, int64_t n) {
  const cx_replicas *r = a->sync_stats;
  return r ? r->reduce(r->user, buf, n, CX_REDUCE_SUM) : CX_OK;
}

void cx_bn_save_channel(const cx_kernel_args *a, int64_t c, float mean, float invstd, double var,
                        double m) {
  cx_f32(&a->out[1])[c] = mean;
  cx_f32(&a->out[2])[c] = invstd;
  if (a->training && !a->recompute) {
    float mom = cx_node_float(a->node, "momentum", 0.9f);
    double unbiased = m > 1 ? var * m / (m - 1) : var;
    float *rm = cx_f32(&a->in[3]), *rv = cx_f32(&a->in[4]);
    rm[c] = rm[c] * mom + mean * (1 - mom);
    rv[c] = (float)(rv[c] * mom + unbiased * (1 - mom));
  }
}

static cx_status bn_train_run(const cx_kernel_args *a) {
  if (a->state) return cx_bn_nhwc_train(a, bn_threads(a));
  bn_dims d = bn_dims_of(&a->in[0]);
  float eps = cx_node_float(a->node, "epsilon", 1e-5f);
  if (a->sync_stats) return bn_train_synced(a, d, eps);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < d.c; c++) bn_train_channel(a, d, c, eps);
  return CX_OK;
}

/* dX = scale * invstd * (dY - mean(dY) - xhat * mean(dY * xhat)), dScale = sum(dY * xhat),
 * dBias = sum(dY), with xhat = (X - mean) * invstd. With a fused activation its gradient, dY
 * masked, is first written into dX and stands for dY. Channel c's sums sum(dY) and
 * sum(dY * (X - mean)) first: */
static void grad_sums(const cx_kernel_args *a, bn_dims d, int64_t c, double *sdy, double *sdyx) {
  const float *dy = cx_f32(&a->in[0]), *x = cx_f32(&a->in[1]);
  float mean = cx_f32(&a->in[3])[c], invstd = cx_f32(&a->in[4])[c], lo, hi;
  *sdy = *sdyx = 0;
  if (cx_bn_activation(a->node, &lo, &hi)) {
    float kf, bf;
    cx_bn_coefficients(cx_f32(&a->in[2])[c], cx_f32(&a->in[5])[c], mean, invstd, &kf, &bf);
    for (int64_t n = 0; n < d.n; n++) {
      int64_t o = (n * d.c + c) * d.s;
      plane_mask(dy + o, x + o, cx_f32(&a->out[0]) + o, d.s, kf, bf, lo, hi);
    }
    dy = cx_f32(&a->out[0]);
  }
  for (int64_t n = 0; n < d.n; n++) {
    int64_t o = (n * d.c + c) * d.s;
    plane_dot(dy + o, x + o, d.s, mean, sdy, sdyx);
  }
  cx_f32(&a->out[1])[c] = (float)(*sdyx * invstd);
  cx_f32(&a->out[2])[c] = (float)*sdy;
}

/* then dX from the sums over m values */
static void grad_apply(const cx_kernel_args *a, bn_dims d, int64_t c, double sdy, double sdyx,
                       double m) {
  const float *x = cx_f32(&a->in[1]);
  float mean = cx_f32(&a->in[3])[c], invstd = cx_f32(&a->in[4])[c], lo, hi;
  float *dx = cx_f32(&a->out[0]);
  const float *dy = cx_bn_activation(a->node, &lo, &hi) ? dx : cx_f32(&a->in[0]);
  float k = cx_f32(&a->in[2])[c] * invstd;
  float kx = (float)(k * invstd * invstd * sdyx / m), b = (float)(-k * sdy / m) + kx * mean;
  /* dX = k * dY - kx * X + b, with the mean terms folded into b */
  for (int64_t n = 0; n < d.n; n++) {
    int64_t o = (n * d.c + c) * d.s;
    if (dy == dx) plane_grad_in_place(dx + o, x + o, d.s, k, kx, b);
    else plane_grad(dy + o, x + o, dx + o, d.s, k, kx, b);
  }
}

static void bn_grad_channel(const cx_kernel_args *a, bn_dims d, int64_t c) {
  double sdy, sdyx;
  grad_sums(a, d, c, &sdy, &sdyx);
  grad_apply(a, d, c, sdy, sdyx, (double)d.n * d.s);
}

/* Synchronised BatchNorm: the sums (and the count) pooled over the replicas, 2C + 1 doubles,
 * before dX; dScale and dBias stay this replica's, since the gradient reduction averages them
 * like every parameter's. */
static cx_status bn_grad_synced(const cx_kernel_args *a, bn_dims d) {
  double *sums = a->scratch;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < d.c; c++) grad_sums(a, d, c, &sums[c], &sums[d.c + c]);
  sums[2 * d.c] = (double)d.n * d.s;
  CX_TRY(cx_bn_pool(a, sums, 2 * d.c + 1));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < d.c; c++) grad_apply(a, d, c, sums[c], sums[d.c + c], sums[2 * d.c]);
  return CX_OK;
}

static cx_status bn_grad_run(const cx_kernel_args *a) {
  if (a->state) return cx_bn_nhwc_grad(a, bn_threads(a));
  bn_dims d = bn_dims_of(&a->in[1]);
  if (a->sync_stats) return bn_grad_synced(a, d);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < d.c; c++) bn_grad_channel(a, d, c);
  return CX_OK;
}

const cx_kernel cx_cpu_norm[] = {
    {"BatchNormalization", bn_prepare, bn_infer_run, free, CX_LAYOUT_SHARED, NULL, 0},
    {"BatchNormTrain", bn_prepare, bn_train_run, free, CX_LAYOUT_SHARED, NULL, CX_ACT_BF16_ANY},
    {"BatchNormGrad", bn_grad_prepare, bn_grad_run, free, CX_LAYOUT_SHARED, NULL, CX_ACT_BF16_ANY},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
