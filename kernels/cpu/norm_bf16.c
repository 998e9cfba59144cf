#include "norm_bf16.h"

#include "bf16_vec.h"

#if defined(__x86_64__) || defined(__i386__)
/* max(z, lo) then min(., hi) return their second operand on a NaN, as the C loops' z > lo ? z :
 * lo and z < hi ? z : hi do */
CX_BF16_TARGET void cx_bn_bf16_affine(const uint16_t *x, uint16_t *y, int64_t n, int64_t t,
                                      const float *k, const float *b, const float *act) {
  __m512 lo = _mm512_set1_ps(act ? act[0] : 0), hi = _mm512_set1_ps(act ? act[1] : 0);
  for (int64_t o = 0; o < n; o += t) {
    int64_t len = n - o < t ? n - o : t;
    for (int64_t j = 0; j < len; j += 16) {
      __mmask16 m = cx_bf16_lanes(len - j);
      __m512 z = _mm512_mul_ps(cx_bf16_load(x + o + j, m), _mm512_loadu_ps(k + j));
      z = _mm512_add_ps(z, _mm512_loadu_ps(b + j));
      if (act) z = _mm512_min_ps(_mm512_max_ps(z, lo), hi);
      cx_bf16_store(y + o + j, z, m);
    }
  }
}

CX_BF16_TARGET void cx_bn_bf16_grad(const uint16_t *dy, const uint16_t *x, uint16_t *dx, int64_t n,
                                    int64_t t, const float *k, const float *kx, const float *b,
                                    const float *kf, const float *bf, const float *act) {
  __m512 lo = _mm512_set1_ps(act ? act[0] : 0), hi = _mm512_set1_ps(act ? act[1] : 0);
  for (int64_t o = 0; o < n; o += t) {
    int64_t len = n - o < t ? n - o : t;
    for (int64_t j = 0; j < len; j += 16) {
      __mmask16 m = cx_bf16_lanes(len - j);
      __m512 xv = cx_bf16_load(x + o + j, m), dz = cx_bf16_load(dy + o + j, m);
      if (act) {
        __m512 z = _mm512_mul_ps(xv, _mm512_loadu_ps(kf + j));
        z = _mm512_add_ps(z, _mm512_loadu_ps(bf + j));
        __mmask16 in =
            _mm512_cmp_ps_mask(z, lo, _CMP_GT_OQ) & _mm512_cmp_ps_mask(z, hi, _CMP_LT_OQ);
        dz = _mm512_maskz_mov_ps(in, dz);
      }
      __m512 g = _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(k + j), dz),
                               _mm512_mul_ps(_mm512_loadu_ps(kx + j), xv));
      cx_bf16_store(dx + o + j, _mm512_add_ps(g, _mm512_loadu_ps(b + j)), m);
    }
  }
}

#else /* never called: cx_cpu_bf16_direct() is false */
void cx_bn_bf16_affine(const uint16_t *x, uint16_t *y, int64_t n, int64_t t, const float *k,
                       const float *b, const float *act) {
  (void)x, (void)y, (void)n, (void)t, (void)k, (void)b, (void)act;
}
void cx_bn_bf16_grad(const uint16_t *dy, const uint16_t *x, uint16_t *dx, int64_t n, int64_t t,
                     const float *k, const float *kx, const float *b, const float *kf,
                     const float *bf, const float *act) {
  (void)dy, (void)x, (void)dx, (void)n, (void)t, (void)k, (void)kx, (void)b, (void)kf, (void)bf,
      (void)act;
}
#endif
