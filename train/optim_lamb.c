/* LAMB (You et al. 2019) as timm's Lamb and apex's FusedLAMB compute it, step t from 1:
 *   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
 *   u = (m / (1 - beta1^t)) / (sqrt(v) / sqrt(1 - beta2^t) + eps) + wd * w
 *   r = ||w|| / ||u||, or 1 when either norm is 0 (and 1 for tensors without weight decay
 *       unless always_adapt)
 *   w -= lr * r * u
 * The global gradient-norm clipping that timm and apex fold into LAMB is left to
 * cx_grad_clip_global_norm. u is computed twice (for its norm, then for the update) rather than
 * stored: recomputing is cheaper than another buffer the size of the parameter. */
#include <math.h>

#include "optim_impl.h"

typedef struct lamb_coef {
  float b1, b2, a1, a2, bc1, bc2_sqrt, eps, wd;
} lamb_coef;

static inline float direction(const lamb_coef *k, float m, float v, float w) {
  return (m / k->bc1) / (sqrtf(v) / k->bc2_sqrt + k->eps) + k->wd * w;
}

/* Updates the moments; returns ||w||^2 and ||u||^2 through the pointers. */
static void moments(const lamb_coef *k, const cx_optim_slot *p, double *w2, double *u2) {
  float *m = p->s[0], *v = p->s[1];
  const float *g = p->g, *w = p->w;
  const int64_t n = p->n;
  double sw = 0, su = 0;
#pragma omp parallel for simd reduction(+ : sw, su) if (n >= CX_OPTIM_PARALLEL_MIN)
  for (int64_t i = 0; i < n; i++) {
    m[i] = m[i] * k->b1 + k->a1 * g[i];
    v[i] = v[i] * k->b2 + k->a2 * g[i] * g[i];
    float u = direction(k, m[i], v[i], w[i]);
    sw += (double)w[i] * w[i];
    su += (double)u * u;
  }
  *w2 = sw;
  *u2 = su;
}

void cx_optim_lamb_update(const cx_optim_config *c, const cx_optim_slot *p, float lr, int64_t t) {
  const lamb_coef k = {.b1 = c->beta1, .b2 = c->beta2, .a1 = (float)(1.0 - c->beta1),
                       .a2 = (float)(1.0 - c->beta2),
                       .bc1 = (float)(1.0 - pow(c->beta1, (double)t)),
                       .bc2_sqrt = (float)sqrt(1.0 - pow(c->beta2, (double)t)),
                       .eps = c->eps, .wd = p->wd};
  double w2, u2;
  moments(&k, p, &w2, &u2);
  double ratio = 1;
  if ((p->wd != 0 || c->always_adapt) && w2 > 0 && u2 > 0) ratio = sqrt(w2) / sqrt(u2);
  const float step = (float)(lr * ratio);
  const float *m = p->s[0], *v = p->s[1];
  float *w = p->w;
  const int64_t n = p->n;
#pragma omp parallel for simd if (n >= CX_OPTIM_PARALLEL_MIN)
  for (int64_t i = 0; i < n; i++) w[i] -= step * direction(&k, m[i], v[i], w[i]);
}
