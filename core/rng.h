#ifndef CX_RNG_H
#define CX_RNG_H

#include <stdint.h>

/* Counter-based RNG (Philox4x32-10): the numbers are a pure function of (key, counter), so a
 * value depends on what it is for (seed, step, node, element), never on which thread drew it. */

typedef struct cx_philox {
  uint32_t v[4];
} cx_philox;

cx_philox cx_philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);

/* Uniform in [0, 1) with 24 random bits, from stream `key` at position `index`. */
float cx_rng_uniform(uint64_t key, uint64_t index);
/* Standard normal (Box-Muller on one Philox block). */
float cx_rng_normal(uint64_t key, uint64_t index);
/* Mixes a few integers into a stream key, e.g. (seed, step, node). */
uint64_t cx_rng_key(uint64_t a, uint64_t b, uint64_t c);

#endif
