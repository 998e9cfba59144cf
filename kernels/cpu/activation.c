/* CPU kernels of the activations and of ActivationGrad: one forward and one backward loop that
 * switch on the activation once per range, each with an AVX-512 path, an AVX2 + FMA path (every
 * activation but Log's forward) and a portable one. */

#include <immintrin.h>
#include <math.h>

#include "../../core/ops/activation.h"
#include "bf16_vec.h"
#include "cpu.h"
#include "eltwise_engine.h"
#include "stage.h"
#include "vec_avx2.h"

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
  case CX_ACT_HARD_SWISH: return x * clampf((x + 3) / 6.0f, 0, 1); /* x / 6 + 0.5 cancels near -3 */
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
  case CX_ACT_HARD_SWISH: return x < -3 ? 0 : x > 3 ? dy : dy * ((x + 1.5f) / 3.0f);
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

/* What the AVX-512 loops do not vectorise runs the AVX2 + FMA loops (every AVX-512 CPU has
 * them), whose erf, Gelu and derivatives are accurate where the portable libm-in-float loop is
 * not (tests/test_act_vec.c). */
CX_AVX2 static void fwd_avx2(const act_par *p, float *y, const float *x, int64_t n);
CX_AVX2 static void bwd_avx2(const act_par *p, float *dx, const float *dy, const float *x,
                             const float *y, int64_t n);

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
  case CX_ACT_HARD_SWISH: /* (x + 3) / 6, as the AVX2 path */
    return _mm512_mul_ps(
        x, clamp16(_mm512_mul_ps(_mm512_add_ps(x, _mm512_set1_ps(3.0f)), _mm512_set1_ps(1.0f / 6.0f)),
                   0, 1));
  case CX_ACT_TANH: return tanh16(x);
  case CX_ACT_EXP: return cx_exp16(x);
  case CX_ACT_SQRT: return _mm512_sqrt_ps(x);
  case CX_ACT_LOG: /* these run the AVX2 loop */
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
  default: fwd_avx2(p, y, x, n); break;
  }
}

/* The cheap, common derivatives (masks and scales of dY) with a portable tail; the rest run
 * the AVX2 + FMA loop. */
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
  default: bwd_avx2(p, dx, dy, x, y, n); return;
  }
  bwd_c(p, dx + i, dy + i, x ? x + i : NULL, y ? y + i : NULL, n - i);
}

/* ---- bf16 in place (bf16_vec.h): the AVX-512 loops above, widening and rounding in registers,
 * for the activations they have (fwd_bf16_has); the rest run the AVX2 loop, staged ---- */

#define FWD_LOOP_BF16(OP)                                                                         \
  do {                                                                                            \
    act_par q = *p;                                                                               \
    q.op = OP;                                                                                    \
    for (int64_t i = 0; i < n; i += 16) {                                                         \
      __mmask16 m = cx_bf16_lanes(n - i);                                                         \
      cx_bf16_store(y + i, fwd16(&q, cx_bf16_load(x + i, m)), m);                                 \
    }                                                                                             \
  } while (0)

static bool fwd_bf16_has(cx_act op) {
  return op == CX_ACT_RELU || op == CX_ACT_LEAKY_RELU || op == CX_ACT_CLIP ||
         op == CX_ACT_SIGMOID || op == CX_ACT_HARD_SIGMOID || op == CX_ACT_HARD_SWISH ||
         op == CX_ACT_TANH || op == CX_ACT_EXP || op == CX_ACT_SQRT;
}

