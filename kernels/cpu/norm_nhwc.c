#include "norm_nhwc.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "../../core/ops/norm.h"
#include "eltwise_engine.h"
#include "bf16_vec.h"
#include "norm_bf16.h"
#include "stage.h"

/* Channels-last data is a flat run of rows of C floats. Loops over rows with an inner loop over C
 * waste most of a vector when C is small (8, 24, 72 in a slim MobileNet), so every loop runs
 * instead over flat tiles of T floats, a multiple of lcm(C, 16) (T / C whole rows; tile_of):
 * per-channel coefficients are tiled to T once, and sums collect in T lanes that are folded to C
 * channels at the end. On staged pieces (hot in L1) the sums run lane group by lane group (16
 * lanes) down the tiles, so each group's partial sums stay in registers instead of being stored
 * and reloaded tile after tile (the same order of additions per lane: the same results); on f32
 * data straight from memory tile by tile, which reads it sequentially (lane group by lane group
 * read in strides: the f32 BatchNorm of a ResNet-20 step took 21 ms instead of 14.5). A thread's last tile may be short (a whole number of rows), which the same loops handle.
 *
 * The loops are written once in plain C with `omp simd` and compiled three times, for AVX-512,
 * AVX2 + FMA and the baseline target (isa() picks at run time). The gradient's sums collect BLOCK
 * tiles in float, then fold into double, so long reductions keep their accuracy; the forward's
 * statistics sum in double throughout (shifted_sums).
 *
 * bf16 activations (core/act_dtype.h: X, Y, dY, dX each f32 or bf16) run the same loops on
 * pieces of whole tiles staged through per-thread f32 buffers (kernels/cpu/stage.h); the pieces
 * keep each sum's order, so the results are the f32 loops' on the widened values. Where every
 * argument of a pass is bf16, norm_bf16.c's loops read it in place instead (the element-wise
 * passes, and the gradient's sums over tiles of at most 128 floats), with the same results. */

enum { BLOCK = 32, LANES = 16, MIN_TILE = 128 };
enum { ISA_C, ISA_AVX2, ISA_AVX512 };

