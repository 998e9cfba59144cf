/* Observers: running min/max and a histogram of |x| on the host, and the calibrators that turn
 * them into a clipping range. The histogram calibrators search a threshold T over bin edges:
 * percentile (the bin where the cumulative count reaches p%), MSE (the fake-quantized bin
 * centres' squared error, clipping included) and entropy (TensorRT's: KL divergence between
 * the clipped histogram and its 128-level quantization, 256 for UINT8), as NVIDIA's
 * pytorch-quantization computes them. Weights never come here: their scale is max |w| per channel. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quantize.h"

#define ENTROPY_LEVELS 256 /* the most quantized bins: 2^8 unsigned, 2^(8-1) signed */
#define FIRST_BIN 128      /* the smallest threshold searched: 128 of the 2048 bins */

struct cx_quant_observer {
  cx_quant_calibrator c;
  int64_t n;
  float min, max;
  double range;   /* the histogram's upper edge; 0 until a non-zero value came */
  double zeros;   /* values seen while range was 0: they belong to bin 0 */
  double *hist;   /* CX_QUANT_BINS counts (histogram calibrators only) */
};

static cx_status nomem(void) { return cx_fail(CX_ERR_NOMEM, "out of memory"); }

static bool uses_hist(cx_quant_calibrator c) { return c != CX_CALIB_MINMAX; }

cx_status cx_quant_observer_new(cx_quant_calibrator c, cx_quant_observer **out) {
  *out = NULL;
  if (c < CX_CALIB_MINMAX || c > CX_CALIB_ENTROPY)
    return cx_fail(CX_ERR_ARG, "quantize: unknown calibrator %d", (int)c);
  cx_quant_observer *o = calloc(1, sizeof *o);
  if (!o) return nomem();
  o->c = c;
  if (uses_hist(c) && !(o->hist = calloc(CX_QUANT_BINS, sizeof *o->hist))) return free(o), nomem();
  *out = o;
  return CX_OK;
}

void cx_quant_observer_free(cx_quant_observer *o) {
  if (!o) return;
  free(o->hist);
  free(o);
}

/* Doubles the range until it holds amax; each doubling merges bin pairs, so counts stay exact. */
static void grow(cx_quant_observer *o, double amax) {
  if (o->range == 0) {
    o->range = amax;
    o->hist[0] += o->zeros;
    o->zeros = 0;
    return;
  }
  while (o->range < amax) {
    for (int j = 0; j < CX_QUANT_BINS / 2; j++) o->hist[j] = o->hist[2 * j] + o->hist[2 * j + 1];
    memset(o->hist + CX_QUANT_BINS / 2, 0, sizeof *o->hist * (CX_QUANT_BINS / 2));
    o->range *= 2;
  }
}

static void add_hist(cx_quant_observer *o, const float *x, int64_t n, double amax) {
  if (amax > o->range) grow(o, amax);
  if (o->range == 0) {
    o->zeros += (double)n;
    return;
  }
  double per = CX_QUANT_BINS / o->range;
  for (int64_t i = 0; i < n; i++) {
    int64_t j = (int64_t)(fabs((double)x[i]) * per);
    o->hist[j < CX_QUANT_BINS ? j : CX_QUANT_BINS - 1] += 1;
  }
}

cx_status cx_quant_observer_add(cx_quant_observer *o, const float *x, int64_t n,
                                const char *what) {
  float lo = o->n ? o->min : FLT_MAX, hi = o->n ? o->max : -FLT_MAX;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(x[i]))
      return cx_fail(CX_ERR_ARG, "quantize: %s has a non-finite value (%g) at element %lld of "
                     "a calibration batch", what, (double)x[i], (long long)i);
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  if (n <= 0) return CX_OK;
  o->min = lo, o->max = hi;
  o->n += n;
  if (o->hist) add_hist(o, x, n, fmax(fabs((double)lo), fabs((double)hi)));
  return CX_OK;
}

/* ---- thresholds over the histogram: the index i of the upper edge, T = i * width ---- */

static double total(const double *h, int n) {
  double s = 0;
  for (int j = 0; j < n; j++) s += h[j];
  return s;
}

static int percentile_edge(const double *h, double p) {
  double target = total(h, CX_QUANT_BINS) * p / 100, cum = 0;
  for (int j = 0; j < CX_QUANT_BINS; j++)
    if ((cum += h[j]) >= target) return j + 1;
  return CX_QUANT_BINS;
}