CX_BF16_TARGET static void fwd_bf16(const act_par *p, uint16_t *y, const uint16_t *x, int64_t n) {
  switch (p->op) {
  case CX_ACT_RELU: FWD_LOOP_BF16(CX_ACT_RELU); break;
  case CX_ACT_LEAKY_RELU: FWD_LOOP_BF16(CX_ACT_LEAKY_RELU); break;
  case CX_ACT_CLIP: FWD_LOOP_BF16(CX_ACT_CLIP); break;
  case CX_ACT_SIGMOID: FWD_LOOP_BF16(CX_ACT_SIGMOID); break;
  case CX_ACT_HARD_SIGMOID: FWD_LOOP_BF16(CX_ACT_HARD_SIGMOID); break;
  case CX_ACT_HARD_SWISH: FWD_LOOP_BF16(CX_ACT_HARD_SWISH); break;
  case CX_ACT_TANH: FWD_LOOP_BF16(CX_ACT_TANH); break;
  case CX_ACT_EXP: FWD_LOOP_BF16(CX_ACT_EXP); break;
  default: FWD_LOOP_BF16(CX_ACT_SQRT); break; /* fwd_bf16_has(p->op) */
  }
}

/* The masks of bwd_avx512: dY where v (Relu: Y) > 0, or lo < v (Clip: X) < hi, else 0. Only
 * these: bwd_avx512 leaves its tails to bwd1, whose Sigmoid multiplies in another order, so a
 * vector tail here would not be the staged result. */
CX_BF16_TARGET static void bwd_bf16(const act_par *p, uint16_t *dx, const uint16_t *dy,
                                    const uint16_t *v, int64_t n) {
  bool relu = p->op == CX_ACT_RELU;
  __m512 lo = _mm512_set1_ps(relu ? 0 : p->lo), hi = _mm512_set1_ps(relu ? INFINITY : p->hi);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = cx_bf16_lanes(n - i);
    __m512 u = cx_bf16_load(v + i, m);
    __mmask16 in = _mm512_cmp_ps_mask(u, lo, _CMP_GT_OQ);
    if (!relu) in &= _mm512_cmp_ps_mask(u, hi, _CMP_LT_OQ);
    cx_bf16_store(dx + i, _mm512_maskz_mov_ps(in, cx_bf16_load(dy + i, m)), m);
  }
}

/* ---- AVX2 + FMA (no AVX-512, and what the AVX-512 loops leave) ---- */

#define AVX2 CX_AVX2_INLINE

AVX2 __m256 clamp8(__m256 v, float lo, float hi) {
  return _mm256_min_ps(_mm256_max_ps(v, cx_v8_set(lo)), cx_v8_set(hi));
}

