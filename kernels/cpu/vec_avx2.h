#ifndef CX_CPU_VEC_AVX2_H
#define CX_CPU_VEC_AVX2_H

/* AVX2 + FMA math on 8 floats, for CPUs without AVX-512 (AMD EPYC before Zen 4 among them).
 * Inline here because every loop that calls them must inline them to stay fast; callers are
 * compiled with CX_AVX2 and chosen at run time by cx_cpu_avx2() (eltwise_engine.h).
 *
 * NaN handling relies on min/max returning their second operand when either is NaN, so every
 * clamp below is written min(bound, x) / max(bound, x): a NaN x passes through. Accuracy against
 * double-precision libm over dense sweeps is checked by tests/test_act_vec.c. */

#include <immintrin.h>

#define CX_AVX2 __attribute__((target("avx2,fma")))
#define CX_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

CX_AVX2_INLINE __m256 cx_v8_set(float v) { return _mm256_set1_ps(v); }

CX_AVX2_INLINE __m256 cx_v8_abs(__m256 x) {
  return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

/* the sign bit of s on the magnitude of m */
CX_AVX2_INLINE __m256 cx_v8_copysign(__m256 m, __m256 s) {
  __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
  return _mm256_or_ps(_mm256_andnot_ps(sign, m), _mm256_and_ps(sign, s));
}

/* 2^n for integer-valued n in [-252, 254], as the product of two normal powers so that results
 * below 2^-126 round once into the subnormals and results above 2^127 overflow to inf. */
CX_AVX2_INLINE __m256 cx_v8_ldexp(__m256 p, __m256 n) {
  __m256i ni = _mm256_cvtps_epi32(n), h = _mm256_srai_epi32(ni, 1);
  __m256i bias = _mm256_set1_epi32(127);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
  __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* exp: the same Cephes range reduction and polynomial as cx_exp16 (about 1 ulp). Clamped to
 * [-104, 89], which already rounds to 0 and inf; NaN passes. */
CX_AVX2_INLINE __m256 cx_exp8(__m256 x) {
  x = _mm256_max_ps(cx_v8_set(-104.0f), _mm256_min_ps(cx_v8_set(89.0f), x));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, cx_v8_set(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, cx_v8_set(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, cx_v8_set(-2.12194440e-4f), r);
  __m256 p = cx_v8_set(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, cx_v8_set(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, cx_v8_set(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, cx_v8_set(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, cx_v8_set(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, cx_v8_set(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, cx_v8_set(1.0f)));
  return cx_v8_ldexp(p, n);
}

/* exp(-a*a) without the rounding error of a*a: exp(-(hi + lo)) = exp(-hi) * (1 - lo), lo being
 * a*a - hi exactly (FMA). Matters where the result is small, for erfc and Gelu at large |x|.
 * |a| is clamped to 11 (the result is 0 from 10.2 on) so that an infinite a gives 0, not NaN. */
CX_AVX2_INLINE __m256 cx_exp_negsq8(__m256 a) {
  a = _mm256_min_ps(cx_v8_set(11.0f), cx_v8_abs(a));
  __m256 hi = _mm256_mul_ps(a, a), lo = _mm256_fmsub_ps(a, a, hi);
  __m256 e = cx_exp8(_mm256_sub_ps(_mm256_setzero_ps(), hi));
  return _mm256_fnmadd_ps(e, lo, e);
}

/* 1 / (1 + exp(-x)): 0 below -104 and 1 above 89 as the formula gives; NaN passes */
CX_AVX2_INLINE __m256 cx_sigmoid8(__m256 x) {
  __m256 one = cx_v8_set(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, cx_exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

/* tanh: Cephes' odd polynomial below |x| = 0.625, else (1 - e) / (1 + e) with e = exp(-2|x|) */
CX_AVX2_INLINE __m256 cx_tanh8(__m256 x) {
  __m256 ax = cx_v8_abs(x), z = _mm256_mul_ps(x, x);
  __m256 p = cx_v8_set(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, z, cx_v8_set(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z, cx_v8_set(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z, cx_v8_set(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z, cx_v8_set(-3.33332819422e-1f));
  __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  __m256 one = cx_v8_set(1.0f), e = cx_exp8(_mm256_mul_ps(ax, cx_v8_set(-2.0f)));
  __m256 big = cx_v8_copysign(_mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e)), x);
  return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, cx_v8_set(0.625f), _CMP_LT_OQ));
}

/* erf(a) / a = P(a^2) for 0 <= a < 1: a least-squares fit, relative error under 1e-7 */
CX_AVX2_INLINE __m256 cx_erf_small8(__m256 a) {
  __m256 z = _mm256_mul_ps(a, a), p = cx_v8_set(7.898066542111337e-05f);
  p = _mm256_fmadd_ps(p, z, cx_v8_set(-0.0008024311973713338f));
  p = _mm256_fmadd_ps(p, z, cx_v8_set(0.005190048832446337f));
  p = _mm256_fmadd_ps(p, z, cx_v8_set(-0.026854805648326874f));
  p = _mm256_fmadd_ps(p, z, cx_v8_set(0.11283612251281738f));
  p = _mm256_fmadd_ps(p, z, cx_v8_set(-0.3761262893676758f));
  p = _mm256_fmadd_ps(p, z, cx_v8_set(1.128379225730896f));
  return _mm256_mul_ps(p, a);
}

/* erfc(a) for a >= 1: exp(-a^2) R(t), t = 1 / (1 + 0.3275911 a) (Abramowitz and Stegun's
 * variable), R a degree-8 least-squares fit on [1, 10] with relative error about 1e-8. a is
 * clamped to 10.5, where exp(-a^2) rounds to 0, so large and infinite a give 0; NaN passes. */
CX_AVX2_INLINE __m256 cx_erfc_big8(__m256 a) {
  a = _mm256_min_ps(cx_v8_set(10.5f), a);
  __m256 one = cx_v8_set(1.0f);
  __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(a, cx_v8_set(0.3275911f), one));
  __m256 r = cx_v8_set(-0.14027252793312073f);
  r = _mm256_fmadd_ps(r, t, cx_v8_set(0.502591073513031f));
  r = _mm256_fmadd_ps(r, t, cx_v8_set(-0.43261298537254333f));
  r = _mm256_fmadd_ps(r, t, cx_v8_set(0.4951317012310028f));
  r = _mm256_fmadd_ps(r, t, cx_v8_set(-0.008737078867852688f));
  r = _mm256_fmadd_ps(r, t, cx_v8_set(0.22190745174884796f));
  r = _mm256_fmadd_ps(r, t, cx_v8_set(0.17638473212718964f));
  r = _mm256_fmadd_ps(r, t, cx_v8_set(0.18568634986877441f));
  r = _mm256_fmadd_ps(r, t, cx_v8_set(-3.83471415261738e-05f));
  return _mm256_mul_ps(cx_exp_negsq8(a), r);
}

CX_AVX2_INLINE __m256 cx_erf8(__m256 x) {
  __m256 a = cx_v8_abs(x);
  __m256 big = _mm256_sub_ps(cx_v8_set(1.0f), cx_erfc_big8(a));
  __m256 v = _mm256_blendv_ps(big, cx_erf_small8(a), _mm256_cmp_ps(a, cx_v8_set(1.0f), _CMP_LT_OQ));
  return cx_v8_copysign(v, x);
}

/* 1 + erf(z) without the cancellation at negative z, where it is erfc(-z) */
CX_AVX2_INLINE __m256 cx_one_plus_erf8(__m256 z) {
  __m256 one = cx_v8_set(1.0f), a = cx_v8_abs(z);
  __m256 small = cx_erf_small8(a), tail = cx_erfc_big8(a);
  __m256 neg = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ);
  __m256 lt1 = _mm256_cmp_ps(a, one, _CMP_LT_OQ);
  __m256 pos = _mm256_blendv_ps(_mm256_sub_ps(cx_v8_set(2.0f), tail), _mm256_add_ps(one, small), lt1);
  __m256 nge = _mm256_blendv_ps(tail, _mm256_sub_ps(one, small), lt1);
  return _mm256_blendv_ps(pos, nge, neg);
}

#endif
