#include <math.h>
#include <stdlib.h>

#include "ref.h"

/* The INT8 runtime's ops (core/ops/qlinear.c) in plain integer arithmetic: the accumulator is
 * the Conv reference's sum over the int8 values (exact in double: every partial sum is an
 * integer far below 2^53), then scale, clamp, round half to even and saturate. */

static double requantize(const cx_node *n, double acc, double bias, int64_t c) {
  const float *sc;
  int ns = cx_node_floats(n, "scales", &sc);
  double v = (double)sc[ns == 1 ? 0 : c] * (acc + bias);
  double lo = cx_node_float(n, "act_min", -INFINITY), hi = cx_node_float(n, "act_max", INFINITY);
  v = v < lo ? lo : v > hi ? hi : v;
  if (!cx_node_int(n, "quantized_output", 1)) return v;
  v = nearbyint(v); /* the default rounding mode: half to even */
  return v < -128 ? -128 : v > 127 ? 127 : v;
}

/* Y [N, C, H, W]: channel c = (i / plane) % C. */
static cx_status ref_qconv(const cx_ref_args *a) {
  cx_ref_args conv = *a;
  conv.n_in = 2; /* the accumulator, without the bias */
  CX_TRY(cx_ref_find("Conv")(&conv));
  const cx_shape *ys = &a->out[0].shape;
  int64_t c_out = ys->d[1], plane = ys->d[2] * ys->d[3], n = cx_shape_numel(ys);
  const double *b = a->n_in > 2 ? a->in[2].data : NULL;
  for (int64_t i = 0; i < n; i++) {
    int64_t c = i / plane % c_out;
    a->out[0].data[i] = requantize(a->node, a->out[0].data[i], b ? b[c] : 0, c);
  }
  return CX_OK;
}

/* Y[m, j] = requantize(Σ_k X[m, k]·W[j, k] + B[j]). */
static cx_status ref_qgemm(const cx_ref_args *a) {
  int64_t m = a->in[0].shape.d[0], k = a->in[0].shape.d[1], nn = a->in[1].shape.d[0];
  const double *x = a->in[0].data, *w = a->in[1].data;
  const double *b = a->n_in > 2 ? a->in[2].data : NULL;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < nn; j++) {
      double acc = 0;
      for (int64_t t = 0; t < k; t++) acc += x[i * k + t] * w[j * k + t];
      a->out[0].data[i * nn + j] = requantize(a->node, acc, b ? b[j] : 0, j);
    }
  return CX_OK;
}

/* Y = saturate(round_half_even(clamp(A·a_scale + B·b_scale) / y_scale)). */
static cx_status ref_qadd(const cx_ref_args *a) {
  const cx_node *n = a->node;
  double sa = cx_node_float(n, "a_scale", 1), sb = cx_node_float(n, "b_scale", 1),
         sy = cx_node_float(n, "y_scale", 1);
  double lo = cx_node_float(n, "act_min", -INFINITY), hi = cx_node_float(n, "act_max", INFINITY);
  for (int64_t i = 0; i < cx_shape_numel(&a->out[0].shape); i++) {
    double v = a->in[0].data[i] * sa + a->in[1].data[i] * sb;
    v = nearbyint((v < lo ? lo : v > hi ? hi : v) / sy);
    a->out[0].data[i] = v < -128 ? -128 : v > 127 ? 127 : v;
  }
  return CX_OK;
}

const cx_ref_entry cx_ref_qlinear[] = {
    {"QLinearAddFused", ref_qadd},
    {"QLinearConvFused", ref_qconv},
    {"QLinearGemmFused", ref_qgemm},
    {NULL, NULL},
};
