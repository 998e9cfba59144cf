/* References for SoftmaxCrossEntropyLoss (ONNX, plus PyTorch's label_smoothing), KLDivTemperature
 * and their gradient ops, in double, written from the definitions:
 *   loss_i = -(1 - eps) w[y_i] log p_i[y_i] - eps / C sum_c w[c] log p_i[c]   (0 where ignored)
 *   mean = sum_i loss_i / sum_i w[y_i] over non-ignored i
 *   KD = T^2 / N sum_i sum_c q_i[c] (log q_i[c] - log p_i[c]),  p = softmax(s/T), q = softmax(t/T)
 * Labels arrive as doubles like every reference input. */

#include <math.h>
#include <string.h>

#include "../../core/op.h"
#include "ref.h"

typedef struct sce {
  int64_t N, C, inner;
  const double *x, *labels, *w;
  double eps;
  bool has_ignore;
  int64_t ignore;
  int mode; /* 0 none, 1 sum, 2 mean */
} sce;

static cx_status sce_init(sce *s, const cx_ref_args *a, int first) {
  const cx_shape *xs = &a->in[first].shape;
  const char *r = cx_node_string(a->node, "reduction", "mean");
  *s = (sce){.N = xs->d[0], .C = xs->d[1], .x = a->in[first].data,
             .labels = a->in[first + 1].data,
             .w = a->n_in > first + 2 ? a->in[first + 2].data : NULL,
             .eps = cx_node_float(a->node, "label_smoothing", 0),
             .has_ignore = cx_node_attr(a->node, "ignore_index") != NULL,
             .ignore = cx_node_int(a->node, "ignore_index", 0)};
  s->mode = strcmp(r, "none") == 0 ? 0 : strcmp(r, "sum") == 0 ? 1 : 2;
  s->inner = 1;
  for (int i = 2; i < xs->ndim; i++) s->inner *= xs->d[i];
  for (int64_t i = 0; i < s->N * s->inner; i++) {
    int64_t l = (int64_t)s->labels[i];
    if (!(s->has_ignore && l == s->ignore) && (l < 0 || l >= s->C))
      return cx_fail(CX_ERR_ARG, "node '%s': label %lld out of range [0, %lld)", a->node->name,
                     (long long)l, (long long)s->C);
  }
  return CX_OK;
}

static double weight(const sce *s, int64_t c) { return s->w ? s->w[c] : 1.0; }
static double score(const sce *s, int64_t n, int64_t c, int64_t j) {
  return s->x[(n * s->C + c) * s->inner + j];
}

/* log sum_c exp(x[c]) at position (n, j): log p[c] = x[c] - lse */
static double lse(const sce *s, int64_t n, int64_t j) {
  double m = -INFINITY, z = 0;
  for (int64_t k = 0; k < s->C; k++) m = fmax(m, score(s, n, k, j));
  for (int64_t k = 0; k < s->C; k++) z += exp(score(s, n, k, j) - m);
  return m + log(z);
}

/* the loss's divisor: 1 for sum and none, the summed label weights for mean */
static double divisor(const sce *s) {
  if (s->mode != 2) return 1;
  double d = 0;
  for (int64_t i = 0; i < s->N * s->inner; i++) {
    int64_t l = (int64_t)s->labels[i];
    if (!(s->has_ignore && l == s->ignore)) d += weight(s, l);
  }
  return d;
}

static cx_status ref_sce(const cx_ref_args *a) {
  sce s;
  CX_TRY(sce_init(&s, a, 0));
  double total = 0;
  for (int64_t n = 0; n < s.N; n++)
    for (int64_t j = 0; j < s.inner; j++) {
      int64_t l = (int64_t)s.labels[n * s.inner + j];
      double z = lse(&s, n, j), loss = 0;
      if (!(s.has_ignore && l == s.ignore)) {
        loss = -(1 - s.eps) * weight(&s, l) * (score(&s, n, l, j) - z);
        for (int64_t c = 0; c < s.C; c++)
          loss -= s.eps / (double)s.C * weight(&s, c) * (score(&s, n, c, j) - z);
      }
      if (s.mode == 0) a->out[0].data[n * s.inner + j] = loss;
      total += loss;
      for (int64_t c = 0; a->n_out > 1 && c < s.C; c++)
        a->out[1].data[(n * s.C + c) * s.inner + j] = score(&s, n, c, j) - z;
    }
  double d = divisor(&s);
  if (s.mode != 0) a->out[0].data[0] = d != 0 ? total / d : 0;
  return CX_OK;
}

