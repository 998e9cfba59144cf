#include "diagnose.h"

#include <math.h>
#include <stdio.h>

/* Healthy ResNets keep the depth ratio within 0.3 to 3 (measured on ResNet-20). */
static const double EXPLODE_GROWTH = 100, DEPTH_RATIO = 1e3, VANISH_NORM = 1e-8,
                    STALL_IMPROVEMENT = 0.99;

/* Geometric mean of |g|/|w| over layers [lo, hi) that have weights; 0 when none has. */
static double relative_gm(const cx_layer_norm *l, int lo, int hi) {
  double sum = 0;
  int n = 0;
  for (int i = lo; i < hi; i++)
    if (l[i].weight > 0 && l[i].grad > 0) sum += log(l[i].grad / l[i].weight), n++;
  return n ? exp(sum / n) : 0;
}

static const char *warn(cx_diag *d, cx_diag_kind k) {
  d->warned[k] = true;
  return d->msg;
}

/* The first quarter of the layers' |g|/|w| over the last quarter's (geometric means); 0 when
 * there are too few layers or weights. */
static double depth_ratio(const cx_layer_norm *l, int n, int *q) {
  *q = n / 4;
  if (*q < 1) return 0;
  double first = relative_gm(l, 0, *q), last = relative_gm(l, n - *q, n);
  return first > 0 && last > 0 ? first / last : 0;
}

static const char *check_exploding(cx_diag *d, int64_t step, double norm, const cx_layer_norm *l,
                                   int n) {
  int q;
  double ratio = depth_ratio(l, n, &q);
  bool grew = d->n_logged > 0 && norm > EXPLODE_GROWTH * d->min_norm;
  bool deep = ratio > DEPTH_RATIO;
  if (!grew && !deep) return NULL;
  int at = snprintf(d->msg, sizeof d->msg, "exploding gradients at step %lld: ", (long long)step);
  if (grew)
    at += snprintf(d->msg + at, sizeof d->msg - (size_t)at, "the global gradient norm is %.3g, "
                   "%.0fx the smallest logged (%.3g at step %lld)%s", norm, norm / d->min_norm,
                   d->min_norm, (long long)d->min_norm_step, deep ? "; " : "");
  if (deep)
    at += snprintf(d->msg + at, sizeof d->msg - (size_t)at, "relative to their weights, the "
                   "first %d layers ('%s'...) get %.3gx the gradient of the last %d ('%s'...)",
                   q, l[0].name, ratio, q, l[n - q].name);
  snprintf(d->msg + at, sizeof d->msg - (size_t)at, ". Likely causes: a learning rate too high "
           "(lower lr, or set warmup_steps), no gradient clipping (clip_norm), missing "
           "normalisation layers, or an initialisation too large");
  return warn(d, CX_DIAG_EXPLODING);
}

static const char *check_vanishing(cx_diag *d, int64_t step, double norm, const cx_layer_norm *l,
                                   int n) {
  if (norm > 0 && norm < VANISH_NORM) {
    snprintf(d->msg, sizeof d->msg, "vanishing gradients at step %lld: the global gradient norm "
             "is %.3g. Likely causes: saturated activations (sigmoid, tanh), dead ReLUs after a "
             "learning rate too high, or an initialisation too small", (long long)step, norm);
    return warn(d, CX_DIAG_VANISHING);
  }
  int q;
  double ratio = depth_ratio(l, n, &q);
  if (ratio <= 0 || ratio >= 1 / DEPTH_RATIO) return NULL;
  snprintf(d->msg, sizeof d->msg, "vanishing gradients at step %lld: relative to their weights, "
           "the first %d layers ('%s'...) get %.2g of the gradient of the last %d ('%s'...). "
           "Likely causes: missing normalisation (BatchNorm), saturating activations (sigmoid, "
           "tanh), a deep network without residual connections, or an initialisation too small",
           (long long)step, q, l[0].name, ratio, q, l[n - q].name);
  return warn(d, CX_DIAG_VANISHING);
}

const char *cx_diag_gradients(cx_diag *d, int64_t step, double global_norm,
                              const cx_layer_norm *layers, int n) {
  const char *m = NULL;
  if (isfinite(global_norm)) {
    if (!d->warned[CX_DIAG_EXPLODING]) m = check_exploding(d, step, global_norm, layers, n);
    if (!m && !d->warned[CX_DIAG_VANISHING]) m = check_vanishing(d, step, global_norm, layers, n);
    if (d->n_logged == 0 || global_norm < d->min_norm) {
      d->min_norm = global_norm;
      d->min_norm_step = step;
    }
    d->n_logged++;
  }
  return m;
}

const char *cx_diag_loss(cx_diag *d, int64_t step, double loss) {
  if (!isfinite(loss)) return NULL;
  if (d->best_step == 0 || loss < STALL_IMPROVEMENT * d->best_loss) {
    if (d->best_step == 0 || loss < d->best_loss) d->best_loss = loss, d->best_step = step;
    d->since_best = 0;
    return NULL;
  }
  if (loss < d->best_loss) d->best_loss = loss, d->best_step = step;
  int window = d->stall_logs > 0 ? d->stall_logs : 10;
  if (++d->since_best < window || d->warned[CX_DIAG_STALLED]) return NULL;
  int at = snprintf(d->msg, sizeof d->msg, "the loss has stalled: %d logged steps without "
                    "improving by 1%% on its best (%.4g at step %lld; %.4g at step %lld). Likely "
                    "causes: a learning rate too high or too low", window, d->best_loss,
                    (long long)d->best_step, loss, (long long)step);
  double uniform = d->classes > 1 ? log((double)d->classes) : 0;
  if (uniform > 0 && fabs(loss - uniform) < 0.05 * uniform)
    snprintf(d->msg + at, sizeof d->msg - (size_t)at, "; the loss is near ln(%lld) = %.3f, "
             "the loss of predicting every class equally: labels that do not match the images, "
             "inputs that are not normalised, or dead ReLUs", (long long)d->classes, uniform);
  return warn(d, CX_DIAG_STALLED);
}