/* lanes [0, n) set, for the masked loads and stores of a tail shorter than 8 */
AVX2 __m256i tail8(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Gelu: x * Phi(x) with Phi from 1 + erf without its cancellation at negative x; the tanh form
 * as x * sigmoid(2u), which equals 0.5 x (1 + tanh(u)) and has no cancellation either */
AVX2 __m256 gelu8(float alpha, __m256 x) {
  if (alpha == 0)
    return _mm256_mul_ps(_mm256_mul_ps(x, cx_v8_set(0.5f)),
                         cx_one_plus_erf8(_mm256_mul_ps(x, cx_v8_set(0.7071067812f))));
  __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  __m256 u2 = _mm256_mul_ps(_mm256_fmadd_ps(x3, cx_v8_set(0.044715f), x),
                            cx_v8_set(2 * 0.7978845608f));
  return _mm256_mul_ps(x, cx_sigmoid8(u2));
}

AVX2 __m256 gelu_grad8(float alpha, __m256 x) {
  __m256 xx = _mm256_mul_ps(x, x);
  if (alpha == 0) {
    __m256 phi = _mm256_mul_ps(cx_v8_set(0.5f),
                               cx_one_plus_erf8(_mm256_mul_ps(x, cx_v8_set(0.7071067812f))));
    __m256 pdf = cx_exp_negsq8(_mm256_mul_ps(x, cx_v8_set(0.7071067812f)));
    return _mm256_fmadd_ps(_mm256_mul_ps(x, cx_v8_set(0.3989422804f)), pdf, phi);
  }
  /* 0.5 (1 + t) = s and 1 - t^2 = 4 s (1 - s), with s = sigmoid(2u). Beyond |x| = 20 the
   * derivative is 0 or 1 in float; the clamp keeps x^3 finite there (inf * 0 would be NaN). */
  x = _mm256_max_ps(cx_v8_set(-20.0f), _mm256_min_ps(cx_v8_set(20.0f), x));
  xx = _mm256_mul_ps(x, x);
  __m256 u2 = _mm256_mul_ps(_mm256_fmadd_ps(_mm256_mul_ps(xx, x), cx_v8_set(0.044715f), x),
                            cx_v8_set(2 * 0.7978845608f));
  __m256 s = cx_sigmoid8(u2);
  __m256 ds = _mm256_mul_ps(s, _mm256_sub_ps(cx_v8_set(1.0f), s));
  __m256 du = _mm256_fmadd_ps(xx, cx_v8_set(3 * 0.044715f), cx_v8_set(1.0f));
  __m256 k = _mm256_mul_ps(_mm256_mul_ps(x, cx_v8_set(2 * 0.7978845608f)), du);
  return _mm256_fmadd_ps(k, ds, s);
}

AVX2 __m256 fwd8(const act_par *p, __m256 x) {
  __m256 zero = _mm256_setzero_ps(), one = cx_v8_set(1.0f);
  switch (p->op) {
  case CX_ACT_RELU: return _mm256_max_ps(x, zero);
  case CX_ACT_LEAKY_RELU:
    return _mm256_blendv_ps(x, _mm256_mul_ps(x, cx_v8_set(p->alpha)),
                            _mm256_cmp_ps(x, zero, _CMP_LT_OQ));
  case CX_ACT_CLIP: return clamp8(x, p->lo, p->hi);
  case CX_ACT_SIGMOID: return cx_sigmoid8(x);
  case CX_ACT_HARD_SIGMOID:
    return clamp8(_mm256_fmadd_ps(x, cx_v8_set(p->alpha), cx_v8_set(p->beta)), 0, 1);
  case CX_ACT_HARD_SWISH: /* (x + 3) / 6 rather than x / 6 + 0.5, which cancels near -3 */
    return _mm256_mul_ps(
        x, clamp8(_mm256_mul_ps(_mm256_add_ps(x, cx_v8_set(3.0f)), cx_v8_set(1.0f / 6.0f)), 0, 1));
  case CX_ACT_TANH: return cx_tanh8(x);
  case CX_ACT_EXP: return cx_exp8(x);
  case CX_ACT_SQRT: return _mm256_sqrt_ps(x);
  case CX_ACT_ERF: return cx_erf8(x);
  case CX_ACT_GELU: return gelu8(p->alpha, x);
  case CX_ACT_RECIPROCAL: return _mm256_div_ps(one, x);
  case CX_ACT_LOG: /* handled by the portable loop */
  case CX_ACT_COUNT: break;
  }
  return x;
}

/* dX from dY, x and y (whichever the derivative reads; the others are zero vectors) */
AVX2 __m256 bwd8(const act_par *p, __m256 dy, __m256 x, __m256 y) {
  __m256 zero = _mm256_setzero_ps(), one = cx_v8_set(1.0f);
  switch (p->op) {
  case CX_ACT_RELU: return _mm256_and_ps(dy, _mm256_cmp_ps(y, zero, _CMP_GT_OQ));
  case CX_ACT_LEAKY_RELU:
    return _mm256_blendv_ps(_mm256_mul_ps(dy, cx_v8_set(p->alpha)), dy,
                            _mm256_cmp_ps(x, zero, _CMP_GT_OQ));
  case CX_ACT_CLIP:
    return _mm256_and_ps(dy, _mm256_and_ps(_mm256_cmp_ps(x, cx_v8_set(p->lo), _CMP_GT_OQ),
                                           _mm256_cmp_ps(x, cx_v8_set(p->hi), _CMP_LT_OQ)));
  case CX_ACT_SIGMOID: return _mm256_mul_ps(dy, _mm256_mul_ps(y, _mm256_sub_ps(one, y)));
  case CX_ACT_HARD_SIGMOID: {
    __m256 v = _mm256_fmadd_ps(x, cx_v8_set(p->alpha), cx_v8_set(p->beta));
    __m256 in = _mm256_and_ps(_mm256_cmp_ps(v, zero, _CMP_GT_OQ), _mm256_cmp_ps(v, one, _CMP_LT_OQ));
    return _mm256_and_ps(_mm256_mul_ps(dy, cx_v8_set(p->alpha)), in);
  }
  case CX_ACT_HARD_SWISH: {
    /* (x + 1.5) / 3 rather than x / 3 + 0.5, which cancels near -1.5 */
    __m256 mid = _mm256_mul_ps(
        dy, _mm256_mul_ps(_mm256_add_ps(x, cx_v8_set(1.5f)), cx_v8_set(1.0f / 3.0f)));
    __m256 v = _mm256_blendv_ps(mid, dy, _mm256_cmp_ps(x, cx_v8_set(3.0f), _CMP_GT_OQ));
    return _mm256_andnot_ps(_mm256_cmp_ps(x, cx_v8_set(-3.0f), _CMP_LT_OQ), v);
  }
  case CX_ACT_TANH: return _mm256_mul_ps(dy, _mm256_fnmadd_ps(y, y, one));
  case CX_ACT_EXP: return _mm256_mul_ps(dy, y);
  case CX_ACT_LOG: return _mm256_div_ps(dy, x);
  case CX_ACT_SQRT: return _mm256_div_ps(_mm256_mul_ps(dy, cx_v8_set(0.5f)), y);
  case CX_ACT_ERF:
    return _mm256_mul_ps(_mm256_mul_ps(dy, cx_v8_set(1.1283791671f)), cx_exp_negsq8(x));
  case CX_ACT_GELU: return _mm256_mul_ps(dy, gelu_grad8(p->alpha, x));
  case CX_ACT_RECIPROCAL: return _mm256_mul_ps(_mm256_sub_ps(zero, dy), _mm256_mul_ps(y, y));
  case CX_ACT_COUNT: break;
  }
  return dy;
}

/* The op is a constant inside each case below, so fwd8's and bwd8's switches fold out. */
#define FWD_LOOP8(OP)                                                                             \
  do {                                                                                            \
    act_par q = *p;                                                                               \
    q.op = OP;                                                                                    \
    int64_t i = 0;                                                                                \
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, fwd8(&q, _mm256_loadu_ps(x + i)));         \
    if (i < n) {                                                                                  \
      __m256i m = tail8(n - i);                                                                   \
      _mm256_maskstore_ps(y + i, m, fwd8(&q, _mm256_maskload_ps(x + i, m)));                      \
    }                                                                                             \
  } while (0)

