#ifndef CX_CPU_ELTWISE_ENGINE_H
#define CX_CPU_ELTWISE_ENGINE_H

/* Engines shared by the element-wise, activation, reduction and loss kernels: a strided broadcast
 * kernel for binary ops, a reduce-to kernel (the inverse of broadcasting), and row primitives for
 * softmax-like ops. Each has an AVX-512 path chosen at run time and a portable C path; the
 * binary rows and the exp rows also an AVX2 + FMA one. */

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "../../core/tensor.h"

/* AVX-512F present and not disabled with CX_CPU_NO_AVX512=1 (to test the portable path). */
bool cx_cpu_avx512(void);
/* AVX2 and FMA present and not disabled with CX_CPU_NO_AVX2=1: the path kernels take where
 * AVX-512 is absent (or disabled), before the portable one. */
bool cx_cpu_avx2(void);
/* Tests: run the portable paths even where AVX-512 is present (call between runs). */
void cx_cpu_force_portable(bool on);

/* This thread's share [i0, i1) of n elements inside a parallel region, on 16-element boundaries so
 * that every thread's stores are whole vectors. */
void cx_cpu_thread_range(int64_t n, int64_t *i0, int64_t *i1);

typedef enum cx_bin_op { CX_BIN_ADD, CX_BIN_SUB, CX_BIN_MUL, CX_BIN_DIV, CX_BIN_COPY } cx_bin_op;

/* y = a op b with numpy broadcasting of a (shape as) and b (shape bs) to ys; CX_BIN_COPY ignores b
 * and writes scale * a. y may alias a when as equals ys. */
void cx_cpu_binary(cx_bin_op op, float scale, float *y, const cx_shape *ys, const float *a,
                   const cx_shape *as, const float *b, const cx_shape *bs);

/* y = a + b over n contiguous floats (y may alias a or b). */
void cx_cpu_row_add(float *y, const float *a, const float *b, int64_t n);

/* y = scale * (x summed down to `keep`), where keep has x's rank (or fewer, aligned right) and
 * each of its dimensions is 1 or equal to x's. y holds numel(keep) elements. */
void cx_cpu_reduce_to(float *y, const cx_shape *keep, const float *x, const cx_shape *xs,
                      float scale);

/* Splits shape s around `axis` into outer * n * inner. */
void cx_cpu_axis_split(const cx_shape *s, int axis, int64_t *outer, int64_t *n, int64_t *inner);

/* Row primitives over n contiguous floats. */
float cx_cpu_row_max(const float *x, int64_t n);
/* y = exp(x - m); returns the sum of y (y may alias x) */
float cx_cpu_row_exp_sum(float *y, const float *x, float m, int64_t n);
/* y = a * x + b */
void cx_cpu_row_axpb(float *y, const float *x, float a, float b, int64_t n);
void cx_cpu_row_scale(float *y, const float *x, float s, int64_t n);
/* y = x - c */
void cx_cpu_row_sub(float *y, const float *x, float c, int64_t n);
float cx_cpu_row_dot(const float *a, const float *b, int64_t n);
float cx_cpu_row_sum(const float *x, int64_t n);
/* log sum exp(scale * x) for scale > 0, summed in float and finished in double */
double cx_cpu_row_lse(const float *x, float scale, int64_t n);
/* y = exp(a * x - b) */
void cx_cpu_row_exp_axmb(float *y, const float *x, float a, float b, int64_t n);

/* Element-wise maps over n contiguous floats (x may alias y). */
void cx_cpu_map_exp(float *y, const float *x, int64_t n);

/* exp of 16 floats: Cephes' expf range reduction and polynomial (about 1 ulp), 2^n applied with
 * scalef. Inline here because every AVX-512 loop that needs it must inline it to stay fast. min and
 * max return their second operand on NaN, so NaN passes through the clamp. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 cx_exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), _mm512_min_ps(_mm512_set1_ps(89.0f), x));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

#endif
