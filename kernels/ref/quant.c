/* References for QuantizeLinear, DequantizeLinear (ONNX opset 13), FakeQuantize and
 * FakeQuantizeGrad (core/ops/quant.c), in double, element by element as the spec reads.
 *
 * x / scale is rounded to f32 before it is rounded to an integer: ONNX defines quantization on
 * f32 tensors and runtimes divide in f32, so a quotient that f32 rounds onto a .5 tie is a tie
 * here too (the double quotient of two floats, rounded to float, is exactly f32's quotient).
 * nearbyint rounds half to even in the default rounding mode. */

#include <math.h>

#include "../../core/ops/quant.h"
#include "ref.h"

static bool present(const cx_ref_args *a, int i) { return i < a->n_in && a->in[i].data; }

/* Channel c's value of input i (a scale or zero point); 0 when the input is absent. */
static double par(const cx_ref_args *a, int i, int64_t c) {
  if (!present(a, i)) return 0;
  return cx_shape_numel(&a->in[i].shape) == 1 ? a->in[i].data[0] : a->in[i].data[c];
}

static int64_t channel(const cx_quant_geom *g, int64_t i) { return i / g->inner % g->channels; }

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

static double quotient(double x, double s) { return (double)(float)(x / s); }

static cx_status check_scales(const cx_ref_args *a, int i) {
  for (int64_t c = 0; c < cx_shape_numel(&a->in[i].shape); c++)
    CX_TRY(cx_quant_check_scale(a->node, c, a->in[i].data[c]));
  return CX_OK;
}

/* QuantizeLinear(x, y_scale[, y_zero_point]) = saturate(round(x / y_scale) + y_zero_point).
 * A NaN x saturates to the top of the range, as the CPU kernel's fmin/fmax clamp does. */
static cx_status ref_quantize(const cx_ref_args *a) {
  cx_quant_geom g;
  int64_t lo, hi;
  CX_TRY(cx_quant_geometry(a->node, &a->in[0].shape, &a->in[1].shape, false, &g));
  CX_TRY(check_scales(a, 1));
  if (!cx_quant_dtype_range(a->out[0].dtype, &lo, &hi))
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (QuantizeLinear): output is %s",
                   a->node->name, cx_dtype_name(a->out[0].dtype));
  for (int64_t i = 0; i < cx_shape_numel(&a->in[0].shape); i++) {
    int64_t c = channel(&g, i);
    double v = nearbyint(quotient(a->in[0].data[i], par(a, 1, c))) + par(a, 2, c);
    a->out[0].data[i] = fmax(fmin(v, (double)hi), (double)lo);
  }
  return CX_OK;
}

/* DequantizeLinear(x, x_scale[, x_zero_point]) = (x - x_zero_point) * x_scale */
static cx_status ref_dequantize(const cx_ref_args *a) {
  cx_quant_geom g;
  CX_TRY(cx_quant_geometry(a->node, &a->in[0].shape, &a->in[1].shape, false, &g));
  for (int64_t i = 0; i < cx_shape_numel(&a->in[0].shape); i++) {
    int64_t c = channel(&g, i);
    a->out[0].data[i] = (a->in[0].data[i] - par(a, 2, c)) * par(a, 1, c);
  }
  return CX_OK;
}

/* Y = (clamp(round(X / s) + z, qmin, qmax) - z) * s */
static cx_status ref_fake_quantize(const cx_ref_args *a) {
  cx_quant_geom g;
  CX_TRY(cx_quant_geometry(a->node, &a->in[0].shape, &a->in[1].shape, false, &g));
  CX_TRY(check_scales(a, 1));
  double lo = (double)cx_node_int(a->node, "qmin", 0), hi = (double)cx_node_int(a->node, "qmax", 0);
  for (int64_t i = 0; i < cx_shape_numel(&a->in[0].shape); i++) {
    int64_t c = channel(&g, i);
    double s = par(a, 1, c), z = par(a, 2, c);
    double q = clampd(nearbyint(quotient(a->in[0].data[i], s)) + z, lo, hi);
    a->out[0].data[i] = (q - z) * s;
  }
  return CX_OK;
}

/* FakeQuantizeGrad(dY, X, scale[, zero_point]) → dX[, dScale]. With v = X / s and
 * q = round(v) + z: inside [qmin, qmax] dX = dY and dScale gets dY·(round(v) − v); below it
 * dScale gets dY·(qmin − z), above it dY·(qmax − z); dScale is summed per channel and scaled
 * by grad_scale. */
static cx_status ref_fake_quantize_grad(const cx_ref_args *a) {
  cx_quant_geom g;
  CX_TRY(cx_quant_geometry(a->node, &a->in[1].shape, &a->in[2].shape, false, &g));
  CX_TRY(check_scales(a, 2));
  double lo = (double)cx_node_int(a->node, "qmin", 0), hi = (double)cx_node_int(a->node, "qmax", 0);
  double gs = cx_node_float(a->node, "grad_scale", 1);
  const double *dy = a->in[0].data, *x = a->in[1].data;
  for (int64_t i = 0; i < cx_shape_numel(&a->in[1].shape); i++) {
    int64_t c = channel(&g, i);
    double s = par(a, 2, c), z = par(a, 3, c), v = quotient(x[i], s), r = nearbyint(v);
    double q = r + z;
    bool inside = q >= lo && q <= hi;
    a->out[0].data[i] = inside ? dy[i] : 0;
    if (a->n_out > 1)
      a->out[1].data[c] += gs * dy[i] * (inside ? r - v : q < lo ? lo - z : hi - z);
  }
  return CX_OK;
}

const cx_ref_entry cx_ref_quant[] = {
    {"QuantizeLinear", ref_quantize},
    {"DequantizeLinear", ref_dequantize},
    {"FakeQuantize", ref_fake_quantize},
    {"FakeQuantizeGrad", ref_fake_quantize_grad},
    {NULL, NULL},
};