CX_AVX2 static void fwd_avx2(const act_par *p, float *y, const float *x, int64_t n) {
  switch (p->op) {
  case CX_ACT_RELU: FWD_LOOP8(CX_ACT_RELU); break;
  case CX_ACT_LEAKY_RELU: FWD_LOOP8(CX_ACT_LEAKY_RELU); break;
  case CX_ACT_CLIP: FWD_LOOP8(CX_ACT_CLIP); break;
  case CX_ACT_SIGMOID: FWD_LOOP8(CX_ACT_SIGMOID); break;
  case CX_ACT_HARD_SIGMOID: FWD_LOOP8(CX_ACT_HARD_SIGMOID); break;
  case CX_ACT_HARD_SWISH: FWD_LOOP8(CX_ACT_HARD_SWISH); break;
  case CX_ACT_TANH: FWD_LOOP8(CX_ACT_TANH); break;
  case CX_ACT_EXP: FWD_LOOP8(CX_ACT_EXP); break;
  case CX_ACT_SQRT: FWD_LOOP8(CX_ACT_SQRT); break;
  case CX_ACT_ERF: FWD_LOOP8(CX_ACT_ERF); break;
  case CX_ACT_GELU: FWD_LOOP8(CX_ACT_GELU); break;
  case CX_ACT_RECIPROCAL: FWD_LOOP8(CX_ACT_RECIPROCAL); break;
  default: fwd_c(p, y, x, n); break;
  }
}

