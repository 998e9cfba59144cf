#ifndef CX_SGD_H
#define CX_SGD_H

#include "../core/program.h"

/* SGD with momentum, Nesterov and weight decay (L2 added to the gradient, as PyTorch does)
 * weight decay, over every parameter of a training program. PyTorch's update:
 *   g = grad + wd * w;  v = momentum * v + g;  step = nesterov ? g + momentum * v : v;  w -= lr * step
 * The full optimizer set (AdamW, LAMB, schedules, clipping) arrives with the training engine. */

typedef struct cx_sgd {
  float lr, momentum, weight_decay;
  bool nesterov;
  int n;
  float **velocity; /* per parameter, zero at start */
} cx_sgd;

cx_status cx_sgd_init(cx_sgd *o, cx_program *p, float lr, float momentum, float weight_decay,
                      bool nesterov);
void cx_sgd_step(cx_sgd *o, cx_program *p);
void cx_sgd_free(cx_sgd *o);

#endif