/* d loss / d x[c] = (1 - eps) w[l] (p[c] - [c == l]) + eps / C sum_k w[k] (p[c] - [c == k]) */
static cx_status ref_sce_grad(const cx_ref_args *a) {
  sce s;
  CX_TRY(sce_init(&s, a, 1));
  double d = divisor(&s), wsum = 0;
  for (int64_t k = 0; k < s.C; k++) wsum += weight(&s, k);
  for (int64_t n = 0; n < s.N; n++)
    for (int64_t j = 0; j < s.inner; j++) {
      int64_t l = (int64_t)s.labels[n * s.inner + j];
      if (s.has_ignore && l == s.ignore) continue; /* output already zero */
      double g = (s.mode == 0 ? a->in[0].data[n * s.inner + j] : a->in[0].data[0]);
      g = d != 0 ? g / d : 0;
      double z = lse(&s, n, j);
      for (int64_t c = 0; c < s.C; c++) {
        double p = exp(score(&s, n, c, j) - z);
        double v = (1 - s.eps) * weight(&s, l) * (p - (c == l));
        v += s.eps / (double)s.C * (wsum * p - weight(&s, c)); /* the sum over k, expanded */
        a->out[0].data[(n * s.C + c) * s.inner + j] = g * v;
      }
    }
  return CX_OK;
}

/* log sum_c exp(x[c] / T) at position (n, j) of an [N, C, inner] tensor */
static double lse_t(const double *x, int64_t C, int64_t inner, int64_t n, int64_t j, double T) {
  double m = -INFINITY, z = 0;
  for (int64_t k = 0; k < C; k++) m = fmax(m, x[(n * C + k) * inner + j] / T);
  for (int64_t k = 0; k < C; k++) z += exp(x[(n * C + k) * inner + j] / T - m);
  return m + log(z);
}

static cx_status ref_kd_common(const cx_ref_args *a, int first, bool grad) {
  const cx_shape *xs = &a->in[first].shape;
  const double *s = a->in[first].data, *t = a->in[first + 1].data;
  double T = cx_node_float(a->node, "temperature", 1.0f), total = 0;
  int64_t N = xs->d[0], C = xs->d[1], inner = 1;
  for (int i = 2; i < xs->ndim; i++) inner *= xs->d[i];
  for (int64_t n = 0; n < N; n++)
    for (int64_t j = 0; j < inner; j++) {
      double zs = lse_t(s, C, inner, n, j, T), zt = lse_t(t, C, inner, n, j, T);
      for (int64_t c = 0; c < C; c++) {
        int64_t i = (n * C + c) * inner + j;
        double lq = t[i] / T - zt, lp = s[i] / T - zs;
        if (grad) /* d/ds = T^2 / N * (p - q) / T */
          a->out[0].data[i] = a->in[0].data[0] * T / (double)N * (exp(lp) - exp(lq));
        else
          total += exp(lq) * (lq - lp);
      }
    }
  if (!grad) a->out[0].data[0] = T * T * total / (double)N;
  return CX_OK;
}

static cx_status ref_kd(const cx_ref_args *a) { return ref_kd_common(a, 0, false); }
static cx_status ref_kd_grad(const cx_ref_args *a) { return ref_kd_common(a, 1, true); }

const cx_ref_entry cx_ref_loss[] = {
    {"SoftmaxCrossEntropyLoss", ref_sce},
    {"SoftmaxCrossEntropyLossGrad", ref_sce_grad},
    {"KLDivTemperature", ref_kd},
    {"KLDivTemperatureGrad", ref_kd_grad},
    {NULL, NULL},
};