/* an operand the derivative does not read is NULL and loads as zeros */
#define LD8(P, I, M) ((P) ? _mm256_maskload_ps((P) + (I), (M)) : _mm256_setzero_ps())

#define BWD_LOOP8(OP)                                                                             \
  do {                                                                                            \
    act_par q = *p;                                                                               \
    q.op = OP;                                                                                    \
    __m256i all = _mm256_set1_epi32(-1);                                                          \
    int64_t i = 0;                                                                                \
    for (; i + 8 <= n; i += 8)                                                                    \
      _mm256_storeu_ps(dx + i, bwd8(&q, _mm256_loadu_ps(dy + i), LD8(x, i, all), LD8(y, i, all))); \
    if (i < n) {                                                                                  \
      __m256i m = tail8(n - i);                                                                   \
      _mm256_maskstore_ps(dx + i, m, bwd8(&q, LD8(dy, i, m), LD8(x, i, m), LD8(y, i, m)));        \
    }                                                                                             \
  } while (0)

CX_AVX2 static void bwd_avx2(const act_par *p, float *dx, const float *dy, const float *x,
                             const float *y, int64_t n) {
  switch (p->op) {
  case CX_ACT_RELU: BWD_LOOP8(CX_ACT_RELU); break;
  case CX_ACT_LEAKY_RELU: BWD_LOOP8(CX_ACT_LEAKY_RELU); break;
  case CX_ACT_CLIP: BWD_LOOP8(CX_ACT_CLIP); break;
  case CX_ACT_SIGMOID: BWD_LOOP8(CX_ACT_SIGMOID); break;
  case CX_ACT_HARD_SIGMOID: BWD_LOOP8(CX_ACT_HARD_SIGMOID); break;
  case CX_ACT_HARD_SWISH: BWD_LOOP8(CX_ACT_HARD_SWISH); break;
  case CX_ACT_TANH: BWD_LOOP8(CX_ACT_TANH); break;
  case CX_ACT_EXP: BWD_LOOP8(CX_ACT_EXP); break;
  case CX_ACT_LOG: BWD_LOOP8(CX_ACT_LOG); break;
  case CX_ACT_SQRT: BWD_LOOP8(CX_ACT_SQRT); break;
  case CX_ACT_ERF: BWD_LOOP8(CX_ACT_ERF); break;
  case CX_ACT_GELU: BWD_LOOP8(CX_ACT_GELU); break;
  case CX_ACT_RECIPROCAL: BWD_LOOP8(CX_ACT_RECIPROCAL); break;
  default: bwd_c(p, dx, dy, x, y, n); break;
  }
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

/* The forward over n elements, on the widest instruction set present. */
static void fwd_rows(const void *ctx, float *y, const float *const *x, int64_t n) {
  const act_par *p = ctx;
  if (cx_cpu_avx512()) fwd_avx512(p, y, x[0], n);
  else if (cx_cpu_avx2()) fwd_avx2(p, y, x[0], n);
  else fwd_c(p, y, x[0], n);
}

/* dX from dY and the operands the derivative reads (x[1], x[2]: X, Y, either may be NULL). */
static void bwd_rows(const void *ctx, float *dx, const float *const *x, int64_t n) {
  const act_par *p = ctx;
  if (cx_cpu_avx512()) bwd_avx512(p, dx, x[0], x[1], x[2], n);
  else if (cx_cpu_avx2()) bwd_avx2(p, dx, x[0], x[1], x[2], n);
  else bwd_c(p, dx, x[0], x[1], x[2], n);
}

/* Over the whole output, split between threads; bf16 operands staged (kernels/cpu/stage.h). */
static void run_rows(const cx_kernel_args *a, cx_stage_fn f, const act_par *p,
                     const cx_tensor *const *x, int n_x) {
  int64_t n = cx_tensor_numel(&a->out[0]);
  if (cx_stage_any_bf16(a->in, a->n_in, a->out, 1)) {
    cx_stage_map(f, p, &a->out[0], x, n_x, n > PAR_MIN);
    return;
  }
#pragma omp parallel if (n > PAR_MIN)
  {
    int64_t i0, i1;
    cx_cpu_thread_range(n, &i0, &i1);
    const float *xs[3] = {0};
    for (int k = 0; k < n_x; k++) xs[k] = x[k] ? cx_f32(x[k]) + i0 : NULL;
    if (i0 < i1) f(p, cx_f32(&a->out[0]) + i0, xs, i1 - i0);
  }
}

/* The activation on bf16 X and Y in place (fwd_bf16_has it). */
static void run_act_bf16(const cx_kernel_args *a, const act_par *p) {
  int64_t n = cx_tensor_numel(&a->out[0]);
#pragma omp parallel if (n > PAR_MIN)
  {
    int64_t i0, i1;
    cx_cpu_thread_range(n, &i0, &i1);
    if (i0 < i1)
      fwd_bf16(p, (uint16_t *)a->out[0].data + i0, (const uint16_t *)a->in[0].data + i0, i1 - i0);
  }
}

static cx_status run_act(const cx_kernel_args *a) {
  act_par p = params(a, 1);
  if (fwd_bf16_has(p.op) && cx_stage_all_bf16(a->in, 1, a->out, 1)) { /* Clip's bounds: f32 */
    run_act_bf16(a, &p);
    return CX_OK;
  }
  const cx_tensor *x[1] = {&a->in[0]};
  run_rows(a, fwd_rows, &p, x, 1);
  return CX_OK;
}

static const cx_tensor *opt_in(const cx_kernel_args *a, int i) {
  return i < a->n_in && a->in[i].data ? &a->in[i] : NULL;
}

/* ActivationGrad(dY, X, Y[, min, max]) */
static cx_status run_act_grad(const cx_kernel_args *a) {
  act_par p = params(a, 3);
  if ((int)p.op < 0)
    return cx_fail(CX_ERR_ARG, "node '%s' (ActivationGrad): unknown activation '%s'",
                   a->node->name, cx_node_string(a->node, "op", "(missing)"));
  const cx_tensor *x[3] = {&a->in[0], opt_in(a, 1), opt_in(a, 2)};
  /* the derivatives bwd_bf16 has, on bf16 dY, dX and the operand each reads, in place */
  const cx_tensor *v = p.op == CX_ACT_RELU ? x[2] : p.op == CX_ACT_CLIP ? x[1] : NULL;
  if (v && v->dtype == CX_BF16 && x[0]->dtype == CX_BF16 && a->out[0].dtype == CX_BF16 &&
      cx_cpu_bf16_direct()) {
    int64_t n = cx_tensor_numel(&a->out[0]);
#pragma omp parallel if (n > PAR_MIN)
    {
      int64_t i0, i1;
      cx_cpu_thread_range(n, &i0, &i1);
      if (i0 < i1)
        bwd_bf16(&p, (uint16_t *)a->out[0].data + i0, (const uint16_t *)x[0]->data + i0,
                 (const uint16_t *)v->data + i0, i1 - i0);
    }
    return CX_OK;
  }
  run_rows(a, bwd_rows, &p, x, 3);
  return CX_OK;
}

const cx_kernel cx_cpu_activation[] = {
    {"Relu", NULL, run_act, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"LeakyRelu", NULL, run_act, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Clip", NULL, run_act, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Sigmoid", NULL, run_act, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"HardSigmoid", NULL, run_act, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"HardSwish", NULL, run_act, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Tanh", NULL, run_act, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Exp", NULL, run_act, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Log", NULL, run_act, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Sqrt", NULL, run_act, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Erf", NULL, run_act, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Gelu", NULL, run_act, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Reciprocal", NULL, run_act, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"ActivationGrad", NULL, run_act_grad, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
