#include "sgd.h"

#include <stdlib.h>

cx_status cx_sgd_init(cx_sgd *o, cx_program *p, float lr, float momentum, float weight_decay,
                      bool nesterov) {
  *o = (cx_sgd){.lr = lr, .momentum = momentum, .weight_decay = weight_decay,
                .nesterov = nesterov, .n = cx_program_param_count(p)};
  o->velocity = calloc((size_t)o->n + 1, sizeof(float *));
  if (!o->velocity) return cx_fail(CX_ERR_NOMEM, "out of memory for optimizer state");
  for (int k = 0; k < o->n; k++) {
    o->velocity[k] = calloc((size_t)cx_tensor_numel(cx_program_param(p, k)) + 1, sizeof(float));
    if (!o->velocity[k]) return cx_fail(CX_ERR_NOMEM, "out of memory for optimizer state");
  }
  return CX_OK;
}

void cx_sgd_step(cx_sgd *o, cx_program *p) {
  for (int k = 0; k < o->n; k++) {
    float *w = cx_program_param(p, k)->data, *v = o->velocity[k];
    const float *g = cx_program_param_grad(p, k)->data;
    int64_t n = cx_tensor_numel(cx_program_param(p, k));
    const float lr = o->lr, mu = o->momentum, wd = o->weight_decay;
    const bool nesterov = o->nesterov;
#pragma omp parallel for simd if (n > 32768)
    for (int64_t i = 0; i < n; i++) {
      float gi = g[i] + wd * w[i];
      v[i] = mu * v[i] + gi;
      w[i] -= lr * (nesterov ? gi + mu * v[i] : v[i]);
    }
  }
}

void cx_sgd_free(cx_sgd *o) {
  for (int k = 0; o->velocity && k < o->n; k++) free(o->velocity[k]);
  free(o->velocity);
  o->velocity = NULL;
}
