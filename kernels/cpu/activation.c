/* CPU kernels of the activations and of ActivationGrad: one forward and one backward loop that
 * switch on the activation once per range, each with an AVX-512 path and a portable one. */

#include <immintrin.h>
#include <math.h>

#include "../../core/ops/activation.h"
#include "cpu.h"
#include "eltwise_engine.h"

enum { PAR_MIN = 1 << 15 };

typedef struct act_par {
  cx_act op;
  float alpha, beta, lo, hi;
} act_par;

/* ---- portable ---- */

static inline float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Gelu: x * Phi(x) (alpha 0), or with tanh approximating Phi (alpha 1, approximate = "tanh") */
static float gelu1(float alpha, float x) {
  if (alpha == 0) return 0.5f * x * (1 + erff(x * 0.7071067812f));
  return 0.5f * x * (1 + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

static float gelu_grad1(float alpha, float x) {
  if (alpha == 0)
    return 0.5f * (1 + erff(x * 0.7071067812f)) + x * 0.3989422804f * expf(-0.5f * x * x);
  float t = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
  return 0.5f * (1 + t) + 0.5f * x * (1 - t * t) * 0.7978845608f * (1 + 3 * 0.044715f * x * x);
}

static float fwd1(const act_par *p, float x) {
  switch (p->op) {
  case CX_ACT_RELU: return x > 0 ? x : 0;
  case CX_ACT_LEAKY_RELU: return x >= 0 ? x : p->alpha * x;
  case CX_ACT_CLIP: return fminf(fmaxf(x, p->lo), p->hi);
  case CX_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
  case CX_ACT_HARD_SIGMOID: return clampf(p->alpha * x + p->beta, 0, 1);
  case CX_ACT_HARD_SWISH: return x * clampf(x / 6.0f + 0.5f, 0, 1);
  case CX_ACT_TANH: return tanhf(x);
  case CX_ACT_EXP: return expf(x);
  case CX_ACT_LOG: return logf(x);
  case CX_ACT_SQRT: return sqrtf(x);
  case CX_ACT_ERF: return erff(x);
  case CX_ACT_GELU: return gelu1(p->alpha, x);
  case CX_ACT_RECIPROCAL: return 1.0f / x;
  case CX_ACT_COUNT: break;
  }
  return x;
}

/* dX for one element from dY and whichever of x, y the activation's derivative reads */
static float bwd1(const act_par *p, float dy, float x, float y) {
  switch (p->op) {
  case CX_ACT_RELU: return y > 0 ? dy : 0;
  case CX_ACT_LEAKY_RELU: return x > 0 ? dy : p->alpha * dy;
  case CX_ACT_CLIP: return x > p->lo && x < p->hi ? dy : 0;
  case CX_ACT_SIGMOID: return dy * y * (1 - y);
  case CX_ACT_HARD_SIGMOID: {
    float v = p->alpha * x + p->beta;
    return v > 0 && v < 1 ? p->alpha * dy : 0;
  }
  case CX_ACT_HARD_SWISH: return x < -3 ? 0 : x > 3 ? dy : dy * (x / 3.0f + 0.5f);
  case CX_ACT_TANH: return dy * (1 - y * y);
  case CX_ACT_EXP: return dy * y;
  case CX_ACT_LOG: return dy / x;
  case CX_ACT_SQRT: return dy * 0.5f / y;
  case CX_ACT_ERF: return dy * 1.1283791671f * expf(-x * x); /* 2 / sqrt(pi) */
  case CX_ACT_GELU: return dy * gelu_grad1(p->alpha, x);
  case CX_ACT_RECIPROCAL: return -dy * y * y;
  case CX_ACT_COUNT: break;
  }
  return dy;
}

static void fwd_c(const act_par *p, float *y, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = fwd1(p, x[i]);
}

static void bwd_c(const act_par *p, float *dx, const float *dy, const float *x, const float *y,
                  int64_t n) {
  for (int64_t i = 0; i < n; i++) dx[i] = bwd1(p, dy[i], x ? x[i] : 0, y ? y[i] : 0);
}

/* ---- AVX-512 ---- */

#define AVX __attribute__((target("avx512f"), always_inline)) static inline

AVX __m512 clamp16(__m512 v, float lo, float hi) {
  return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
}

/* tanh: Cephes' odd polynomial below |x| = 0.625, else (1 - e) / (1 + e) with e = exp(-2|x|) */
AVX __m512 tanh16(__m512 x) {
  __m512 ax = _mm512_abs_ps(x), z = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422e-1f));
  __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
  __m512 e = cx_exp16(_mm512_mul_ps(ax, _mm512_set1_ps(-2.0f)));
  __m512 one = _mm512_set1_ps(1.0f);
  __m512 big = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  /* copy the sign of x onto |tanh| */
  big = _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_castps_si512(big),
      _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u))));
  __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(is_small, big, small);
}

