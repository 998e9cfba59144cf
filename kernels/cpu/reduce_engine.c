/* The reduce-to engine (ReduceSum, ReduceMean, ReduceSumTo) and the row primitives of the
 * softmax family, each with an AVX-512 path and a portable one (the exp rows an AVX2 + FMA one
 * too).
 *
 * A reduction is planned like a broadcast: x's shape loses its size-1 dimensions and neighbours
 * that are both reduced or both kept merge, leaving alternating groups. When the innermost group
 * is kept, each output row is a sum of contiguous input rows (vector adds); when it is reduced,
 * each output element is a sum of row sums. */

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "eltwise_engine.h"
#include "vec_avx2.h"

enum { PAR_MIN = 1 << 15, CHUNK = 2048 };

__attribute__((target("avx512f"))) static void map_exp_avx512(float *y, const float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, cx_exp16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, cx_exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

/* AVX2 + FMA: y = exp(a * x - b) (y NULL: not stored), returning its sum. One loop serves
 * cx_cpu_map_exp (a = 1, b = 0), cx_cpu_row_exp_sum (a = 1, b = m: x * 1 - m is x - m exactly)
 * and the log-sum-exp rows. */
CX_AVX2 static float exp_axmb_avx2(float *y, const float *x, float a, float b, int64_t n) {
  __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b), acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = cx_exp8(_mm256_fmsub_ps(_mm256_loadu_ps(x + i), va, vb));
    if (y) _mm256_storeu_ps(y + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {
    __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)),
                                   _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 e = _mm256_and_ps(_mm256_castsi256_ps(k),
                             cx_exp8(_mm256_fmsub_ps(_mm256_maskload_ps(x + i, k), va, vb)));
    if (y) _mm256_maskstore_ps(y + i, k, e);
    acc = _mm256_add_ps(acc, e);
  }
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

void cx_cpu_map_exp(float *y, const float *x, int64_t n) {
  if (cx_cpu_avx512()) {
    map_exp_avx512(y, x, n);
    return;
  }
  if (cx_cpu_avx2()) {
    exp_axmb_avx2(y, x, 1.0f, 0.0f, n);
    return;
  }
  for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
}

/* ---- row primitives ---- */

static inline __mmask16 tail_mask(int64_t left) { return (__mmask16)((1u << left) - 1); }

__attribute__((target("avx512f"))) static float row_max_avx512(const float *x, int64_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
  if (i < n)
    m = _mm512_mask_max_ps(m, tail_mask(n - i), m, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
  return _mm512_reduce_max_ps(m);
}

float cx_cpu_row_max(const float *x, int64_t n) {
  if (cx_cpu_avx512()) return row_max_avx512(x, n);
  float m = -INFINITY;
  for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

__attribute__((target("avx512f"))) static float row_exp_sum_avx512(float *y, const float *x,
                                                                   float m, int64_t n) {
  __m512 vm = _mm512_set1_ps(m), acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 e = cx_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
    _mm512_storeu_ps(y + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    __m512 e = _mm512_maskz_mov_ps(k, cx_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm)));
    _mm512_mask_storeu_ps(y + i, k, e);
    acc = _mm512_add_ps(acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}

float cx_cpu_row_exp_sum(float *y, const float *x, float m, int64_t n) {
  if (cx_cpu_avx512()) return row_exp_sum_avx512(y, x, m, n);
  if (cx_cpu_avx2()) return exp_axmb_avx2(y, x, 1.0f, m, n);
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += y[i] = expf(x[i] - m);
  return s;
}

__attribute__((target("avx512f"))) static void row_axpb_avx512(float *y, const float *x, float a,
                                                               float b, int64_t n) {
  __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(_mm512_loadu_ps(x + i), va, vb));
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, x + i), va, vb));
  }
}

void cx_cpu_row_axpb(float *y, const float *x, float a, float b, int64_t n) {
  if (cx_cpu_avx512()) {
    row_axpb_avx512(y, x, a, b, n);
    return;
  }
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * a + b;
}

void cx_cpu_row_scale(float *y, const float *x, float s, int64_t n) {
  cx_cpu_row_axpb(y, x, s, 0, n);
}
void cx_cpu_row_sub(float *y, const float *x, float c, int64_t n) {
  cx_cpu_row_axpb(y, x, 1, -c, n);
}