/* Squared error of every bin centre fake-quantized on `levels` steps up to edge i. */
static double mse_at(const double *h, int i, int levels) {
  double step = (double)i / levels, err = 0; /* in bins */
  for (int j = 0; j < CX_QUANT_BINS; j++) {
    if (h[j] == 0) continue;
    double c = j + 0.5, q = fmin(nearbyint(c / step) * step, (double)i);
    err += h[j] * (c - q) * (c - q);
  }
  return err;
}

static int mse_edge(const double *h, int levels) {
  int best = CX_QUANT_BINS;
  double best_err = INFINITY;
  for (int i = FIRST_BIN; i <= CX_QUANT_BINS; i++) {
    double e = mse_at(h, i, levels);
    if (e < best_err) best_err = e, best = i;
  }
  return best;
}

/* KL(P || Q) for edge i: P is h[0, i) with everything above added to its last bin; Q spreads
 * each of `levels` groups of h[0, i) evenly over the group's non-empty bins (no outlier mass:
 * clipping costs Q there). Both normalised; a bin where P > 0 = Q is infinite. */
static double kl_at(const double *h, int i, int levels, double *q) {
  double group_sum[ENTROPY_LEVELS] = {0}, group_nonzero[ENTROPY_LEVELS] = {0};
  for (int j = 0; j < i; j++) {
    int g = (int)((int64_t)j * levels / i);
    if (h[j] != 0) group_sum[g] += h[j], group_nonzero[g] += 1;
  }
  double q_total = 0, outliers = total(h + i, CX_QUANT_BINS - i), p_total = total(h, i) + outliers;
  for (int j = 0; j < i; j++) {
    int g = (int)((int64_t)j * levels / i);
    q[j] = h[j] != 0 ? group_sum[g] / group_nonzero[g] : 0;
    q_total += q[j];
  }
  double kl = 0;
  for (int j = 0; j < i; j++) {
    double p = (h[j] + (j == i - 1 ? outliers : 0)) / p_total;
    if (p == 0) continue;
    if (q[j] == 0) return INFINITY;
    kl += p * log(p / (q[j] / q_total));
  }
  return kl;
}

/* levels: 128 for a signed grid (one side of it), 256 for UINT8. The zero bin counts as much
 * as the next one, as in pytorch-quantization: after a ReLU it holds most values, and a spike
 * there would otherwise drive the search to the smallest threshold. */
static int entropy_edge(const double *hist, int levels) {
  double h[CX_QUANT_BINS], q[CX_QUANT_BINS];
  memcpy(h, hist, sizeof h);
  h[0] = h[1];
  int best = CX_QUANT_BINS;
  double best_kl = INFINITY;
  for (int i = FIRST_BIN; i <= CX_QUANT_BINS; i++) {
    double kl = kl_at(h, i, levels, q);
    if (kl < best_kl) best_kl = kl, best = i;
  }
  return best;
}

cx_status cx_quant_observer_range(const cx_quant_observer *o, const cx_quant_config *c,
                                  const char *what, float *lo, float *hi) {
  if (o->n == 0)
    return cx_fail(CX_ERR_ARG, "quantize: %s: nothing was observed (no calibration batch ran)",
                   what);
  *lo = fminf(o->min, 0), *hi = fmaxf(o->max, 0);
  if (!o->hist || o->range == 0) return CX_OK;
  int edge = CX_QUANT_BINS;
  int levels = c->activations == CX_QUANT_UINT8 ? 255 : 127;
  if (o->c == CX_CALIB_PERCENTILE) edge = percentile_edge(o->hist, c->percentile);
  else if (o->c == CX_CALIB_MSE) edge = mse_edge(o->hist, levels);
  else edge = entropy_edge(o->hist, c->activations == CX_QUANT_UINT8 ? 256 : 128);
  float t = (float)(o->range * edge / CX_QUANT_BINS);
  *lo = fmaxf(*lo, -t), *hi = fminf(*hi, t);
  return CX_OK;
}

bool cx_quant_scale(float lo, float hi, int64_t qmin, int64_t qmax, float *scale, float *zero) {
  lo = fminf(lo, 0), hi = fmaxf(hi, 0);
  double s;
  if (qmin < 0) s = fmax(-(double)lo, (double)hi) / (double)qmax;
  else s = ((double)hi - lo) / (double)(qmax - qmin);
  *zero = 0;
  if (!(s >= FLT_MIN) || !isfinite(s)) {
    *scale = 1;
    return false;
  }
  *scale = (float)s;
  if (qmin >= 0) {
    double z = (double)qmin - nearbyint(lo / s);
    *zero = (float)fmin(fmax(z, (double)qmin), (double)qmax);
  }
  return true;
}
