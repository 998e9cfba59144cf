#include "rng.h"

#include <math.h>

#include "philox.h"

cx_philox cx_philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  cx_philox r;
  cx_philox4x32_block(key, counter_hi, counter_lo, r.v);
  return r;
}

float cx_rng_uniform(uint64_t key, uint64_t index) { return cx_philox_uniform(key, index); }

float cx_rng_normal(uint64_t key, uint64_t index) {
  cx_philox r = cx_philox4x32(key, 1, index);
  double u1 = ((double)(r.v[0] >> 8) + 1.0) / 16777217.0, u2 = (double)(r.v[1] >> 8) / 16777216.0;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t cx_rng_key(uint64_t a, uint64_t b, uint64_t c) {
  cx_philox r = cx_philox4x32(a ^ 0x5851F42D4C957F2Dull, b, c);
  return ((uint64_t)r.v[1] << 32) | r.v[0];
}
