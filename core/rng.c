#include "rng.h"

#include <math.h>

cx_philox cx_philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
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
  return (cx_philox){{c0, c1, c2, c3}};
}

float cx_rng_uniform(uint64_t key, uint64_t index) {
  cx_philox r = cx_philox4x32(key, 0, index);
  return (float)(r.v[0] >> 8) * (1.0f / 16777216.0f);
}

float cx_rng_normal(uint64_t key, uint64_t index) {
  cx_philox r = cx_philox4x32(key, 1, index);
  double u1 = ((double)(r.v[0] >> 8) + 1.0) / 16777217.0, u2 = (double)(r.v[1] >> 8) / 16777216.0;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t cx_rng_key(uint64_t a, uint64_t b, uint64_t c) {
  cx_philox r = cx_philox4x32(a ^ 0x5851F42D4C957F2Dull, b, c);
  return ((uint64_t)r.v[1] << 32) | r.v[0];
}
