#ifndef CX_CPU_BF16_VEC_H
#define CX_CPU_BF16_VEC_H

/* bf16 activations read and written in place by AVX-512 loops: 16 values widened into a vector
 * of floats, 16 rounded back (nearest even, vcvtneps2bf16) on the store, the last lanes of a run
 * masked. Kernels whose f32 loops are vector code use these where every argument is bf16,
 * instead of staging through f32 buffers (stage.h), which cost a ReLU-sized pass about 30% more;
 * the arithmetic in between is the f32 loop's, so the results are the staged ones bit for bit. */

#include <stdbool.h>
#include <stdint.h>

/* Whether the CPU has AVX512-BF16 (and BW) and CX_BF16_DIRECT=off is not set (that stages every
 * kernel, to compare). */
bool cx_cpu_bf16_direct(void);

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define CX_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define CX_BF16_INLINE CX_BF16_TARGET __attribute__((always_inline)) static inline

/* the first `left` of 16 lanes */
CX_BF16_INLINE __mmask16 cx_bf16_lanes(int64_t left) {
  return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

/* Masked loads and stores only for a run's last lanes: on every vector they made a bf16 ReLU
 * (forward and gradient) slower than staging it (Zen 5) */
CX_BF16_INLINE __m512 cx_bf16_load(const uint16_t *p, __mmask16 m) {
  __m256i h =
      m == 0xffff ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

CX_BF16_INLINE void cx_bf16_store(uint16_t *p, __m512 v, __mmask16 m) {
  __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
  if (m == 0xffff) _mm256_storeu_si256((__m256i *)p, h);
  else _mm256_mask_storeu_epi16(p, m, h);
}
#endif

#endif
