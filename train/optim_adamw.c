/* torch.optim.AdamW (amsgrad off), step t from 1:
 *   w *= 1 - lr * wd
 *   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
 *   w -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * in PyTorch's order of operations, so that fp32 results agree closely. */
#include <math.h>

#include "optim_impl.h"

void cx_optim_adamw_update(const cx_optim_config *c, const cx_optim_slot *p, float lr, int64_t t) {
  const float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
  const float decay = (float)(1.0 - (double)lr * p->wd);
  const float step_size = (float)(lr / (1.0 - pow(b1, (double)t)));
  const float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)t));
  const float a1 = (float)(1.0 - b1), a2 = (float)(1.0 - b2);
  float *w = p->w, *m = p->s[0], *v = p->s[1];
  const float *g = p->g;
  const int64_t n = p->n;
#pragma omp parallel for simd if (n >= CX_OPTIM_PARALLEL_MIN)
  for (int64_t i = 0; i < n; i++) {
    float wi = w[i] * decay;
    m[i] = m[i] * b1 + a1 * g[i];
    v[i] = v[i] * b2 + a2 * g[i] * g[i];
    w[i] = wi - step_size * (m[i] / (sqrtf(v[i]) / bc2_sqrt + eps));
  }
}
