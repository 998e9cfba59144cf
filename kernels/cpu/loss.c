/* CPU kernels of SoftmaxCrossEntropyLoss, KLDivTemperature and their gradient ops.
 *
 * Scores are [N, C, d...]: a "position" is one (n, d...) with its C class scores `inner` apart.
 * With inner == 1 (plain [N, C] logits) each position is a contiguous row and runs through the
 * vector row primitives; otherwise a strided scalar loop in double does the same sums. Per-position
 * results are added in double. Labels are checked in a serial pass first, so that a bad one fails
 * with a message before any thread starts. */

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "../../core/op.h"
#include "cpu.h"
#include "eltwise_engine.h"
#include "vec_avx2.h"

enum { PAR_MIN = 1 << 14 };
enum { RED_NONE, RED_SUM, RED_MEAN };

typedef struct sce {
  const cx_node *node;
  int64_t positions, C, inner;
  const float *x, *w;    /* scores; class weights or NULL */
  const cx_tensor *labels;
  int mode;
  bool has_ignore;
  int64_t ignore;
  double eps, wsum_all;  /* label smoothing; sum of all class weights */
} sce;

static int64_t label_at(const cx_tensor *t, int64_t i) {
  return t->dtype == CX_S64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* scores input at `first`, labels and weights after it */
static cx_status sce_init(sce *s, const cx_kernel_args *a, int first) {
  const cx_shape *xs = &a->in[first].shape;
  const char *r = cx_node_string(a->node, "reduction", "mean");
  *s = (sce){.node = a->node, .C = xs->d[1], .x = cx_f32(&a->in[first]),
             .labels = &a->in[first + 1], .eps = cx_node_float(a->node, "label_smoothing", 0)};
  s->mode = strcmp(r, "none") == 0 ? RED_NONE : strcmp(r, "sum") == 0 ? RED_SUM : RED_MEAN;
  s->inner = xs->d[0] && s->C ? cx_shape_numel(xs) / (xs->d[0] * s->C) : 0;
  s->positions = xs->d[0] * s->inner;
  s->has_ignore = cx_node_attr(a->node, "ignore_index") != NULL;
  s->ignore = cx_node_int(a->node, "ignore_index", 0);
  s->w = a->n_in > first + 2 && a->in[first + 2].data ? cx_f32(&a->in[first + 2]) : NULL;
  s->wsum_all = (double)s->C;
  if (s->w) {
    s->wsum_all = 0;
    for (int64_t c = 0; c < s->C; c++) s->wsum_all += s->w[c];
  }
  for (int64_t p = 0; p < s->positions; p++) {
    int64_t l = label_at(s->labels, p);
    if ((s->has_ignore && l == s->ignore) || (l >= 0 && l < s->C)) continue;
    return cx_fail(CX_ERR_ARG, "node '%s' (%s): label %lld at position %lld is not a class index "
                   "in [0, %lld)%s", a->node->name, a->node->op->name, (long long)l, (long long)p,
                   (long long)s->C, s->has_ignore ? " nor ignore_index" : "");
  }
  return CX_OK;
}

/* The label of position p, or -1 when it is ignored. */
static int64_t sce_label(const sce *s, int64_t p) {
  int64_t l = label_at(s->labels, p);
  return s->has_ignore && l == s->ignore ? -1 : l;
}

static const float *sce_scores(const sce *s, int64_t p) {
  return s->x + (p / s->inner) * s->C * s->inner + p % s->inner;
}

static double lse_strided(const float *x, int64_t n, int64_t stride, double scale) {
  double m = -INFINITY, sum = 0;
  for (int64_t c = 0; c < n; c++) m = fmax(m, scale * x[c * stride]);
  for (int64_t c = 0; c < n; c++) sum += exp(scale * x[c * stride] - m);
  return m + log(sum);
}

/* The sum of the non-ignored positions' label weights: the divisor of reduction "mean". */
static double sce_weight_sum(const sce *s) {
  double den = 0;
  for (int64_t p = 0; p < s->positions; p++) {
    int64_t l = sce_label(s, p);
    if (l >= 0) den += s->w ? s->w[l] : 1.0;
  }
  return den;
}

/* loss at position p; writes its log-probabilities when lp is not NULL */
static double sce_position(const sce *s, int64_t p, float *lp) {
  const float *x = sce_scores(s, p);
  int64_t l = sce_label(s, p), st = s->inner;
  double lse = lse_strided(x, s->C, st, 1.0);
  if (lp)
    for (int64_t c = 0; c < s->C; c++) lp[c * st] = (float)(x[c * st] - lse);
  if (l < 0) return 0;
  double nll = -(x[l * st] - lse) * (s->w ? s->w[l] : 1.0);
  if (s->eps == 0) return nll;
  double smooth = 0; /* -sum_c w_c log p_c */
  for (int64_t c = 0; c < s->C; c++) smooth -= (x[c * st] - lse) * (s->w ? s->w[c] : 1.0);
  return (1 - s->eps) * nll + s->eps / (double)s->C * smooth;
}

/* sce_position for a contiguous row (inner == 1), with the vector primitives */
static double sce_row(const sce *s, int64_t p, float *lp) {
  const float *x = s->x + p * s->C;
  int64_t l = sce_label(s, p);
  double lse = cx_cpu_row_lse(x, 1.0f, s->C);
  if (lp) cx_cpu_row_sub(lp, x, (float)lse, s->C);
  if (l < 0) return 0;
  double nll = (lse - x[l]) * (s->w ? s->w[l] : 1.0);
  if (s->eps == 0) return nll;
  double wx = s->w ? cx_cpu_row_dot(s->w, x, s->C) : cx_cpu_row_sum(x, s->C);
  return (1 - s->eps) * nll + s->eps / (double)s->C * (s->wsum_all * lse - wx);
}

static cx_status run_sce(const cx_kernel_args *a) {
  sce s;
  CX_TRY(sce_init(&s, a, 0));
  float *loss = cx_f32(&a->out[0]);
  float *lp_all = a->n_out > 1 ? cx_f32(&a->out[1]) : NULL;
  double total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static) if (s.positions * s.C > PAR_MIN)
  for (int64_t p = 0; p < s.positions; p++) {
    float *lp = lp_all ? lp_all + (sce_scores(&s, p) - s.x) : NULL;
    double v = s.inner == 1 ? sce_row(&s, p, lp) : sce_position(&s, p, lp);
    if (s.mode == RED_NONE) loss[p] = (float)v;
    total += v;
  }
  if (s.mode == RED_SUM) loss[0] = (float)total;
  if (s.mode == RED_MEAN) { /* every position ignored gives 0, not PyTorch's 0/0 */
    double den = sce_weight_sum(&s);
    loss[0] = den != 0 ? (float)(total / den) : 0.0f;
  }
  return CX_OK;
}

