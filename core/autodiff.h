#ifndef CX_AUTODIFF_H
#define CX_AUTODIFF_H

#include "graph.h"

/* Appends backward nodes to g, whose first n_fwd nodes are the forward pass in schedule order.
 * The gradient of seed_values[k] is the value seed_grads[k]. On return param_grad[v] is the value
 * holding the gradient of parameter v (-1 for other values and for parameters nothing reaches);
 * param_grad has room for g->n_values as it was on entry. Internal to core/program.c. */
cx_status cx_autodiff(cx_graph *g, int n_fwd, const int *seed_values, const int *seed_grads,
                      int n_seeds, int *param_grad);

#endif