/* y = exp(a * x - b), or only its sum when y is NULL */
__attribute__((target("avx512f"))) static float row_exp_axmb_avx512(float *y, const float *x,
                                                                    float a, float b, int64_t n) {
  __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b), acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 e = cx_exp16(_mm512_fmsub_ps(_mm512_loadu_ps(x + i), va, vb));
    if (y) _mm512_storeu_ps(y + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    __m512 e =
        _mm512_maskz_mov_ps(k, cx_exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, x + i), va, vb)));
    if (y) _mm512_mask_storeu_ps(y + i, k, e);
    acc = _mm512_add_ps(acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}

static float row_exp_axmb(float *y, const float *x, float a, float b, int64_t n) {
  if (cx_cpu_avx512()) return row_exp_axmb_avx512(y, x, a, b, n);
  if (cx_cpu_avx2()) return exp_axmb_avx2(y, x, a, b, n);
  float s = 0;
  for (int64_t i = 0; i < n; i++) {
    float e = expf(a * x[i] - b);
    if (y) y[i] = e;
    s += e;
  }
  return s;
}

double cx_cpu_row_lse(const float *x, float scale, int64_t n) {
  float m = scale * cx_cpu_row_max(x, n); /* scale > 0 */
  return (double)m + log((double)row_exp_axmb(NULL, x, scale, m, n));
}

void cx_cpu_row_exp_axmb(float *y, const float *x, float a, float b, int64_t n) {
  row_exp_axmb(y, x, a, b, n);
}

__attribute__((target("avx512f"))) static float row_dot_avx512(const float *a, const float *b,
                                                               int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i + 16 <= n; i += 16)
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i), acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