/* d loss_p / d x_c = (1-eps) w_l (p_c - [c == l]) + eps/C (W p_c - w_c), times g */
static void sce_grad_position(const sce *s, int64_t p, double g, float *dx) {
  const float *x = sce_scores(s, p);
  int64_t l = sce_label(s, p), st = s->inner;
  if (l < 0 || g == 0) {
    for (int64_t c = 0; c < s->C; c++) dx[c * st] = 0;
    return;
  }
  double lse = lse_strided(x, s->C, st, 1.0), wl = s->w ? s->w[l] : 1.0;
  double a = (1 - s->eps) * wl + s->eps / (double)s->C * s->wsum_all, b = s->eps / (double)s->C;
  for (int64_t c = 0; c < s->C; c++) {
    double pc = exp(x[c * st] - lse);
    dx[c * st] = (float)(g * (a * pc - b * (s->w ? s->w[c] : 1.0)));
  }
  dx[l * st] -= (float)(g * (1 - s->eps) * wl);
}

/* sce_grad_position for a contiguous row (inner == 1) */
static void sce_grad_row(const sce *s, int64_t p, double g, float *dx) {
  const float *x = s->x + p * s->C;
  int64_t l = sce_label(s, p);
  if (l < 0 || g == 0) {
    memset(dx, 0, sizeof(float) * (size_t)s->C);
    return;
  }
  double lse = cx_cpu_row_lse(x, 1.0f, s->C), wl = s->w ? s->w[l] : 1.0;
  double a = (1 - s->eps) * wl + s->eps / (double)s->C * s->wsum_all, b = s->eps / (double)s->C;
  cx_cpu_row_exp_axmb(dx, x, 1.0f, (float)lse, s->C); /* p */
  cx_cpu_row_axpb(dx, dx, (float)(g * a), s->w ? 0.0f : (float)(-g * b), s->C);
  for (int64_t c = 0; s->w && b != 0 && c < s->C; c++) dx[c] -= (float)(g * b * s->w[c]);
  dx[l] -= (float)(g * (1 - s->eps) * wl);
}

/* (dLoss, scores, labels[, weights]) -> dScores */
static cx_status run_sce_grad(const cx_kernel_args *a) {
  sce s;
  CX_TRY(sce_init(&s, a, 1));
  const float *dl = cx_f32(&a->in[0]);
  float *dx = cx_f32(&a->out[0]);
  double g0 = dl[0];
  if (s.mode == RED_MEAN) {
    double den = sce_weight_sum(&s);
    g0 = den != 0 ? g0 / den : 0;
  }
#pragma omp parallel for schedule(static) if (s.positions * s.C > PAR_MIN)
  for (int64_t p = 0; p < s.positions; p++) {
    double g = s.mode == RED_NONE ? dl[p] : g0;
    if (s.inner == 1) sce_grad_row(&s, p, g, dx + p * s.C);
    else sce_grad_position(&s, p, g, dx + (sce_scores(&s, p) - s.x));
  }
  return CX_OK;
}

