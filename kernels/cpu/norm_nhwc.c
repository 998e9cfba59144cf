#include "norm_nhwc.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "eltwise_engine.h"

/* The row loops are written once in plain C with `omp simd` over channels and compiled twice:
 * for AVX-512 and for the baseline target (cx_cpu_avx512 picks at run time). Per-thread sums
 * collect BLOCK rows in float, then fold into double, so long reductions keep their accuracy. */

enum { BLOCK = 64 };

#define ROW_LOOPS(SFX, ATTR)                                                                      \
  /* acc[c] += sum_r x[r][c]; acq[c] += sum_r (x[r][c] - m[c])^2 when m is given */               \
  ATTR static void sums_##SFX(const float *restrict x, int64_t rows, int64_t C,                   \
                              const float *restrict m, float *restrict blk, double *restrict acc) {\
    for (int64_t r0 = 0; r0 < rows; r0 += BLOCK) {                                                \
      int64_t r1 = r0 + BLOCK < rows ? r0 + BLOCK : rows;                                         \
      memset(blk, 0, sizeof(float) * (size_t)C);                                                  \
      for (int64_t r = r0; r < r1; r++) {                                                         \
        const float *xr = x + r * C;                                                              \
        if (m) {                                                                                  \
          _Pragma("omp simd") for (int64_t c = 0; c < C; c++) blk[c] += (xr[c] - m[c]) *          \
                                                                        (xr[c] - m[c]);           \
        } else {                                                                                  \
          _Pragma("omp simd") for (int64_t c = 0; c < C; c++) blk[c] += xr[c];                    \
        }                                                                                         \
      }                                                                                           \
      for (int64_t c = 0; c < C; c++) acc[c] += blk[c];                                           \
    }                                                                                             \
  }                                                                                               \
  /* sdy[c] += sum_r dy[r][c], sdyx[c] += sum_r dy[r][c] * (x[r][c] - m[c]) */                    \
  ATTR static void dots_##SFX(const float *restrict dy, const float *restrict x, int64_t rows,    \
                              int64_t C, const float *restrict m, float *restrict blk,            \
                              double *restrict sdy, double *restrict sdyx) {                      \
    float *restrict b2 = blk + C;                                                                 \
    for (int64_t r0 = 0; r0 < rows; r0 += BLOCK) {                                                \
      int64_t r1 = r0 + BLOCK < rows ? r0 + BLOCK : rows;                                         \
      memset(blk, 0, sizeof(float) * 2 * (size_t)C);                                              \
      for (int64_t r = r0; r < r1; r++) {                                                         \
        const float *dr = dy + r * C, *xr = x + r * C;                                            \
        _Pragma("omp simd") for (int64_t c = 0; c < C; c++) {                                     \
          blk[c] += dr[c];                                                                        \
          b2[c] += dr[c] * (xr[c] - m[c]);                                                        \
        }                                                                                         \
      }                                                                                           \
      for (int64_t c = 0; c < C; c++) {                                                           \
        sdy[c] += blk[c];                                                                         \
        sdyx[c] += b2[c];                                                                         \
      }                                                                                           \
    }                                                                                             \
  }                                                                                               \
  /* y[r][c] = x[r][c] * k[c] + b[c] */                                                           \
  ATTR static void affine_##SFX(const float *restrict x, float *restrict y, int64_t rows,         \
                                int64_t C, const float *restrict k, const float *restrict b) {    \
    for (int64_t r = 0; r < rows; r++) {                                                          \
      const float *xr = x + r * C;                                                                \
      float *yr = y + r * C;                                                                      \
      _Pragma("omp simd") for (int64_t c = 0; c < C; c++) yr[c] = xr[c] * k[c] + b[c];            \
    }                                                                                             \
  }                                                                                               \
  /* dx[r][c] = k[c] * dy[r][c] - kx[c] * x[r][c] + b[c] */                                       \
  ATTR static void grad_rows_##SFX(const float *restrict dy, const float *restrict x,                    \
                            float *restrict dx, int64_t rows, int64_t C, const float *restrict k, \
                            const float *restrict kx, const float *restrict b) {                  \
    for (int64_t r = 0; r < rows; r++) {                                                          \
      const float *dr = dy + r * C, *xr = x + r * C;                                              \
      float *o = dx + r * C;                                                                      \
      _Pragma("omp simd") for (int64_t c = 0; c < C; c++) o[c] = k[c] * dr[c] - kx[c] * xr[c] +   \
                                                                 b[c];                            \
    }                                                                                             \
  }

