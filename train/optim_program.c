#include "optim_program.h"

#include <stdlib.h>

static void gather(cx_program *p, cx_tensor **params, cx_tensor **grads, const char **names) {
  for (int k = 0; k < cx_program_param_count(p); k++) {
    if (params) params[k] = cx_program_param(p, k);
    if (grads) grads[k] = cx_program_param_grad(p, k);
    if (names) names[k] = cx_program_param_name(p, k);
  }
}

cx_status cx_optimizer_for_program(const cx_optim_config *c, cx_program *p, cx_optimizer **out) {
  int n = cx_program_param_count(p);
  cx_tensor **params = calloc((size_t)n + 1, sizeof *params);
  const char **names = calloc((size_t)n + 1, sizeof *names);
  if (!params || !names) {
    free(params);
    free(names);
    return cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  gather(p, params, NULL, names);
  cx_status s = cx_optimizer_create(c, cx_program_backend(p), cx_program_stream(p), n, params,
                                    names, out);
  free(params);
  free(names);
  return s;
}

cx_status cx_optimizer_step_program(cx_optimizer *o, cx_program *p, float lr) {
  int n = cx_program_param_count(p);
  cx_tensor **grads = calloc((size_t)n + 1, sizeof *grads);
  if (!grads) return cx_fail(CX_ERR_NOMEM, "out of memory");
  gather(p, NULL, grads, NULL);
  cx_status s = cx_optimizer_step(o, grads, lr);
  free(grads);
  return s;
}