#define TILE_LOOPS(SFX, ATTR)                                                                     \
  /* l0[j] += x[j] - k[j], l1[j] += (x[j] - k[j])^2, in double: the mean is k + sum / n, and   \
   * float lanes would leave it an ulp or two off, which moves a fused ReLU's kink */            \
  ATTR static void shifted_sums_##SFX(const float *restrict x, int64_t n, int64_t t,              \
                                      const float *restrict k, double *restrict l0,               \
                                      double *restrict l1, bool hot) {                            \
    int64_t whole = hot ? n / t * t : 0;                                                          \
    for (int64_t j = 0; j < t; j += LANES) {                                                      \
      double s0[LANES], s1[LANES];                                                                \
      for (int q = 0; q < LANES; q++) s0[q] = l0[j + q], s1[q] = l1[j + q];                       \
      for (int64_t o = 0; o < whole; o += t) {                                                    \
        const float *xo = x + o + j;                                                              \
        _Pragma("omp simd") for (int q = 0; q < LANES; q++) {                                     \
          double u = (double)xo[q] - k[j + q];                                                    \
          s0[q] += u;                                                                             \
          s1[q] += u * u;                                                                         \
        }                                                                                         \
      }                                                                                           \
      for (int q = 0; q < LANES; q++) l0[j + q] = s0[q], l1[j + q] = s1[q];                       \
    }                                                                                             \
    for (int64_t o = whole; o < n; o += t) {                                                      \
      int64_t len = n - o < t ? n - o : t;                                                        \
      const float *xo = x + o;                                                                    \
      _Pragma("omp simd") for (int64_t j = 0; j < len; j++) {                                     \
        double u = (double)xo[j] - k[j];                                                          \
        l0[j] += u;                                                                               \
        l1[j] += u * u;                                                                           \
      }                                                                                           \
    }                                                                                             \
  }                                                                                               \
  /* l0[j] += dy[j], l1[j] += dy[j] * (x[j] - m[j]) */                                            \
  ATTR static void dots_##SFX(const float *restrict dy, const float *restrict x, int64_t n,       \
                              int64_t t, const float *restrict m, float *restrict l0,             \
                              float *restrict l1, bool hot) {                                     \
    int64_t whole = hot ? n / t * t : 0;                                                          \
    for (int64_t j = 0; j < t; j += LANES) {                                                      \
      float s0[LANES], s1[LANES];                                                                 \
      for (int q = 0; q < LANES; q++) s0[q] = l0[j + q], s1[q] = l1[j + q];                       \
      for (int64_t o = 0; o < whole; o += t) {                                                    \
        const float *d = dy + o + j, *xo = x + o + j;                                             \
        _Pragma("omp simd") for (int q = 0; q < LANES; q++) {                                     \
          s0[q] += d[q];                                                                          \
          s1[q] += d[q] * (xo[q] - m[j + q]);                                                     \
        }                                                                                         \
      }                                                                                           \
      for (int q = 0; q < LANES; q++) l0[j + q] = s0[q], l1[j + q] = s1[q];                       \
    }                                                                                             \
    for (int64_t o = whole; o < n; o += t) {                                                      \
      int64_t len = n - o < t ? n - o : t;                                                        \
      const float *d = dy + o, *xo = x + o;                                                       \
      _Pragma("omp simd") for (int64_t j = 0; j < len; j++) {                                     \
        l0[j] += d[j];                                                                            \
        l1[j] += d[j] * (xo[j] - m[j]);                                                           \
      }                                                                                           \
    }                                                                                             \
  }                                                                                               \
  /* y = clamp(x * k + b, lo, hi) */                                                            \
  ATTR static void affine_clamp_##SFX(const float *restrict x, float *restrict y, int64_t n,      \
                                      int64_t t, const float *restrict k,                         \
                                      const float *restrict b, float lo, float hi) {              \
    for (int64_t o = 0; o < n; o += t) {                                                          \
      int64_t len = n - o < t ? n - o : t;                                                        \
      const float *xo = x + o;                                                                    \
      float *yo = y + o;                                                                          \
      _Pragma("omp simd") for (int64_t j = 0; j < len; j++) {                                     \
        float z = xo[j] * k[j] + b[j];                                                            \
        z = z > lo ? z : lo; /* fmaxf and fminf would not vectorise (NaN rules) */                \
        yo[j] = z < hi ? z : hi;                                                                  \
      }                                                                                           \
    }                                                                                             \
  }                                                                                               \
  /* dots of dz = dy where lo < x * kf + bf < hi (the fused activation's gradient), else 0. dy is \
  * read unconditionally: read under the condition it became a masked load issued only after   \
  * x's load and the compare, which serialised the two streams (2.5x slower on cold data) */    \
  ATTR static void dots_masked_##SFX(const float *restrict dy, const float *restrict x,          \
                                     int64_t n, int64_t t, const float *restrict m,               \
                                     const float *restrict kf, const float *restrict bf,          \
                                     float lo, float hi, float *restrict l0,                      \
                                     float *restrict l1, bool hot) {                              \
    int64_t whole = hot ? n / t * t : 0;                                                          \
    for (int64_t j = 0; j < t; j += LANES) {                                                      \
      float s0[LANES], s1[LANES];                                                                 \
      for (int q = 0; q < LANES; q++) s0[q] = l0[j + q], s1[q] = l1[j + q];                       \
      for (int64_t o = 0; o < whole; o += t) {                                                    \
        const float *d = dy + o + j, *xo = x + o + j;                                             \
        _Pragma("omp simd") for (int q = 0; q < LANES; q++) {                                     \
          float z = xo[q] * kf[j + q] + bf[j + q], dq = d[q], dz = z > lo && z < hi ? dq : 0.0f;  \
          s0[q] += dz;                                                                            \
          s1[q] += dz * (xo[q] - m[j + q]);                                                       \
        }                                                                                         \
      }                                                                                           \
      for (int q = 0; q < LANES; q++) l0[j + q] = s0[q], l1[j + q] = s1[q];                       \
    }                                                                                             \
    for (int64_t o = whole; o < n; o += t) {                                                      \
      int64_t len = n - o < t ? n - o : t;                                                        \
      const float *d = dy + o, *xo = x + o;                                                       \
      _Pragma("omp simd") for (int64_t j = 0; j < len; j++) {                                     \
        float z = xo[j] * kf[j] + bf[j], dj = d[j], dz = z > lo && z < hi ? dj : 0.0f;            \
        l0[j] += dz;                                                                              \
        l1[j] += dz * (xo[j] - m[j]);                                                             \
      }                                                                                           \
    }                                                                                             \
  }                                                                                               \
  /* grad with dz in place of dy */                                                               \
  ATTR static void grad_masked_##SFX(const float *restrict dy, const float *restrict x,          \
                                     float *restrict dx, int64_t n, int64_t t,                    \
                                     const float *restrict k, const float *restrict kx,           \
                                     const float *restrict b, const float *restrict kf,           \
                                     const float *restrict bf, float lo, float hi) {              \
    for (int64_t o = 0; o < n; o += t) {                                                          \
      int64_t len = n - o < t ? n - o : t;                                                        \
      const float *d = dy + o, *xo = x + o;                                                       \
      float *g = dx + o;                                                                          \
      _Pragma("omp simd") for (int64_t j = 0; j < len; j++) {                                     \
        float z = xo[j] * kf[j] + bf[j], dj = d[j], dz = z > lo && z < hi ? dj : 0.0f;            \
        g[j] = k[j] * dz - kx[j] * xo[j] + b[j];                                                  \
      }                                                                                           \
    }                                                                                             \
  }                                                                                               \
  /* y = x * k + b */                                                                             \
  ATTR static void affine_##SFX(const float *restrict x, float *restrict y, int64_t n, int64_t t, \
                                const float *restrict k, const float *restrict b) {               \
    for (int64_t o = 0; o < n; o += t) {                                                          \
      int64_t len = n - o < t ? n - o : t;                                                        \
      const float *xo = x + o;                                                                    \
      float *yo = y + o;                                                                          \
      _Pragma("omp simd") for (int64_t j = 0; j < len; j++) yo[j] = xo[j] * k[j] + b[j];          \
    }                                                                                             \
  }                                                                                               \
  /* dx = k * dy - kx * x + b */                                                                  \
  ATTR static void grad_##SFX(const float *restrict dy, const float *restrict x,                  \
                              float *restrict dx, int64_t n, int64_t t, const float *restrict k,  \
                              const float *restrict kx, const float *restrict b) {                \
    for (int64_t o = 0; o < n; o += t) {                                                          \
      int64_t len = n - o < t ? n - o : t;                                                        \
      const float *d = dy + o, *xo = x + o;                                                       \
      float *g = dx + o;                                                                          \
      _Pragma("omp simd") for (int64_t j = 0; j < len; j++) g[j] = k[j] * d[j] - kx[j] * xo[j] +  \
                                                                  b[j];                           \
    }                                                                                             \
  }