AVX __m512 fwd16(const act_par *p, __m512 x) {
  __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  switch (p->op) {
  case CX_ACT_RELU: return _mm512_max_ps(x, zero);
  case CX_ACT_LEAKY_RELU:
    return _mm512_mask_mul_ps(x, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), x,
                              _mm512_set1_ps(p->alpha));
  case CX_ACT_CLIP: return clamp16(x, p->lo, p->hi);
  case CX_ACT_SIGMOID:
    return _mm512_div_ps(one, _mm512_add_ps(one, cx_exp16(_mm512_sub_ps(zero, x))));
  case CX_ACT_HARD_SIGMOID:
    return clamp16(_mm512_fmadd_ps(x, _mm512_set1_ps(p->alpha), _mm512_set1_ps(p->beta)), 0, 1);
  case CX_ACT_HARD_SWISH:
    return _mm512_mul_ps(
        x, clamp16(_mm512_fmadd_ps(x, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f)), 0, 1));
  case CX_ACT_TANH: return tanh16(x);
  case CX_ACT_EXP: return cx_exp16(x);
  case CX_ACT_SQRT: return _mm512_sqrt_ps(x);
  case CX_ACT_LOG: /* these are handled by the portable loop */
  case CX_ACT_ERF:
  case CX_ACT_GELU:
  case CX_ACT_RECIPROCAL:
  case CX_ACT_COUNT: break;
  }
  return x;
}

/* The op is a constant inside each case below, so fwd16's switch folds out of the loop. */
#define FWD_LOOP(OP)                                                                              \
  do {                                                                                            \
    act_par q = *p;                                                                               \
    q.op = OP;                                                                                    \
    int64_t i = 0;                                                                                \
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, fwd16(&q, _mm512_loadu_ps(x + i)));      \
    if (i < n) {                                                                                  \
      __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                                             \
      _mm512_mask_storeu_ps(y + i, m, fwd16(&q, _mm512_maskz_loadu_ps(m, x + i)));                \
    }                                                                                             \
  } while (0)

__attribute__((target("avx512f"))) static void fwd_avx512(const act_par *p, float *y,
                                                          const float *x, int64_t n) {
  switch (p->op) {
  case CX_ACT_RELU: FWD_LOOP(CX_ACT_RELU); break;
  case CX_ACT_LEAKY_RELU: FWD_LOOP(CX_ACT_LEAKY_RELU); break;
  case CX_ACT_CLIP: FWD_LOOP(CX_ACT_CLIP); break;
  case CX_ACT_SIGMOID: FWD_LOOP(CX_ACT_SIGMOID); break;
  case CX_ACT_HARD_SIGMOID: FWD_LOOP(CX_ACT_HARD_SIGMOID); break;
  case CX_ACT_HARD_SWISH: FWD_LOOP(CX_ACT_HARD_SWISH); break;
  case CX_ACT_TANH: FWD_LOOP(CX_ACT_TANH); break;
  case CX_ACT_EXP: FWD_LOOP(CX_ACT_EXP); break;
  case CX_ACT_SQRT: FWD_LOOP(CX_ACT_SQRT); break;
  default: fwd_c(p, y, x, n); break;
  }
}

/* The cheap, common derivatives (masks and scales of dY); the rest run the portable loop. */
__attribute__((target("avx512f"))) static void bwd_avx512(const act_par *p, float *dx,
                                                          const float *dy, const float *x,
                                                          const float *y, int64_t n) {
  __m512 zero = _mm512_setzero_ps();
  int64_t i = 0;
  switch (p->op) {
  case CX_ACT_RELU:
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(dx + i, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_loadu_ps(y + i), zero,
                                                                      _CMP_GT_OQ),
                                                   _mm512_loadu_ps(dy + i)));
    break;
  case CX_ACT_CLIP: {
    __m512 lo = _mm512_set1_ps(p->lo), hi = _mm512_set1_ps(p->hi);
    for (; i + 16 <= n; i += 16) {
      __m512 v = _mm512_loadu_ps(x + i);
      __mmask16 in = _mm512_cmp_ps_mask(v, lo, _CMP_GT_OQ) & _mm512_cmp_ps_mask(v, hi, _CMP_LT_OQ);
      _mm512_storeu_ps(dx + i, _mm512_maskz_mov_ps(in, _mm512_loadu_ps(dy + i)));
    }
    break;
  }
  case CX_ACT_SIGMOID:
    for (; i + 16 <= n; i += 16) {
      __m512 v = _mm512_loadu_ps(y + i);
      __m512 d = _mm512_mul_ps(v, _mm512_sub_ps(_mm512_set1_ps(1.0f), v));
      _mm512_storeu_ps(dx + i, _mm512_mul_ps(_mm512_loadu_ps(dy + i), d));
    }
    break;
  default: break;
  }
  bwd_c(p, dx + i, dy + i, x ? x + i : NULL, y ? y + i : NULL, n - i);
}

