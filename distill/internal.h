#ifndef CX_DISTILL_INTERNAL_H
#define CX_DISTILL_INTERNAL_H

/* Shared by the files of distill/; not part of its interface (distill/distill.h). */

#include "distill.h"

/* One weighted term of the loss: a scalar value of the graph. */
typedef struct cx_kd_term {
  int value;
  float weight;
} cx_kd_term;

/* Adds the feature-hint terms of c to g (the student's clone) and appends them to terms. */
cx_status cx_kd_add_hints(cx_graph *g, const cx_graph *student, const cx_kd_config *c,
                          cx_kd_term *terms, int *n_terms);

/* FNV-1a, 64 bits, continued from h (start with CX_FNV_OFFSET). */
#define CX_FNV_OFFSET 0xcbf29ce484222325ULL
uint64_t cx_kd_fnv(uint64_t h, const void *data, size_t n);

#endif
