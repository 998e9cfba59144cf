/* References for the activations and ActivationGrad, in double, from the ONNX definitions. */

#include <math.h>

#include "../../core/ops/activation.h"
#include "ref.h"

typedef struct act_par {
  cx_act op;
  double alpha, beta, lo, hi;
} act_par;

/* Clip's bounds come from inputs lo_in and lo_in + 1 when present. */
static act_par params(const cx_ref_args *a, int lo_in) {
  act_par p = {.op = (cx_act)cx_act_of_node(a->node)};
  float alpha, beta, lo, hi, lo_v = 0, hi_v = 0;
  bool has_lo = a->n_in > lo_in && a->in[lo_in].data;
  bool has_hi = a->n_in > lo_in + 1 && a->in[lo_in + 1].data;
  if (has_lo) lo_v = (float)a->in[lo_in].data[0];
  if (has_hi) hi_v = (float)a->in[lo_in + 1].data[0];
  cx_act_params(a->node, p.op, &alpha, &beta);
  cx_act_clip_bounds(a->node, has_lo ? &lo_v : NULL, has_hi ? &hi_v : NULL, &lo, &hi);
  p.alpha = alpha, p.beta = beta, p.lo = lo, p.hi = hi;
  return p;
}

static const double PI = 3.14159265358979323846;

/* Gelu from its definition: x * Phi(x), or the tanh approximation (alpha 1) */
static double gelu(double alpha, double x) {
  if (alpha == 0) return 0.5 * x * (1 + erf(x / sqrt(2)));
  return 0.5 * x * (1 + tanh(sqrt(2 / PI) * (x + 0.044715 * x * x * x)));
}

static double gelu_derivative(double alpha, double x) {
  if (alpha == 0) return 0.5 * (1 + erf(x / sqrt(2))) + x * exp(-x * x / 2) / sqrt(2 * PI);
  double k = sqrt(2 / PI), t = tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

static double forward(const act_par *p, double x) {
  switch (p->op) {
  case CX_ACT_RELU: return x > 0 ? x : 0;
  case CX_ACT_LEAKY_RELU: return x >= 0 ? x : p->alpha * x;
  case CX_ACT_CLIP: return fmin(fmax(x, p->lo), p->hi);
  case CX_ACT_SIGMOID: return 1 / (1 + exp(-x));
  case CX_ACT_HARD_SIGMOID: return fmax(0, fmin(1, p->alpha * x + p->beta));
  case CX_ACT_HARD_SWISH: return x * fmax(0, fmin(1, x / 6 + 0.5));
  case CX_ACT_TANH: return tanh(x);
  case CX_ACT_EXP: return exp(x);
  case CX_ACT_LOG: return log(x);
  case CX_ACT_SQRT: return sqrt(x);
  case CX_ACT_ERF: return erf(x);
  case CX_ACT_GELU: return gelu(p->alpha, x);
  case CX_ACT_RECIPROCAL: return 1 / x;
  case CX_ACT_COUNT: break;
  }
  return x;
}

/* dX from dY, the forward input x and output y */
static double derivative(const act_par *p, double dy, double x, double y) {
  switch (p->op) {
  case CX_ACT_RELU: return y > 0 ? dy : 0;
  case CX_ACT_LEAKY_RELU: return x > 0 ? dy : p->alpha * dy;
  case CX_ACT_CLIP: return x > p->lo && x < p->hi ? dy : 0;
  case CX_ACT_SIGMOID: return dy * y * (1 - y);
  case CX_ACT_HARD_SIGMOID: {
    double v = p->alpha * x + p->beta;
    return v > 0 && v < 1 ? p->alpha * dy : 0;
  }
  case CX_ACT_HARD_SWISH: return x < -3 ? 0 : x > 3 ? dy : dy * (2 * x / 6 + 0.5);
  case CX_ACT_TANH: return dy * (1 - y * y);
  case CX_ACT_EXP: return dy * y;
  case CX_ACT_LOG: return dy / x;
  case CX_ACT_SQRT: return dy / (2 * y);
  case CX_ACT_ERF: return dy * 2 / sqrt(PI) * exp(-x * x);
  case CX_ACT_GELU: return dy * gelu_derivative(p->alpha, x);
  case CX_ACT_RECIPROCAL: return -dy * y * y;
  case CX_ACT_COUNT: break;
  }
  return dy;
}

static cx_status ref_act(const cx_ref_args *a) {
  act_par p = params(a, 1);
  for (int64_t i = 0; i < cx_shape_numel(&a->out[0].shape); i++)
    a->out[0].data[i] = forward(&p, a->in[0].data[i]);
  return CX_OK;
}

/* ActivationGrad(dY, X, Y[, min, max]); X or Y may be omitted when the derivative does not read it
 */
static cx_status ref_act_grad(const cx_ref_args *a) {
  act_par p = params(a, 3);
  if ((int)p.op < 0)
    return cx_fail(CX_ERR_ARG, "node '%s' (ActivationGrad): unknown activation", a->node->name);
  const double *x = a->in[1].data, *y = a->in[2].data;
  for (int64_t i = 0; i < cx_shape_numel(&a->out[0].shape); i++)
    a->out[0].data[i] = derivative(&p, a->in[0].data[i], x ? x[i] : 0, y ? y[i] : 0);
  return CX_OK;
}

const cx_ref_entry cx_ref_activation[] = {
    {"Relu", ref_act},        {"LeakyRelu", ref_act}, {"Clip", ref_act},
    {"Sigmoid", ref_act},     {"HardSigmoid", ref_act}, {"HardSwish", ref_act},
    {"Tanh", ref_act},        {"Exp", ref_act},       {"Log", ref_act},
    {"Sqrt", ref_act},        {"Erf", ref_act},       {"Gelu", ref_act},       {"Reciprocal", ref_act},
    {"ActivationGrad", ref_act_grad}, {NULL, NULL},
};