/* ---- kernels ---- */

static float *opt_f32(const cx_kernel_args *a, int i) {
  return i < a->n_in && a->in[i].data ? cx_f32(&a->in[i]) : NULL;
}

/* The activation's parameters; Clip's bounds come from inputs lo_in, lo_in + 1 when present. */
static act_par params(const cx_kernel_args *a, int lo_in) {
  act_par p = {.op = (cx_act)cx_act_of_node(a->node)};
  cx_act_params(a->node, p.op, &p.alpha, &p.beta);
  cx_act_clip_bounds(a->node, opt_f32(a, lo_in), opt_f32(a, lo_in + 1), &p.lo, &p.hi);
  return p;
}

static cx_status run_act(const cx_kernel_args *a) {
  act_par p = params(a, 1);
  const float *x = cx_f32(&a->in[0]);
  float *y = cx_f32(&a->out[0]);
  int64_t n = cx_tensor_numel(&a->out[0]);
  bool avx = cx_cpu_avx512();
#pragma omp parallel if (n > PAR_MIN)
  {
    int64_t i0, i1;
    cx_cpu_thread_range(n, &i0, &i1);
    if (avx && i0 < i1) fwd_avx512(&p, y + i0, x + i0, i1 - i0);
    else if (i0 < i1) fwd_c(&p, y + i0, x + i0, i1 - i0);
  }
  return CX_OK;
}

/* ActivationGrad(dY, X, Y[, min, max]) */
static cx_status run_act_grad(const cx_kernel_args *a) {
  act_par p = params(a, 3);
  if ((int)p.op < 0)
    return cx_fail(CX_ERR_ARG, "node '%s' (ActivationGrad): unknown activation '%s'",
                   a->node->name, cx_node_string(a->node, "op", "(missing)"));
  const float *dy = cx_f32(&a->in[0]), *x = opt_f32(a, 1), *y = opt_f32(a, 2);
  float *dx = cx_f32(&a->out[0]);
  int64_t n = cx_tensor_numel(&a->out[0]);
  bool avx = cx_cpu_avx512();
#pragma omp parallel if (n > PAR_MIN)
  {
    int64_t i0, i1;
    cx_cpu_thread_range(n, &i0, &i1);
    const float *xs = x ? x + i0 : NULL, *ys = y ? y + i0 : NULL;
    if (avx && i0 < i1) bwd_avx512(&p, dx + i0, dy + i0, xs, ys, i1 - i0);
    else if (i0 < i1) bwd_c(&p, dx + i0, dy + i0, xs, ys, i1 - i0);
  }
  return CX_OK;
}

const cx_kernel cx_cpu_activation[] = {
    {"Relu", NULL, run_act, NULL, CX_LAYOUT_ELTWISE},
    {"LeakyRelu", NULL, run_act, NULL, CX_LAYOUT_ELTWISE},
    {"Clip", NULL, run_act, NULL, CX_LAYOUT_ELTWISE},
    {"Sigmoid", NULL, run_act, NULL, CX_LAYOUT_ELTWISE},
    {"HardSigmoid", NULL, run_act, NULL, CX_LAYOUT_ELTWISE},
    {"HardSwish", NULL, run_act, NULL, CX_LAYOUT_ELTWISE},
    {"Tanh", NULL, run_act, NULL, CX_LAYOUT_ELTWISE},
    {"Exp", NULL, run_act, NULL, CX_LAYOUT_ELTWISE},
    {"Log", NULL, run_act, NULL, CX_LAYOUT_ELTWISE},
    {"Sqrt", NULL, run_act, NULL, CX_LAYOUT_ELTWISE},
    {"Erf", NULL, run_act, NULL, CX_LAYOUT_ELTWISE},
    {"Gelu", NULL, run_act, NULL, CX_LAYOUT_ELTWISE},
    {"Reciprocal", NULL, run_act, NULL, CX_LAYOUT_ELTWISE},
    {"ActivationGrad", NULL, run_act_grad, NULL, CX_LAYOUT_ELTWISE},
    {NULL, NULL, NULL, NULL, 0},
};