#if defined(__x86_64__) || defined(__i386__)
ROW_LOOPS(avx512, __attribute__((target("avx512f"))))
#define HAVE_AVX512_LOOPS 1
#endif
ROW_LOOPS(c, )

/* Run-time choice between the two compilations. */
#ifdef HAVE_AVX512_LOOPS
#define PICK(v, fn, ...) ((v) ? fn##_avx512(__VA_ARGS__) : fn##_c(__VA_ARGS__))
#else
#define PICK(v, fn, ...) fn##_c(__VA_ARGS__)
#endif

/* The scratch: per-thread double partials (2C each), then float rows: per-thread blocks (2C each)
 * and four per-channel coefficient rows. */
typedef struct bn_scratch {
  double *part;
  float *blk, *m, *k, *kx, *b;
} bn_scratch;

size_t cx_bn_nhwc_scratch(int64_t c, int threads) {
  return (size_t)threads * 2 * (size_t)c * (sizeof(double) + sizeof(float)) +
         4 * (size_t)c * sizeof(float);
}

static bn_scratch scratch_of(const cx_kernel_args *a, int64_t C, int threads) {
  bn_scratch s = {.part = a->scratch};
  s.blk = (float *)(s.part + (size_t)threads * 2 * (size_t)C);
  s.m = s.blk + (size_t)threads * 2 * (size_t)C;
  s.k = s.m + C;
  s.kx = s.k + C;
  s.b = s.kx + C;
  return s;
}

typedef struct rows_of {
  int64_t rows, c;
} rows_of;

static rows_of dims(const cx_tensor *x) {
  return (rows_of){x->shape.d[0] * x->shape.d[2] * x->shape.d[3], x->shape.d[1]};
}

/* This thread's rows [r0, r1). */
static void thread_rows(int64_t rows, int64_t *r0, int64_t *r1) {
  int t = omp_get_thread_num(), nt = omp_get_num_threads();
  *r0 = rows * t / nt;
  *r1 = rows * (t + 1) / nt;
}

/* Sum of the threads' partials for channel c (slot 0 or 1). */
static double reduce(const bn_scratch *s, int64_t C, int nt, int slot, int64_t c) {
  double t = 0;
  for (int i = 0; i < nt; i++) t += s->part[((size_t)i * 2 + (size_t)slot) * (size_t)C + (size_t)c];
  return t;
}

void cx_bn_nhwc_infer(const cx_kernel_args *a, int threads) {
  rows_of d = dims(&a->in[0]);
  bn_scratch s = scratch_of(a, d.c, threads);
  const float *scale = cx_f32(&a->in[1]), *bias = cx_f32(&a->in[2]);
  const float *mean = cx_f32(&a->in[3]), *var = cx_f32(&a->in[4]);
  float eps = cx_node_float(a->node, "epsilon", 1e-5f);
  for (int64_t c = 0; c < d.c; c++) {
    s.k[c] = scale[c] / sqrtf(var[c] + eps);
    s.b[c] = bias[c] - mean[c] * s.k[c];
  }
  const float *x = cx_f32(&a->in[0]);
  float *y = cx_f32(&a->out[0]);
  bool v = cx_cpu_avx512();
  (void)v;
#pragma omp parallel num_threads(threads)
  {
    int64_t r0, r1;
    thread_rows(d.rows, &r0, &r1);
    PICK(v, affine, x + r0 * d.c, y + r0 * d.c, r1 - r0, d.c, s.k, s.b);
  }
}

/* This thread's partial per-channel sums of its rows into slot 0, or (with deviations from s->m)
 * squared deviations into slot 1. */
static void partial_sums(const bn_scratch *s, const float *x, rows_of d, int slot, bool v) {
  int t = omp_get_thread_num();
  int64_t r0, r1;
  thread_rows(d.rows, &r0, &r1);
  double *acc = s->part + ((size_t)t * 2 + (size_t)slot) * (size_t)d.c;
  memset(acc, 0, sizeof(double) * (size_t)d.c);
  PICK(v, sums, x + r0 * d.c, r1 - r0, d.c, slot ? s->m : NULL, s->blk + (size_t)t * 2 * (size_t)d.c,
       acc);
  (void)v;
}

