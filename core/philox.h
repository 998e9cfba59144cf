#ifndef CX_PHILOX_H
#define CX_PHILOX_H

/* Philox4x32-10 (Salmon et al., 2011), the one definition of the counter-based generator: plain
 * integer arithmetic in a header that C and nvcc both compile (the one core header a .cu file
 * includes), so the CPU kernels, the references (core/rng.h) and the GPU's dropout draw the same
 * numbers bit for bit. */

#include <stdint.h>

#ifdef __CUDACC__
#define CX_PHILOX_FN static inline __host__ __device__
#else
#define CX_PHILOX_FN static inline
#endif

/* The 4 words of block (key, counter_hi, counter_lo) into v. */
CX_PHILOX_FN void cx_philox4x32_block(uint64_t key, uint64_t counter_hi, uint64_t counter_lo,
                                      uint32_t v[4]) {
  uint32_t c0 = (uint32_t)counter_lo, c1 = (uint32_t)(counter_lo >> 32);
  uint32_t c2 = (uint32_t)counter_hi, c3 = (uint32_t)(counter_hi >> 32);
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  v[0] = c0, v[1] = c1, v[2] = c2, v[3] = c3;
}

/* Uniform in [0, 1) with 24 random bits, from stream `key` at position `index`. */
CX_PHILOX_FN float cx_philox_uniform(uint64_t key, uint64_t index) {
  uint32_t v[4];
  cx_philox4x32_block(key, 0, index, v);
  return (float)(v[0] >> 8) * (1.0f / 16777216.0f);
}

#endif
