/* torch.optim.SGD with dampening 0:
 *   g = grad + wd * w;  buf = momentum * buf + g;  d = nesterov ? g + momentum * buf : buf;
 *   w -= lr * d
 * PyTorch starts the buffer as a copy of the first g; a zero buffer gives the same numbers. */
#include "optim_impl.h"

static void plain(float *w, const float *g, int64_t n, float lr, float wd) {
#pragma omp parallel for simd if (n >= CX_OPTIM_PARALLEL_MIN)
  for (int64_t i = 0; i < n; i++) w[i] -= lr * (g[i] + wd * w[i]);
}

static void momentum(float *w, const float *g, float *buf, int64_t n, float lr, float wd,
                     float mu) {
#pragma omp parallel for simd if (n >= CX_OPTIM_PARALLEL_MIN)
  for (int64_t i = 0; i < n; i++) {
    float d = g[i] + wd * w[i];
    buf[i] = mu * buf[i] + d;
    w[i] -= lr * buf[i];
  }
}

static void nesterov(float *w, const float *g, float *buf, int64_t n, float lr, float wd,
                     float mu) {
#pragma omp parallel for simd if (n >= CX_OPTIM_PARALLEL_MIN)
  for (int64_t i = 0; i < n; i++) {
    float d = g[i] + wd * w[i];
    buf[i] = mu * buf[i] + d;
    w[i] -= lr * (d + mu * buf[i]);
  }
}

void cx_optim_sgd_update(const cx_optim_hyper *c, const cx_optim_slot *p, float lr) {
  if (c->momentum == 0) plain(p->w, p->g, p->n, lr, p->wd);
  else if (c->nesterov) nesterov(p->w, p->g, p->s[0], p->n, lr, p->wd, c->momentum);
  else momentum(p->w, p->g, p->s[0], p->n, lr, p->wd, c->momentum);
}
