#ifndef CX_CPU_OPTIM_IMPL_H
#define CX_CPU_OPTIM_IMPL_H

/* Inside the optimizer kernels (optim.c reads the node into these): the per-tensor update of
 * each kind, over plain float arrays. */

#include <stdbool.h>
#include <stdint.h>

/* Tensors below this many elements are updated (or scanned) by one thread: forking costs more. */
#define CX_OPTIM_PARALLEL_MIN 32768

/* The node's attributes. */
typedef struct cx_optim_hyper {
  float momentum;     /* SGD */
  bool nesterov;      /* SGD */
  float beta1, beta2, eps; /* AdamW, LAMB */
  bool always_adapt;  /* LAMB */
} cx_optim_hyper;

typedef struct cx_optim_slot {
  float *w;        /* parameter */
  const float *g;  /* its gradient */
  float *s[2];     /* its state: momentum buffer, or first and second moments */
  int64_t n;
  float wd;        /* weight decay for this tensor (0 for those without) */
} cx_optim_slot;

void cx_optim_sgd_update(const cx_optim_hyper *c, const cx_optim_slot *p, float lr);
/* t: the step being taken, from 1 */
void cx_optim_adamw_update(const cx_optim_hyper *c, const cx_optim_slot *p, float lr, int64_t t);
void cx_optim_lamb_update(const cx_optim_hyper *c, const cx_optim_slot *p, float lr, int64_t t);

#endif
