#include "norm_bf16.h"

#include "bf16_vec.h"

/* the lane groups (16 floats each) whose sums cx_bn_bf16_dots holds in registers */
enum { FLOAT_GROUPS = 8 };

bool cx_bn_bf16_dots_fit(int64_t t) { return t <= 16 * FLOAT_GROUPS; }

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

/* The gradient's reductions, tile after tile with each lane's partial sums held in registers
 * (8 lane groups: tiles of up to 128 floats, 256 bytes of bf16, as for 16, 32 or 64 channels):
 * each lane adds its tiles in order, as the staged loops do, so the sums are theirs bit for bit.
 * Tried and slower than staging: 16 lanes at a time down the tiles (strided reads of cold
 * memory); wider tiles in chunks of 128 lanes (MobileNetV2-0.5's gradients, 11.3 -> 12.2 ms a
 * step); the forward's sums in double read in place the same way (ResNet-20's BatchNorm forward
 * 5.5 ms a step against 4.8 on one Zen 5 core). */

/* l0 += dz, l1 += dz * (x - m) over n values in tiles of t; dz = dy, or with act dy where
 * act[0] < x * kf + bf < act[1], else 0 (a constant argument: one loop each) */
CX_BF16_INLINE void dots_tiles(const uint16_t *dy, const uint16_t *x, int64_t n, int64_t t,
                               const float *m, const float *kf, const float *bf, const float *act,
                               float *l0, float *l1) {
  __m512 lo = _mm512_set1_ps(act ? act[0] : 0), hi = _mm512_set1_ps(act ? act[1] : 0);
  __m512 s0[FLOAT_GROUPS], s1[FLOAT_GROUPS];
  int ng = (int)(t / 16);
#pragma GCC unroll 8
  for (int g = 0; g < FLOAT_GROUPS; g++) {
    s0[g] = g < ng ? _mm512_loadu_ps(l0 + 16 * g) : _mm512_setzero_ps();
    s1[g] = g < ng ? _mm512_loadu_ps(l1 + 16 * g) : _mm512_setzero_ps();
  }
  for (int64_t o = 0; o < n; o += t) {
    int64_t len = n - o < t ? n - o : t;
#pragma GCC unroll 8
    for (int g = 0; g < FLOAT_GROUPS; g++) {
      int64_t j = 16 * g;
      if (g >= ng || j >= len) break;
      __mmask16 mk = cx_bf16_lanes(len - j);
      __m512 xv = cx_bf16_load(x + o + j, mk), dz = cx_bf16_load(dy + o + j, mk);
      if (act) {
        __m512 z = _mm512_add_ps(_mm512_mul_ps(xv, _mm512_loadu_ps(kf + j)),
                                 _mm512_loadu_ps(bf + j));
        dz = _mm512_maskz_mov_ps(
            _mm512_cmp_ps_mask(z, lo, _CMP_GT_OQ) & _mm512_cmp_ps_mask(z, hi, _CMP_LT_OQ), dz);
      }
      __m512 p = _mm512_mul_ps(dz, _mm512_sub_ps(xv, _mm512_loadu_ps(m + j)));
      s0[g] = _mm512_mask_add_ps(s0[g], mk, s0[g], dz);
      s1[g] = _mm512_mask_add_ps(s1[g], mk, s1[g], p);
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < ng; g++) {
    _mm512_storeu_ps(l0 + 16 * g, s0[g]);
    _mm512_storeu_ps(l1 + 16 * g, s1[g]);
  }
}

CX_BF16_TARGET void cx_bn_bf16_dots(const uint16_t *dy, const uint16_t *x, int64_t n, int64_t t,
                                    const float *m, const float *kf, const float *bf,
                                    const float *act, float *l0, float *l1) {
  if (act) dots_tiles(dy, x, n, t, m, kf, bf, act, l0, l1);
  else dots_tiles(dy, x, n, t, m, NULL, NULL, NULL, l0, l1);
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
void cx_bn_bf16_dots(const uint16_t *dy, const uint16_t *x, int64_t n, int64_t t, const float *m,
                     const float *kf, const float *bf, const float *act, float *l0, float *l1) {
  (void)dy, (void)x, (void)n, (void)t, (void)m, (void)kf, (void)bf, (void)act, (void)l0, (void)l1;
}
#endif