/* Channel c's statistics once its variance is known: outputs, running statistics, and the affine
 * coefficients of the normalisation. As bn_train_channel in norm.c. */
static void train_finish(const cx_kernel_args *a, const bn_scratch *s, int64_t c, double var,
                         double m, float eps) {
  float mean = s->m[c], invstd = (float)(1.0 / sqrt(var + eps));
  s->k[c] = cx_f32(&a->in[1])[c] * invstd;
  s->b[c] = cx_f32(&a->in[2])[c] - mean * s->k[c];
  cx_f32(&a->out[1])[c] = mean;
  cx_f32(&a->out[2])[c] = invstd;
  if (a->training) {
    float mom = cx_node_float(a->node, "momentum", 0.9f);
    double unbiased = m > 1 ? var * m / (m - 1) : var;
    float *rm = cx_f32(&a->in[3]), *rv = cx_f32(&a->in[4]);
    rm[c] = rm[c] * mom + mean * (1 - mom);
    rv[c] = (float)(rv[c] * mom + unbiased * (1 - mom));
  }
}

void cx_bn_nhwc_train(const cx_kernel_args *a, int threads) {
  rows_of d = dims(&a->in[0]);
  bn_scratch s = scratch_of(a, d.c, threads);
  const float *x = cx_f32(&a->in[0]);
  float *y = cx_f32(&a->out[0]);
  float eps = cx_node_float(a->node, "epsilon", 1e-5f);
  double m = (double)d.rows;
  bool v = cx_cpu_avx512();
#pragma omp parallel num_threads(threads)
  {
    int nt = omp_get_num_threads();
    partial_sums(&s, x, d, 0, v);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t c = 0; c < d.c; c++) s.m[c] = (float)(reduce(&s, d.c, nt, 0, c) / m);
    partial_sums(&s, x, d, 1, v);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t c = 0; c < d.c; c++) train_finish(a, &s, c, reduce(&s, d.c, nt, 1, c) / m, m, eps);
    int64_t r0, r1;
    thread_rows(d.rows, &r0, &r1);
    PICK(v, affine, x + r0 * d.c, y + r0 * d.c, r1 - r0, d.c, s.k, s.b);
  }
}

/* BatchNormGrad (dY, X, scale, mean, invstd) -> (dX, dScale, dBias); the algebra of norm.c's
 * bn_grad_channel: dX = k * dY - kx * X + b with the mean terms folded into b. */
void cx_bn_nhwc_grad(const cx_kernel_args *a, int threads) {
  rows_of d = dims(&a->in[1]);
  bn_scratch s = scratch_of(a, d.c, threads);
  const float *dy = cx_f32(&a->in[0]), *x = cx_f32(&a->in[1]), *scale = cx_f32(&a->in[2]);
  const float *mean = cx_f32(&a->in[3]), *invstd = cx_f32(&a->in[4]);
  float *dx = cx_f32(&a->out[0]);
  double m = (double)d.rows;
  bool v = cx_cpu_avx512();
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t r0, r1;
    thread_rows(d.rows, &r0, &r1);
    double *p0 = s.part + (size_t)t * 2 * (size_t)d.c, *p1 = p0 + d.c;
    memset(p0, 0, sizeof(double) * 2 * (size_t)d.c);
    PICK(v, dots, dy + r0 * d.c, x + r0 * d.c, r1 - r0, d.c, mean,
         s.blk + (size_t)t * 2 * (size_t)d.c, p0, p1);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t c = 0; c < d.c; c++) {
      double sdy = reduce(&s, d.c, nt, 0, c), sdyx = reduce(&s, d.c, nt, 1, c);
      float is = invstd[c], k = scale[c] * is, kx = (float)(k * is * is * sdyx / m);
      s.k[c] = k;
      s.kx[c] = kx;
      s.b[c] = (float)(-k * sdy / m) + kx * mean[c];
      cx_f32(&a->out[1])[c] = (float)(sdyx * is);
      cx_f32(&a->out[2])[c] = (float)sdy;
    }
    PICK(v, grad_rows, dy + r0 * d.c, x + r0 * d.c, dx + r0 * d.c, r1 - r0, d.c, s.k, s.kx, s.b);
  }
  (void)v;
}
