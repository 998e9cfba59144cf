/* torch.optim.AdamW (amsgrad off), step t from 1:
 *   w *= 1 - lr * wd
 *   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
 *   w -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * in PyTorch's order of operations, so that fp32 results agree closely. The AVX-512 path does the
 * same operations in the same order (no fused multiply-add), so both paths give the same bits.
 * The portable loop does not vectorise: sqrtf sets errno, which the build does not turn off. */
#include <math.h>

#include "eltwise_engine.h"
#include "optim_impl.h"

typedef struct adamw_coef {
  float decay, b1, b2, a1, a2, step_size, bc2_sqrt, eps;
} adamw_coef;

static void adamw_portable(const adamw_coef *k, float *w, float *m, float *v, const float *g,
                           int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float wi = w[i] * k->decay;
    m[i] = m[i] * k->b1 + k->a1 * g[i];
    v[i] = v[i] * k->b2 + k->a2 * g[i] * g[i];
    w[i] = wi - k->step_size * (m[i] / (sqrtf(v[i]) / k->bc2_sqrt + k->eps));
  }
}

__attribute__((target("avx512f"))) static void adamw_avx512(const adamw_coef *k, float *w,
                                                             float *m, float *v, const float *g,
                                                             int64_t n) {
  const __m512 decay = _mm512_set1_ps(k->decay), b1 = _mm512_set1_ps(k->b1);
  const __m512 b2 = _mm512_set1_ps(k->b2), a1 = _mm512_set1_ps(k->a1), a2 = _mm512_set1_ps(k->a2);
  const __m512 step = _mm512_set1_ps(k->step_size), bc2 = _mm512_set1_ps(k->bc2_sqrt);
  const __m512 eps = _mm512_set1_ps(k->eps);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 e = i + 16 <= n ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    __m512 gi = _mm512_maskz_loadu_ps(e, g + i), wi = _mm512_maskz_loadu_ps(e, w + i);
    __m512 mi = _mm512_maskz_loadu_ps(e, m + i), vi = _mm512_maskz_loadu_ps(e, v + i);
    wi = _mm512_mul_ps(wi, decay);
    mi = _mm512_add_ps(_mm512_mul_ps(mi, b1), _mm512_mul_ps(a1, gi));
    vi = _mm512_add_ps(_mm512_mul_ps(vi, b2), _mm512_mul_ps(_mm512_mul_ps(a2, gi), gi));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
    wi = _mm512_sub_ps(wi, _mm512_mul_ps(step, _mm512_div_ps(mi, denom)));
    _mm512_mask_storeu_ps(m + i, e, mi);
    _mm512_mask_storeu_ps(v + i, e, vi);
    _mm512_mask_storeu_ps(w + i, e, wi);
  }
}

void cx_optim_adamw_update(const cx_optim_hyper *c, const cx_optim_slot *p, float lr, int64_t t) {
  const adamw_coef k = {.decay = (float)(1.0 - (double)lr * p->wd), .b1 = c->beta1, .b2 = c->beta2,
                        .a1 = (float)(1.0 - c->beta1), .a2 = (float)(1.0 - c->beta2),
                        .step_size = (float)(lr / (1.0 - pow(c->beta1, (double)t))),
                        .bc2_sqrt = (float)sqrt(1.0 - pow(c->beta2, (double)t)), .eps = c->eps};
  const bool vec = cx_cpu_avx512();
  const int64_t n = p->n;
#pragma omp parallel if (n >= CX_OPTIM_PARALLEL_MIN)
  {
    int64_t i0, i1;
    cx_cpu_thread_range(n, &i0, &i1);
    if (vec) adamw_avx512(&k, p->w + i0, p->s[0] + i0, p->s[1] + i0, p->g + i0, i1 - i0);
    else adamw_portable(&k, p->w + i0, p->s[0] + i0, p->s[1] + i0, p->g + i0, i1 - i0);
  }
}
