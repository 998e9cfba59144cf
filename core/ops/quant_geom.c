/* Channel geometry, integer ranges and scale checks of the quantization ops (quant.h). */

#include <math.h>

#include "../op.h"
#include "quant.h"

cx_status cx_quant_geometry(const cx_node *n, const cx_shape *x, const cx_shape *scale, bool nhwc,
                            cx_quant_geom *g) {
  int64_t numel = cx_shape_numel(x);
  *g = (cx_quant_geom){1, 1, numel};
  if (scale->ndim <= 1 && cx_shape_numel(scale) == 1) return CX_OK;
  int axis;
  CX_TRY(cx_axis_normalize(n, cx_node_int(n, "axis", 1), x->ndim, &axis));
  cx_shape s = *x;
  if (nhwc && x->ndim == 4) {
    static const int stored_pos[4] = {0, 3, 1, 2}; /* NCHW axis → its place in NHWC */
    s = (cx_shape){.ndim = 4, .d = {x->d[0], x->d[2], x->d[3], x->d[1]}};
    axis = stored_pos[axis];
  }
  g->outer = 1, g->inner = 1, g->channels = s.d[axis];
  for (int i = 0; i < axis; i++) g->outer *= s.d[i];
  for (int i = axis + 1; i < s.ndim; i++) g->inner *= s.d[i];
  return CX_OK;
}

bool cx_quant_dtype_range(cx_dtype t, int64_t *lo, int64_t *hi) {
  switch (t) {
  case CX_S8: *lo = -128, *hi = 127; return true;
  case CX_U8: *lo = 0, *hi = 255; return true;
  case CX_S32: *lo = INT32_MIN, *hi = INT32_MAX; return true;
  default: return false;
  }
}

cx_status cx_quant_check_scale(const cx_node *n, int64_t channel, double scale) {
  if (scale > 0 && isfinite(scale)) return CX_OK;
  return cx_fail(CX_ERR_ARG, "node '%s' (%s): scale[%lld] is %g; expected a positive finite "
                 "number (the quantized value is x / scale)", n->name, n->op->name,
                 (long long)channel, scale);
}

float cx_quant_lsq_grad_scale(const cx_shape *x, const cx_shape *scale, int64_t qmin,
                              int64_t qmax) {
  double per_scale = (double)cx_shape_numel(x) / (double)cx_shape_numel(scale);
  double qp = qmax > 0 ? (double)qmax : (double)(qmax - qmin);
  return (float)(1.0 / sqrt(per_scale * qp));
}