/* ---- KLDivTemperature: T^2 / N * sum KL(softmax(t/T) || softmax(s/T)) ---- */

typedef struct kd {
  int64_t N, C, inner, positions;
  const float *s, *t;
  double T;
} kd;

static kd kd_init(const cx_kernel_args *a, int first) {
  const cx_shape *xs = &a->in[first].shape;
  kd k = {.N = xs->d[0], .C = xs->d[1], .s = cx_f32(&a->in[first]),
          .t = cx_f32(&a->in[first + 1]), .T = cx_node_float(a->node, "temperature", 1.0f)};
  k.inner = k.N && k.C ? cx_shape_numel(xs) / (k.N * k.C) : 0;
  k.positions = k.N * k.inner;
  return k;
}

static int64_t kd_offset(const kd *k, int64_t p) {
  return (p / k->inner) * k->C * k->inner + p % k->inner;
}

/* One contiguous row of KL(q || p) = sum q (log q - log p) with log q = t/T - lse_t and
 * log q - log p = (t - s)/T + (lse_s - lse_t): the difference is formed before it is weighted, so a
 * student close to its teacher keeps its digits. */
__attribute__((target("avx512f"))) static float kd_row_kl_avx512(const float *s, const float *t,
                                                                int64_t n, float inv_t,
                                                                float lse_t, float d) {
  __m512 vi = _mm512_set1_ps(inv_t), vl = _mm512_set1_ps(lse_t), vd = _mm512_set1_ps(d);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 vt = _mm512_maskz_loadu_ps(k, t + i), vs = _mm512_maskz_loadu_ps(k, s + i);
    __m512 q = _mm512_maskz_mov_ps(k, cx_exp16(_mm512_fmsub_ps(vt, vi, vl)));
    acc = _mm512_fmadd_ps(q, _mm512_fmadd_ps(_mm512_sub_ps(vt, vs), vi, vd), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

/* lanes [0, n - i) of 8 set, for the tail of an AVX2 row */
CX_AVX2_INLINE __m256i kd_tail8(int64_t left) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(left >= 8 ? 8 : (int)left),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

CX_AVX2_INLINE float kd_hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* the AVX-512 row above, 8 floats at a time (masked lanes load 0 and their q is zeroed) */
CX_AVX2 static float kd_row_kl_avx2(const float *s, const float *t, int64_t n, float inv_t,
                                    float lse_t, float d) {
  __m256 vi = _mm256_set1_ps(inv_t), vl = _mm256_set1_ps(lse_t), vd = _mm256_set1_ps(d);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    __m256i k = kd_tail8(n - i);
    __m256 vt = _mm256_maskload_ps(t + i, k), vs = _mm256_maskload_ps(s + i, k);
    __m256 q = _mm256_and_ps(_mm256_castsi256_ps(k), cx_exp8(_mm256_fmsub_ps(vt, vi, vl)));
    acc = _mm256_fmadd_ps(q, _mm256_fmadd_ps(_mm256_sub_ps(vt, vs), vi, vd), acc);
  }
  return kd_hsum8(acc);
}

static double kd_row_kl(const float *s, const float *t, int64_t n, double inv_t) {
  double lse_s = cx_cpu_row_lse(s, (float)inv_t, n), lse_t = cx_cpu_row_lse(t, (float)inv_t, n);
  float d = (float)(lse_s - lse_t);
  if (cx_cpu_avx512()) return kd_row_kl_avx512(s, t, n, (float)inv_t, (float)lse_t, d);
  if (cx_cpu_avx2()) return kd_row_kl_avx2(s, t, n, (float)inv_t, (float)lse_t, d);
  double kl = 0;
  for (int64_t c = 0; c < n; c++)
    kl += expf(t[c] * (float)inv_t - (float)lse_t) * ((t[c] - s[c]) * (float)inv_t + d);
  return kl;
}

/* dx = g * (softmax(s/T) - softmax(t/T)) over one contiguous row */
__attribute__((target("avx512f"))) static void kd_row_grad_avx512(float *dx, const float *s,
                                                                 const float *t, int64_t n,
                                                                 float inv_t, float lse_s,
                                                                 float lse_t, float g) {
  __m512 vi = _mm512_set1_ps(inv_t), vs = _mm512_set1_ps(lse_s), vt = _mm512_set1_ps(lse_t);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512 p = cx_exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, s + i), vi, vs));
    __m512 q = cx_exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, t + i), vi, vt));
    _mm512_mask_storeu_ps(dx + i, k, _mm512_mul_ps(_mm512_sub_ps(p, q), _mm512_set1_ps(g)));
  }
}

