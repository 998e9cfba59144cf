/* LAMB (You et al. 2019) as timm's Lamb and apex's FusedLAMB compute it, step t from 1:
 *   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
 *   u = (m / (1 - beta1^t)) / (sqrt(v) / sqrt(1 - beta2^t) + eps) + wd * w
 *   r = ||w|| / ||u||, or 1 when either norm is 0 (and 1 for tensors without weight decay
 *       unless always_adapt)
 *   w -= lr * r * u
 * The global gradient-norm clipping that timm and apex fold into LAMB is left to
 * cx_grad_clip_global_norm. u is computed twice (for its norm, then for the update) rather than
 * stored: recomputing is cheaper than another buffer the size of the parameter. Norms are summed
 * in double; the AVX-512 and portable paths differ only in the order of those sums. */
#include <math.h>

#include "eltwise_engine.h"
#include "optim_impl.h"

typedef struct lamb_coef {
  float b1, b2, a1, a2, bc1, bc2_sqrt, eps, wd;
} lamb_coef;

typedef struct lamb_sums {
  double w2, u2;
} lamb_sums;

static inline float direction(const lamb_coef *k, float m, float v, float w) {
  return (m / k->bc1) / (sqrtf(v) / k->bc2_sqrt + k->eps) + k->wd * w;
}

static lamb_sums moments_portable(const lamb_coef *k, float *m, float *v, const float *g,
                                  const float *w, int64_t n) {
  lamb_sums s = {0, 0};
  for (int64_t i = 0; i < n; i++) {
    m[i] = m[i] * k->b1 + k->a1 * g[i];
    v[i] = v[i] * k->b2 + k->a2 * g[i] * g[i];
    float u = direction(k, m[i], v[i], w[i]);
    s.w2 += (double)w[i] * w[i];
    s.u2 += (double)u * u;
  }
  return s;
}

static void apply_portable(const lamb_coef *k, float step, float *w, const float *m,
                           const float *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) w[i] -= step * direction(k, m[i], v[i], w[i]);
}

__attribute__((target("avx512f"))) static inline __m512 direction16(const lamb_coef *k, __m512 m,
                                                                    __m512 v, __m512 w) {
  __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), _mm512_set1_ps(k->bc2_sqrt)),
                               _mm512_set1_ps(k->eps));
  __m512 mhat = _mm512_div_ps(m, _mm512_set1_ps(k->bc1));
  return _mm512_add_ps(_mm512_div_ps(mhat, denom), _mm512_mul_ps(_mm512_set1_ps(k->wd), w));
}

/* x * x summed into two double vectors (the low and high eight lanes). */
__attribute__((target("avx512f"))) static inline __m512d square_sum(__m512d acc, __m512 x) {
  __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
  __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  return _mm512_add_pd(acc, _mm512_add_pd(_mm512_mul_pd(lo, lo), _mm512_mul_pd(hi, hi)));
}

static inline __mmask16 lanes(int64_t i, int64_t n) {
  return i + 16 <= n ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
}

__attribute__((target("avx512f"))) static lamb_sums moments_avx512(const lamb_coef *k, float *m,
                                                                   float *v, const float *g,
                                                                   const float *w, int64_t n) {
  const __m512 b1 = _mm512_set1_ps(k->b1), b2 = _mm512_set1_ps(k->b2);
  const __m512 a1 = _mm512_set1_ps(k->a1), a2 = _mm512_set1_ps(k->a2);
  __m512d sw = _mm512_setzero_pd(), su = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 e = lanes(i, n);
    __m512 gi = _mm512_maskz_loadu_ps(e, g + i), wi = _mm512_maskz_loadu_ps(e, w + i);
    __m512 mi = _mm512_maskz_loadu_ps(e, m + i), vi = _mm512_maskz_loadu_ps(e, v + i);
    mi = _mm512_add_ps(_mm512_mul_ps(mi, b1), _mm512_mul_ps(a1, gi));
    vi = _mm512_add_ps(_mm512_mul_ps(vi, b2), _mm512_mul_ps(_mm512_mul_ps(a2, gi), gi));
    _mm512_mask_storeu_ps(m + i, e, mi);
    _mm512_mask_storeu_ps(v + i, e, vi);
    sw = square_sum(sw, wi); /* lanes outside the tail are zero in w, m and v, so u is 0 there */
    su = square_sum(su, direction16(k, mi, vi, wi));
  }
  return (lamb_sums){_mm512_reduce_add_pd(sw), _mm512_reduce_add_pd(su)};
}

__attribute__((target("avx512f"))) static void apply_avx512(const lamb_coef *k, float step,
                                                            float *w, const float *m,
                                                            const float *v, int64_t n) {
  const __m512 s = _mm512_set1_ps(step);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 e = lanes(i, n);
    __m512 wi = _mm512_maskz_loadu_ps(e, w + i);
    __m512 u = direction16(k, _mm512_maskz_loadu_ps(e, m + i), _mm512_maskz_loadu_ps(e, v + i), wi);
    _mm512_mask_storeu_ps(w + i, e, _mm512_sub_ps(wi, _mm512_mul_ps(s, u)));
  }
}

static lamb_sums moments(const lamb_coef *k, const cx_optim_slot *p, bool vec) {
  double w2 = 0, u2 = 0;
  const int64_t n = p->n;
#pragma omp parallel reduction(+ : w2, u2) if (n >= CX_OPTIM_PARALLEL_MIN)
  {
    int64_t a, b;
    cx_cpu_thread_range(n, &a, &b);
    lamb_sums s = vec ? moments_avx512(k, p->s[0] + a, p->s[1] + a, p->g + a, p->w + a, b - a)
                      : moments_portable(k, p->s[0] + a, p->s[1] + a, p->g + a, p->w + a, b - a);
    w2 += s.w2;
    u2 += s.u2;
  }
  return (lamb_sums){w2, u2};
}

void cx_optim_lamb_update(const cx_optim_hyper *c, const cx_optim_slot *p, float lr, int64_t t) {
  const lamb_coef k = {.b1 = c->beta1, .b2 = c->beta2, .a1 = (float)(1.0 - c->beta1),
                       .a2 = (float)(1.0 - c->beta2),
                       .bc1 = (float)(1.0 - pow(c->beta1, (double)t)),
                       .bc2_sqrt = (float)sqrt(1.0 - pow(c->beta2, (double)t)),
                       .eps = c->eps, .wd = p->wd};
  const bool vec = cx_cpu_avx512();
  lamb_sums s = moments(&k, p, vec);
  double ratio = 1;
  if ((p->wd != 0 || c->always_adapt) && s.w2 > 0 && s.u2 > 0) ratio = sqrt(s.w2) / sqrt(s.u2);
  const float step = (float)(lr * ratio);
  const int64_t n = p->n;
#pragma omp parallel if (n >= CX_OPTIM_PARALLEL_MIN)
  {
    int64_t a, b;
    cx_cpu_thread_range(n, &a, &b);
    if (vec) apply_avx512(&k, step, p->w + a, p->s[0] + a, p->s[1] + a, b - a);
    else apply_portable(&k, step, p->w + a, p->s[0] + a, p->s[1] + a, b - a);
  }
}
