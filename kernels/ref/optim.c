/* References for the training-step ops (core/ops/optim.c), in double, written from the
 * formulas of docs/training.md. The update ops write their state inputs in place, as the
 * kernels do. lr = R, t = T (the step, from 1), wd = weight_decay:
 *   SGDUpdate     d = g + wd w;  m = mu m + d;  w -= lr (nesterov ? d + mu m : m)  (no m: lr d)
 *   AdamWUpdate   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *                 w = w (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 *   LAMBUpdate    u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd w
 *                 w -= lr r u,  r = |w| / |u| (1 when either is 0, or wd = 0 and not always_adapt)
 *   EMAUpdate     a = d a + (1 - d) x
 *   SquaredNorm   sum x^2;  AllFinite  1 when every x is finite */

#include <math.h>
#include <stdlib.h>

#include "../../core/op.h"
#include "ref.h"

static int64_t numel(const cx_ref_tensor *t) { return cx_shape_numel(&t->shape); }

static cx_status ref_sgd(const cx_ref_args *a) {
  const double lr = a->in[0].data[0], mu = cx_node_float(a->node, "momentum", 0);
  const double wd = cx_node_float(a->node, "weight_decay", 0);
  const bool nesterov = cx_node_int(a->node, "nesterov", 0) != 0;
  double *w = a->in[1].data, *m = a->n_in > 3 ? a->in[3].data : NULL;
  const double *g = a->in[2].data;
  for (int64_t i = 0; i < numel(&a->in[1]); i++) {
    double d = g[i] + wd * w[i];
    if (m) {
      m[i] = mu * m[i] + d;
      d = nesterov ? d + mu * m[i] : m[i];
    }
    w[i] -= lr * d;
  }
  return CX_OK;
}

typedef struct adam {
  double lr, b1, b2, eps, wd, t;
  double *w, *m, *v;
  const double *g;
  int64_t n;
} adam;

static adam adam_of(const cx_ref_args *a) {
  return (adam){.lr = a->in[0].data[0], .t = a->in[1].data[0],
                .b1 = cx_node_float(a->node, "beta1", 0.9f),
                .b2 = cx_node_float(a->node, "beta2", 0.999f),
                .eps = cx_node_float(a->node, "epsilon", 1e-8f),
                .wd = cx_node_float(a->node, "weight_decay", 0), .w = a->in[2].data,
                .g = a->in[3].data, .m = a->in[4].data, .v = a->in[5].data,
                .n = numel(&a->in[2])};
}

/* The moments' update and the bias-corrected Adam direction of element i. */
static double adam_dir(const adam *p, int64_t i) {
  p->m[i] = p->b1 * p->m[i] + (1 - p->b1) * p->g[i];
  p->v[i] = p->b2 * p->v[i] + (1 - p->b2) * p->g[i] * p->g[i];
  double mhat = p->m[i] / (1 - pow(p->b1, p->t)), vhat = p->v[i] / (1 - pow(p->b2, p->t));
  return mhat / (sqrt(vhat) + p->eps);
}

static cx_status ref_adamw(const cx_ref_args *a) {
  const adam p = adam_of(a);
  for (int64_t i = 0; i < p.n; i++) {
    double u = adam_dir(&p, i);
    p.w[i] = p.w[i] * (1 - p.lr * p.wd) - p.lr * u;
  }
  return CX_OK;
}

static cx_status ref_lamb(const cx_ref_args *a) {
  const adam p = adam_of(a);
  double *u = malloc(sizeof(double) * (size_t)(p.n + 1)), wn = 0, un = 0;
  if (!u) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int64_t i = 0; i < p.n; i++) {
    u[i] = adam_dir(&p, i) + p.wd * p.w[i];
    wn += p.w[i] * p.w[i];
    un += u[i] * u[i];
  }
  bool adapt = p.wd != 0 || cx_node_int(a->node, "always_adapt", 0) != 0;
  double r = adapt && wn > 0 && un > 0 ? sqrt(wn) / sqrt(un) : 1.0;
  for (int64_t i = 0; i < p.n; i++) p.w[i] -= p.lr * r * u[i];
  free(u);
  return CX_OK;
}

static cx_status ref_ema(const cx_ref_args *a) {
  const double d = a->in[0].data[0];
  double *avg = a->in[1].data;
  for (int64_t i = 0; i < numel(&a->in[1]); i++)
    avg[i] = d * avg[i] + (1 - d) * a->in[2].data[i];
  return CX_OK;
}

static cx_status ref_sq_norm(const cx_ref_args *a) {
  double s = 0;
  for (int64_t i = 0; i < numel(&a->in[0]); i++) s += a->in[0].data[i] * a->in[0].data[i];
  a->out[0].data[0] = s;
  return CX_OK;
}

static cx_status ref_finite(const cx_ref_args *a) {
  bool all = true;
  for (int64_t i = 0; i < numel(&a->in[0]); i++) all = all && isfinite(a->in[0].data[i]);
  a->out[0].data[0] = all;
  return CX_OK;
}

const cx_ref_entry cx_ref_optim[] = {
    {"SGDUpdate", ref_sgd},
    {"AdamWUpdate", ref_adamw},
    {"LAMBUpdate", ref_lamb},
    {"EMAUpdate", ref_ema},
    {"SquaredNorm", ref_sq_norm},
    {"AllFinite", ref_finite},
    {NULL, NULL},
};