float cx_cpu_row_dot(const float *a, const float *b, int64_t n) {
  if (cx_cpu_avx512()) return row_dot_avx512(a, b, n);
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

__attribute__((target("avx512f"))) static float row_sum_avx512(const float *x, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_add_ps(acc0, _mm512_loadu_ps(x + i));
    acc1 = _mm512_add_ps(acc1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_add_ps(acc0, _mm512_loadu_ps(x + i));
  if (i < n) acc1 = _mm512_add_ps(acc1, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

float cx_cpu_row_sum(const float *x, int64_t n) {
  if (cx_cpu_avx512()) return row_sum_avx512(x, n);
  /* four partial sums: less rounding error on long rows, and the loop vectorises */
  float s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; k++) s[k] += x[i + k];
  for (; i < n; i++) s[0] += x[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

__attribute__((target("avx512f"))) static void row_acc_avx512(float *y, const float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(
        y + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, y + i), _mm512_maskz_loadu_ps(k, x + i)));
  }
}

/* y += x */
static void row_acc(float *y, const float *x, int64_t n, bool avx512) {
  if (avx512) {
    row_acc_avx512(y, x, n);
    return;
  }
  for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void cx_cpu_axis_split(const cx_shape *s, int axis, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= s->d[i];
  *n = s->d[axis];
  for (int i = axis + 1; i < s->ndim; i++) *inner *= s->d[i];
}

/* ---- reduce-to ---- */

typedef struct red_plan {
  int nd;
  int64_t n[CX_MAX_DIMS], st[CX_MAX_DIMS]; /* sizes and x element strides */
  bool red[CX_MAX_DIMS];
  int nk, nr;      /* kept and reduced groups, innermost group excluded */
  int kept[CX_MAX_DIMS], reduced[CX_MAX_DIMS];
  int64_t outer_out, combos; /* output rows / reduced combinations, innermost excluded */
} red_plan;

static void red_plan_make(red_plan *p, const cx_shape *keep, const cx_shape *xs) {
  p->nd = 0;
  for (int i = 0; i < xs->ndim; i++) {
    if (xs->d[i] == 1) continue;
    int j = i - (xs->ndim - keep->ndim);
    bool red = j < 0 || keep->d[j] == 1;
    if (p->nd > 0 && p->red[p->nd - 1] == red) {
      p->n[p->nd - 1] *= xs->d[i];
      continue;
    }
    p->n[p->nd] = xs->d[i];
    p->red[p->nd++] = red;
  }
  int64_t acc = 1;
  for (int d = p->nd - 1; d >= 0; d--) {
    p->st[d] = acc;
    acc *= p->n[d];
  }
  p->nk = p->nr = 0;
  p->outer_out = p->combos = 1;
  for (int d = 0; d < p->nd - 1; d++) {
    if (p->red[d]) {
      p->reduced[p->nr++] = d;
      p->combos *= p->n[d];
    } else {
      p->kept[p->nk++] = d;
      p->outer_out *= p->n[d];
    }
  }
}

/* x offset of index k spread over the groups listed in g (row-major among them) */
static int64_t group_offset(const red_plan *p, const int *g, int ng, int64_t k) {
  int64_t off = 0;
  for (int i = ng - 1; i >= 0; i--) {
    int d = g[i];
    off += (k % p->n[d]) * p->st[d];
    k /= p->n[d];
  }
  return off;
}

/* Innermost group kept: output row o (length L) is the sum of `combos` input rows. */
static void reduce_kept_inner(const red_plan *p, float *y, const float *x, float scale) {
  int64_t L = p->n[p->nd - 1], nchunks = (L + CHUNK - 1) / CHUNK;
  int64_t tasks = p->outer_out * nchunks;
  bool avx = cx_cpu_avx512();
#pragma omp parallel for schedule(static) if (p->outer_out * p->combos * L > PAR_MIN)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t o = t / nchunks, c0 = t % nchunks * CHUNK;
    int64_t len = L - c0 < CHUNK ? L - c0 : CHUNK;
    float *yr = y + o * L + c0;
    const float *xb = x + group_offset(p, p->kept, p->nk, o) + c0;
    memset(yr, 0, sizeof(float) * (size_t)len);
    for (int64_t k = 0; k < p->combos; k++)
      row_acc(yr, xb + group_offset(p, p->reduced, p->nr, k), len, avx);
    if (scale != 1.0f) cx_cpu_row_scale(yr, yr, scale, len);
  }
}

/* Innermost group reduced: output element o is a sum of `combos` row sums of length L. */
static void reduce_red_inner(const red_plan *p, float *y, const float *x, float scale) {
  int64_t L = p->n[p->nd - 1], work = p->outer_out * p->combos * L;
  if (p->outer_out >= 2 * omp_get_max_threads() || work <= PAR_MIN) {
#pragma omp parallel for schedule(static) if (work > PAR_MIN)
    for (int64_t o = 0; o < p->outer_out; o++) {
      const float *xb = x + group_offset(p, p->kept, p->nk, o);
      double s = 0;
      for (int64_t k = 0; k < p->combos; k++)
        s += cx_cpu_row_sum(xb + group_offset(p, p->reduced, p->nr, k), L);
      y[o] = (float)(s * scale);
    }
    return;
  }
  /* few outputs, much to sum: spread each output's rows over the threads instead */
  for (int64_t o = 0; o < p->outer_out; o++) {
    const float *xb = x + group_offset(p, p->kept, p->nk, o);
    int64_t parts = (L + CHUNK - 1) / CHUNK;
    double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (int64_t t = 0; t < p->combos * parts; t++) {
      int64_t k = t / parts, c0 = t % parts * CHUNK;
      s += cx_cpu_row_sum(xb + group_offset(p, p->reduced, p->nr, k) + c0,
                          L - c0 < CHUNK ? L - c0 : CHUNK);
    }
    y[o] = (float)(s * scale);
  }
}

void cx_cpu_reduce_to(float *y, const cx_shape *keep, const float *x, const cx_shape *xs,
                      float scale) {
  if (cx_shape_numel(xs) == 0) {
    memset(y, 0, sizeof(float) * (size_t)cx_shape_numel(keep));
    return;
  }
  red_plan p;
  red_plan_make(&p, keep, xs);
  if (p.nd == 0) {
    y[0] = scale * x[0];
    return;
  }
  if (p.red[p.nd - 1]) reduce_red_inner(&p, y, x, scale);
  else reduce_kept_inner(&p, y, x, scale);
}