#if defined(__x86_64__) || defined(__i386__)
TILE_LOOPS(avx512, __attribute__((target("avx512f"))))
TILE_LOOPS(avx2, __attribute__((target("avx2,fma"))))
#define PICK(v, fn, ...)                                                                          \
  ((v) == ISA_AVX512 ? fn##_avx512(__VA_ARGS__)                                                   \
   : (v) == ISA_AVX2 ? fn##_avx2(__VA_ARGS__)                                                     \
                     : fn##_c(__VA_ARGS__))
#else
#define PICK(v, fn, ...) fn##_c(__VA_ARGS__)
#endif
TILE_LOOPS(c, )

/* which compilation of the loops runs: the widest the CPU has and the switches allow */
static int isa(void) { return cx_cpu_avx512() ? ISA_AVX512 : cx_cpu_avx2() ? ISA_AVX2 : ISA_C; }

static int64_t gcd(int64_t a, int64_t b) { return b ? gcd(b, a % b) : a; }

/* The tile: a multiple of lcm(c, LANES) of at least MIN_TILE floats. Shorter tiles (16 floats for
 * 16 channels) leave each loop one vector long, so the compiler's unrolled vector body never runs
 * and the lane sums wait on each other through memory (measured: the fused-ReLU gradient of a
 * 16-channel layer ran 3x slower than at 32 channels). */
static int64_t tile_of(int64_t c) {
  int64_t l = c / gcd(c, LANES) * LANES;
  return (MIN_TILE + l - 1) / l * l;
}

typedef struct bn_geom {
  int64_t rows, c, t; /* t: the tile (tile_of) */
  int64_t piece;      /* a staged piece: whole tiles, about CX_STAGE floats */
} bn_geom;

static int64_t piece_of(int64_t t) { return (CX_STAGE > t ? CX_STAGE / t : 1) * t; }

/* Channels-last [N, C, H, W], or any [N, C, 1...] (norm.c's bn_rows): numel / C rows of C. */
static bn_geom geom_of(const cx_tensor *x) {
  int64_t c = x->shape.d[1], t = tile_of(c);
  return (bn_geom){cx_shape_numel(&x->shape) / c, c, t, piece_of(t)};
}

/* The scratch: per-thread double partials (2C each), per-thread lanes (2T doubles each), six
 * tiled per-channel rows (T each): the mean, the coefficients of dX (k, kx, b), and those of the
 * forward normalisation (kf, bf) that a fused activation's gradient recomputes; per-thread
 * staging slots for bf16 arguments (STAGE_SLOTS pieces each); and the 2C + 1 sums a
 * synchronised BatchNorm pools over the replicas (cx_bn_pool). */
enum { STAGE_SLOTS = 3 };
typedef struct bn_scratch {
  double *part, *pool;
  float *lanes, *m, *k, *kx, *b, *kf, *bf, *stage;
} bn_scratch;

size_t cx_bn_nhwc_scratch(int64_t c, int threads) {
  int64_t t = tile_of(c);
  return (size_t)threads * (2 * (size_t)c + 2 * (size_t)t) * sizeof(double) +
         6 * (size_t)t * sizeof(float) +
         (size_t)threads * STAGE_SLOTS * (size_t)piece_of(t) * sizeof(float) + cx_bn_pool_bytes(c);
}

static bn_scratch scratch_of(const cx_kernel_args *a, const bn_geom *d, int threads) {
  bn_scratch s = {.part = a->scratch};
  s.lanes = (float *)(s.part + (size_t)threads * 2 * (size_t)d->c);
  s.m = s.lanes + (size_t)threads * 4 * (size_t)d->t;
  s.k = s.m + d->t;
  s.kx = s.k + d->t;
  s.b = s.kx + d->t;
  s.kf = s.b + d->t;
  s.bf = s.kf + d->t;
  s.stage = s.bf + d->t;
  /* 6T + 4T·threads + 3·piece·threads floats: a multiple of 16 */
  s.pool = (double *)(s.stage + (size_t)threads * STAGE_SLOTS * (size_t)d->piece);
  return s;
}

/* This thread's staging slot k (a piece of floats). */
static float *slot(const bn_scratch *s, const bn_geom *d, int k) {
  return s->stage + ((size_t)omp_get_thread_num() * STAGE_SLOTS + (size_t)k) * (size_t)d->piece;
}

/* How many floats one call of the loops takes: all n when no argument is staged. */
static int64_t step_of(const bn_geom *d, bool staged, int64_t n) {
  return staged ? d->piece : n > 0 ? n : 1;
}

/* Whether any of the tensors (NULL: none) holds bf16. */
static bool any_bf16(const cx_tensor *a, const cx_tensor *b, const cx_tensor *c) {
  return a->dtype == CX_BF16 || (b && b->dtype == CX_BF16) || (c && c->dtype == CX_BF16);
}

/* Whether every one of the tensors (c NULL: a and b) holds bf16 and the CPU reads it directly
 * (norm_bf16.h): the passes then skip the staging. */
static bool all_bf16(const cx_tensor *a, const cx_tensor *b, const cx_tensor *c) {
  return a->dtype == CX_BF16 && b->dtype == CX_BF16 && (!c || c->dtype == CX_BF16) &&
         cx_cpu_bf16_direct();
}

/* Repeats row[0..c) over the tile (row is its first c entries). */
static void tile(float *row, const bn_geom *d) {
  for (int64_t j = d->c; j < d->t; j++) row[j] = row[j - d->c];
}

/* This thread's floats [f0, f1) of the tensor: whole tiles, except the last thread's end. */
static void thread_span(const bn_geom *d, int64_t *f0, int64_t *f1) {
  int t = omp_get_thread_num(), nt = omp_get_num_threads();
  int64_t tiles = (d->rows * d->c + d->t - 1) / d->t, n = d->rows * d->c;
  *f0 = tiles * t / nt * d->t;
  *f1 = tiles * (t + 1) / nt * d->t;
  if (*f0 > n) *f0 = n;
  if (*f1 > n) *f1 = n;
}

/* Two sums at once, into slots 0 and 1: for BatchNormGrad sum(dy) and sum(dy * (x - m)), with a
 * fused activation (act) of dy masked by it; with dy NULL (BatchNormTrain's one pass) sum(x - m)
 * and sum((x - m)^2), m being the shift. */
static void partial_pairs(const bn_scratch *s, const bn_geom *d, const cx_tensor *dyt,
                          const cx_tensor *xt, const float *act, int v) {
  int th = omp_get_thread_num();
  float *l0 = s->lanes + (size_t)th * 4 * (size_t)d->t, *l1 = l0 + d->t;
  double *d0 = (double *)l0, *d1 = d0 + d->t; /* the same room, for dy NULL */
  double *a0 = s->part + (size_t)th * 2 * (size_t)d->c, *a1 = a0 + d->c;
  int64_t f0, f1;
  thread_span(d, &f0, &f1);
  memset(a0, 0, sizeof(double) * 2 * (size_t)d->c);
  bool staged = any_bf16(xt, dyt, NULL), direct = dyt && all_bf16(xt, dyt, NULL) &&
                                          cx_bn_bf16_dots_fit(d->t);
  int64_t step = step_of(d, staged, BLOCK * d->t);
  for (int64_t o = f0; o < f1; o += BLOCK * d->t) {
    int64_t n = f1 - o < BLOCK * d->t ? f1 - o : BLOCK * d->t;
    memset(d0, 0, sizeof(double) * 2 * (size_t)d->t);
    if (direct) /* norm_bf16.h */
      cx_bn_bf16_dots((const uint16_t *)dyt->data + o, (const uint16_t *)xt->data + o, n, d->t,
                      s->m, s->kf, s->bf, act, l0, l1);
    for (int64_t p = o; p < o + n && !direct; p += step) {
      int64_t len = o + n - p < step ? o + n - p : step;
      const float *xs = cx_stage_in(xt, p, len, slot(s, d, 0));
      const float *ds = dyt ? cx_stage_in(dyt, p, len, slot(s, d, 1)) : NULL;
      if (!dyt) PICK(v, shifted_sums, xs, len, d->t, s->m, d0, d1, staged);
      else if (act)
        PICK(v, dots_masked, ds, xs, len, d->t, s->m, s->kf, s->bf, act[0], act[1], l0, l1,
             staged);
      else PICK(v, dots, ds, xs, len, d->t, s->m, l0, l1, staged);
    }
    for (int64_t r = 0; r < d->t; r += d->c) /* the tile's rows, folded to channels */
      for (int64_t c = 0; c < d->c; c++) {
        a0[c] += dyt ? l0[r + c] : d0[r + c];
        a1[c] += dyt ? l1[r + c] : d1[r + c];
      }
  }
  (void)v;
}

/* Sum of the threads' partials for channel c (slot 0 or 1). */
static double reduce(const bn_scratch *s, const bn_geom *d, int nt, int slot, int64_t c) {
  double t = 0;
  for (int i = 0; i < nt; i++) t += s->part[((size_t)i * 2 + (size_t)slot) * (size_t)d->c + (size_t)c];
  return t;
}

/* y = x * k + b over this thread's span, clamped to act[0..1] unless act is NULL. */
static void normalize_span(const bn_scratch *s, const bn_geom *d, const cx_tensor *x,
                           const cx_tensor *y, const float *act, int v) {
  int64_t f0, f1;
  thread_span(d, &f0, &f1);
  if (all_bf16(x, y, NULL)) {
    cx_bn_bf16_affine((const uint16_t *)x->data + f0, (uint16_t *)y->data + f0, f1 - f0, d->t,
                      s->k, s->b, act);
    return;
  }
  int64_t step = step_of(d, any_bf16(x, y, NULL), f1 - f0);
  for (int64_t o = f0; o < f1; o += step) {
    int64_t len = f1 - o < step ? f1 - o : step;
    const float *xs = cx_stage_in(x, o, len, slot(s, d, 0));
    float *ys = cx_stage_out(y, o, slot(s, d, 1));
    if (act) PICK(v, affine_clamp, xs, ys, len, d->t, s->k, s->b, act[0], act[1]);
    else PICK(v, affine, xs, ys, len, d->t, s->k, s->b);
    cx_stage_commit(y, o, len, ys);
  }
  (void)v;
}

void cx_bn_nhwc_infer(const cx_kernel_args *a, int threads) {
  bn_geom d = geom_of(&a->in[0]);
  bn_scratch s = scratch_of(a, &d, threads);
  const float *scale = cx_f32(&a->in[1]), *bias = cx_f32(&a->in[2]);
  const float *mean = cx_f32(&a->in[3]), *var = cx_f32(&a->in[4]);
  float eps = cx_node_float(a->node, "epsilon", 1e-5f);
  for (int64_t c = 0; c < d.c; c++) {
    s.k[c] = scale[c] / sqrtf(var[c] + eps);
    s.b[c] = bias[c] - mean[c] * s.k[c];
  }
  tile(s.k, &d);
  tile(s.b, &d);
  int v = isa();
#pragma omp parallel num_threads(threads)
  normalize_span(&s, &d, &a->in[0], &a->out[0], NULL, v);
}

/* Channel c's statistics once its variance is known: outputs, running statistics, and the affine
 * coefficients of the normalisation. */
static void train_finish(const cx_kernel_args *a, const bn_scratch *s, int64_t c, double var,
                         double m, float eps) {
  float mean = s->m[c], invstd = (float)(1.0 / sqrt(var + eps));
  cx_bn_coefficients(cx_f32(&a->in[1])[c], cx_f32(&a->in[2])[c], mean, invstd, &s->k[c],
                     &s->b[c]);
  cx_bn_save_channel(a, c, mean, invstd, var, m);
}

/* The shift of each channel's sums: its first value, averaged over the replicas (one value on
 * each, so that all shift alike). A constant channel shifts by its value exactly (the average of
 * equal floats is exact in double) and its variance comes out exactly 0. */
static cx_status shift_of(const cx_kernel_args *a, const bn_scratch *s, const bn_geom *d) {
  const float *x = cx_stage_in(&a->in[0], 0, d->c, s->k); /* k is made after */
  for (int64_t c = 0; c < d->c; c++) s->pool[c] = x[c];
  s->pool[d->c] = 1;
  CX_TRY(cx_bn_pool(a, s->pool, d->c + 1));
  for (int64_t c = 0; c < d->c; c++) s->m[c] = (float)(s->pool[c] / s->pool[d->c]);
  tile(s->m, d);
  return CX_OK;
}

/* Thread 0 after the pass: the sums of the values' offsets u from the shift k (s->m), pooled over
 * the replicas with the count, give each channel's mean k + E[u] and variance E[u^2] - E[u]^2. */
static cx_status train_statistics(const cx_kernel_args *a, const bn_scratch *s, const bn_geom *d,
                                  int nt, float eps) {
  double *su = s->pool, *suu = s->pool + d->c;
  for (int64_t c = 0; c < d->c; c++) su[c] = reduce(s, d, nt, 0, c), suu[c] = reduce(s, d, nt, 1, c);
  s->pool[2 * d->c] = (double)d->rows;
  cx_status st = cx_bn_pool(a, s->pool, 2 * d->c + 1);
  double m = s->pool[2 * d->c];
  for (int64_t c = 0; c < d->c; c++) {
    double u = su[c] / m, var = suu[c] / m - u * u;
    s->m[c] = (float)(s->m[c] + u);
    train_finish(a, s, c, var > 0 ? var : 0, m, eps);
  }
  tile(s->k, d);
  tile(s->b, d);
  return st;
}

/* One pass over X for both statistics: the sums are shifted (shift_of) so that E[u^2] - E[u]^2
 * cancels little (u is about a standard deviation). Synchronised BatchNorm pools the shift, then
 * the sums, from thread 0, the thread that runs the program (collective calls come from it
 * alone). */
cx_status cx_bn_nhwc_train(const cx_kernel_args *a, int threads) {
  bn_geom d = geom_of(&a->in[0]);
  bn_scratch s = scratch_of(a, &d, threads);
  const cx_tensor *x = &a->in[0], *y = &a->out[0];
  float eps = cx_node_float(a->node, "epsilon", 1e-5f), bounds[2];
  const float *act = cx_bn_activation(a->node, &bounds[0], &bounds[1]) ? bounds : NULL;
  int v = isa();
  cx_status st = shift_of(a, &s, &d);
  if (st != CX_OK) return st;
#pragma omp parallel num_threads(threads)
  {
    partial_pairs(&s, &d, NULL, x, NULL, v);
#pragma omp barrier
    if (omp_get_thread_num() == 0) st = train_statistics(a, &s, &d, omp_get_num_threads(), eps);
#pragma omp barrier
    normalize_span(&s, &d, x, y, act, v);
  }
  return st;
}

/* The forward's normalisation coefficients, as train_finish made them, tiled. */
static void forward_coefficients(const cx_kernel_args *a, const bn_scratch *s, const bn_geom *d) {
  const float *scale = cx_f32(&a->in[2]), *mean = cx_f32(&a->in[3]);
  const float *invstd = cx_f32(&a->in[4]), *bias = cx_f32(&a->in[5]);
  for (int64_t c = 0; c < d->c; c++)
    cx_bn_coefficients(scale[c], bias[c], mean[c], invstd[c], &s->kf[c], &s->bf[c]);
  tile(s->kf, d);
  tile(s->bf, d);
}

/* dX = k * dz - kx * x + b over this thread's span, dz being dY masked by act unless it is NULL */
static void grad_span(const bn_scratch *s, const bn_geom *d, const cx_tensor *dy,
                      const cx_tensor *x, const cx_tensor *dx, const float *act, int v) {
  int64_t f0, f1;
  thread_span(d, &f0, &f1);
  if (all_bf16(dy, x, dx)) {
    cx_bn_bf16_grad((const uint16_t *)dy->data + f0, (const uint16_t *)x->data + f0,
                    (uint16_t *)dx->data + f0, f1 - f0, d->t, s->k, s->kx, s->b, s->kf, s->bf,
                    act);
    return;
  }
  int64_t step = step_of(d, any_bf16(dy, x, dx), f1 - f0);
  for (int64_t o = f0; o < f1; o += step) {
    int64_t len = f1 - o < step ? f1 - o : step;
    const float *ds = cx_stage_in(dy, o, len, slot(s, d, 0));
    const float *xs = cx_stage_in(x, o, len, slot(s, d, 1));
    float *gs = cx_stage_out(dx, o, slot(s, d, 2));
    if (act)
      PICK(v, grad_masked, ds, xs, gs, len, d->t, s->k, s->kx, s->b, s->kf, s->bf, act[0],
           act[1]);
    else PICK(v, grad, ds, xs, gs, len, d->t, s->k, s->kx, s->b);
    cx_stage_commit(dx, o, len, gs);
  }
  (void)v;
}

/* BatchNormGrad (dY, X, scale, mean, invstd[, B]) -> (dX, dScale, dBias); the algebra of norm.c's
 * bn_grad_channel: dX = k * dY - kx * X + b with the mean terms folded into b. With a fused
 * activation, dY masked by it (recomputed from X and the forward's coefficients) stands for dY. */
cx_status cx_bn_nhwc_grad(const cx_kernel_args *a, int threads) {
  bn_geom d = geom_of(&a->in[1]);
  bn_scratch s = scratch_of(a, &d, threads);
  const cx_tensor *dy = &a->in[0], *x = &a->in[1];
  const float *scale = cx_f32(&a->in[2]), *mean = cx_f32(&a->in[3]), *invstd = cx_f32(&a->in[4]);
  float bounds[2];
  const float *act = cx_bn_activation(a->node, &bounds[0], &bounds[1]) ? bounds : NULL;
  double m = (double)d.rows;
  int v = isa();
  memcpy(s.m, mean, sizeof(float) * (size_t)d.c);
  tile(s.m, &d);
  if (act) forward_coefficients(a, &s, &d);
  cx_status st = CX_OK;
#pragma omp parallel num_threads(threads)
  {
    int nt = omp_get_num_threads();
    partial_pairs(&s, &d, dy, x, act, v);
#pragma omp barrier
    if (omp_get_thread_num() == 0) { /* the program's thread: it pools (cx_bn_nhwc_train) */
      double *sdy = s.pool, *sdyx = s.pool + d.c;
      for (int64_t c = 0; c < d.c; c++) {
        sdy[c] = reduce(&s, &d, nt, 0, c), sdyx[c] = reduce(&s, &d, nt, 1, c);
        cx_f32(&a->out[1])[c] = (float)(sdyx[c] * invstd[c]); /* this replica's, as norm.c's */
        cx_f32(&a->out[2])[c] = (float)sdy[c];
      }
      s.pool[2 * d.c] = m;
      st = cx_bn_pool(a, s.pool, 2 * d.c + 1);
      m = s.pool[2 * d.c];
      for (int64_t c = 0; c < d.c; c++) {
        float is = invstd[c], k = scale[c] * is, kx = (float)(k * is * is * sdyx[c] / m);
        s.k[c] = k;
        s.kx[c] = kx;
        s.b[c] = (float)(-k * sdy[c] / m) + kx * mean[c];
      }
      tile(s.k, &d);
      tile(s.kx, &d);
      tile(s.b, &d);
    }
#pragma omp barrier
    grad_span(&s, &d, dy, x, &a->out[0], act, v);
  }
  return st;
}