CX_AVX2 static void kd_row_grad_avx2(float *dx, const float *s, const float *t, int64_t n,
                                     float inv_t, float lse_s, float lse_t, float g) {
  __m256 vi = _mm256_set1_ps(inv_t), vs = _mm256_set1_ps(lse_s), vt = _mm256_set1_ps(lse_t);
  for (int64_t i = 0; i < n; i += 8) {
    __m256i k = kd_tail8(n - i);
    __m256 p = cx_exp8(_mm256_fmsub_ps(_mm256_maskload_ps(s + i, k), vi, vs));
    __m256 q = cx_exp8(_mm256_fmsub_ps(_mm256_maskload_ps(t + i, k), vi, vt));
    _mm256_maskstore_ps(dx + i, k, _mm256_mul_ps(_mm256_sub_ps(p, q), _mm256_set1_ps(g)));
  }
}

static void kd_row_grad(float *dx, const float *s, const float *t, int64_t n, double inv_t,
                        double g) {
  float ls = (float)cx_cpu_row_lse(s, (float)inv_t, n),
        lt = (float)cx_cpu_row_lse(t, (float)inv_t, n);
  if (cx_cpu_avx512()) {
    kd_row_grad_avx512(dx, s, t, n, (float)inv_t, ls, lt, (float)g);
    return;
  }
  if (cx_cpu_avx2()) {
    kd_row_grad_avx2(dx, s, t, n, (float)inv_t, ls, lt, (float)g);
    return;
  }
  for (int64_t c = 0; c < n; c++)
    dx[c] = (float)g * (expf(s[c] * (float)inv_t - ls) - expf(t[c] * (float)inv_t - lt));
}

static cx_status run_kd(const cx_kernel_args *a) {
  kd k = kd_init(a, 0);
  double total = 0, inv_t = 1.0 / k.T;
#pragma omp parallel for reduction(+ : total) schedule(static) if (k.positions * k.C > PAR_MIN)
  for (int64_t p = 0; p < k.positions; p++) {
    const float *s = k.s + kd_offset(&k, p), *t = k.t + kd_offset(&k, p);
    int64_t st = k.inner;
    if (st == 1) {
      total += kd_row_kl(s, t, k.C, inv_t);
      continue;
    }
    double lse_s = lse_strided(s, k.C, st, inv_t), lse_t = lse_strided(t, k.C, st, inv_t), kl = 0;
    for (int64_t c = 0; c < k.C; c++) {
      double lt = t[c * st] * inv_t - lse_t, ls = s[c * st] * inv_t - lse_s;
      kl += exp(lt) * (lt - ls);
    }
    total += kl;
  }
  cx_f32(&a->out[0])[0] = k.N ? (float)(total * k.T * k.T / (double)k.N) : 0.0f;
  return CX_OK;
}

/* (dLoss, student, teacher) -> dStudent = dLoss * T / N * (softmax(s/T) - softmax(t/T)) */
static cx_status run_kd_grad(const cx_kernel_args *a) {
  kd k = kd_init(a, 1);
  double g = k.N ? cx_f32(&a->in[0])[0] * k.T / (double)k.N : 0, inv_t = 1.0 / k.T;
  float *dx = cx_f32(&a->out[0]);
#pragma omp parallel for schedule(static) if (k.positions * k.C > PAR_MIN)
  for (int64_t p = 0; p < k.positions; p++) {
    int64_t off = kd_offset(&k, p), st = k.inner;
    const float *s = k.s + off, *t = k.t + off;
    if (st == 1) {
      kd_row_grad(dx + off, s, t, k.C, inv_t, g);
      continue;
    }
    double lse_s = lse_strided(s, k.C, st, inv_t), lse_t = lse_strided(t, k.C, st, inv_t);
    for (int64_t c = 0; c < k.C; c++)
      dx[off + c * st] =
          (float)(g * (exp(s[c * st] * inv_t - lse_s) - exp(t[c * st] * inv_t - lse_t)));
  }
  return CX_OK;
}

const cx_kernel cx_cpu_loss[] = {
    {"SoftmaxCrossEntropyLoss", NULL, run_sce, NULL, 0, NULL, 0},
    {"SoftmaxCrossEntropyLossGrad", NULL, run_sce_grad, NULL, 0, NULL, 0},
    {"KLDivTemperature", NULL, run_kd, NULL, 0, NULL, 0},
    {"KLDivTemperatureGrad", NULL, run_kd_grad, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
