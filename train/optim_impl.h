#ifndef CX_OPTIM_IMPL_H
#define CX_OPTIM_IMPL_H

/* Inside the optimizers: the per-tensor update of each kind, over plain float arrays. */

#include <stdint.h>

#include "optim.h"

/* Tensors below this many elements are updated by one thread: forking costs more. */
#define CX_OPTIM_PARALLEL_MIN 32768

typedef struct cx_optim_slot {
  float *w;        /* parameter */
  const float *g;  /* its gradient */
  float *s[2];     /* its state: momentum buffer, or first and second moments */
  int64_t n;
  float wd;        /* weight decay for this tensor (0 for those without) */
} cx_optim_slot;

void cx_optim_sgd_update(const cx_optim_config *c, const cx_optim_slot *p, float lr);
/* t: the step being taken, from 1 */
void cx_optim_adamw_update(const cx_optim_config *c, const cx_optim_slot *p, float lr, int64_t t);
void cx_optim_lamb_update(const cx_optim_config *c, const cx_optim_slot *p, float lr, int64_t t);

#endif
