/* Quantization ops. ONNX's QuantizeLinear and DequantizeLinear (opset 13: per-tensor or per-axis
 * scale, an optional zero point whose type is the quantized type) as QDQ files carry them, and
 * our FakeQuantize, which is DequantizeLinear(QuantizeLinear(x)) in one f32 op with a gradient:
 *
 *   FakeQuantize(X, scale[, zero_point]) attrs axis (default 1), qmin, qmax
 *   Y = (clamp(round_half_even(X / scale) + zero_point, qmin, qmax) - zero_point) * scale
 *
 * scale (f32) and zero_point (f32 holding an integer, so that one kernel serves INT8 and UINT8
 * and a learned scale stays a float parameter) are scalars, or 1-D over X's dimension `axis`.
 * [qmin, qmax] is [-127, 127] for narrow-range INT8 weights, [-128, 127] for INT8 and [0, 255]
 * for UINT8 activations. QAT graphs carry FakeQuantize exactly where the exporter writes a
 * QuantizeLinear → DequantizeLinear pair, so what trains is what ships.
 *
 *   FakeQuantizeGrad(dY, X, scale[, zero_point]) → dX[, dScale]   same attributes, plus
 *   grad_scale (f32, default 1): the straight-through estimator, dX = dY where the rounded value
 *   lies inside [qmin, qmax], else 0; dScale (LSQ, Esser et al. 2020) is Σ dY·(round(X/s) − X/s)
 *   inside and Σ dY·(qmin − z) or (qmax − z) outside, summed to scale's shape and multiplied by
 *   grad_scale (LSQ's 1/sqrt(numel·qmax)).
 *
 * FakeQuantize's gradient rule emits one FakeQuantizeGrad: dX when X needs it, dScale (its second
 * output) only when the scale is trained, with grad_scale = 1/sqrt(numel(X)/numel(scale)·qmax)
 * (cx_quant_lsq_grad_scale); the zero point gets none. Scales are divided by, and shape
 * inference cannot see their values, so the kernels and references refuse a scale that is not a
 * positive finite number when they run (cx_quant_check_scale, core/ops/quant.h); the library
 * that computes scales keeps them above a tiny epsilon so that this never fires in practice.
 * DequantizeLinear only multiplies and takes any scale. */

#include <stddef.h>

#include "families.h"
#include "quant.h"

/* A quantization parameter (scale or zero point) for X: a scalar (numel 1, rank ≤ 1) or a 1-D
 * tensor of X's size along `axis`. *per_axis tells which. */
static cx_status check_param(const cx_infer_ctx *ctx, int x, int i, const char *what,
                             bool *per_axis) {
  const cx_node *n = ctx->node;
  const cx_shape *p = &ctx->in_shape[i], *xs = &ctx->in_shape[x];
  char s[CX_SHAPE_STR], t[CX_SHAPE_STR];
  *per_axis = false;
  if (p->ndim <= 1 && cx_shape_numel(p) == 1) return CX_OK;
  int axis;
  CX_TRY(cx_axis_normalize(n, cx_node_int(n, "axis", 1), xs->ndim, &axis));
  if (p->ndim == 1 && p->d[0] == xs->d[axis]) {
    *per_axis = true;
    return CX_OK;
  }
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): %s has shape %s; expected a scalar or [%lld] "
                 "(input %s along axis %d)", n->name, n->op->name, what, cx_shape_str(p, s),
                 (long long)xs->d[axis], cx_shape_str(xs, t), axis);
}

static cx_status need_dtype(const cx_infer_ctx *ctx, int i, cx_dtype want, const char *what) {
  if (ctx->in_dtype[i] == want) return CX_OK;
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): %s is %s; expected %s", ctx->node->name,
                 ctx->node->op->name, what, cx_dtype_name(ctx->in_dtype[i]), cx_dtype_name(want));
}

static bool has_input(const cx_node *n, int i) { return i < n->n_in && n->in[i] >= 0; }

/* scale (input 1) and the optional zero point (input 2) of X (input x_in): same form. */
static cx_status check_scale_zero(const cx_infer_ctx *ctx, int x_in, int first) {
  bool scale_axis, zero_axis;
  CX_TRY(need_dtype(ctx, first, CX_F32, "the scale"));
  CX_TRY(check_param(ctx, x_in, first, "the scale", &scale_axis));
  if (!has_input(ctx->node, first + 1)) return CX_OK;
  CX_TRY(check_param(ctx, x_in, first + 1, "the zero point", &zero_axis));
  if (scale_axis == zero_axis) return CX_OK;
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): the scale and the zero point must both be "
                 "scalars or both be per axis", ctx->node->name, ctx->node->op->name);
}

static cx_status infer_quantize(const cx_infer_ctx *ctx) {
  CX_TRY(need_dtype(ctx, 0, CX_F32, "input 0"));
  CX_TRY(check_scale_zero(ctx, 0, 1));
  cx_dtype q = has_input(ctx->node, 2) ? ctx->in_dtype[2] : CX_U8; /* ONNX's default */
  if (q != CX_S8 && q != CX_U8)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (QuantizeLinear): the zero point is %s; "
                   "expected int8 or uint8", ctx->node->name, cx_dtype_name(q));
  ctx->out_shape[0] = ctx->in_shape[0];
  ctx->out_dtype[0] = q;
  return CX_OK;
}

static cx_status infer_dequantize(const cx_infer_ctx *ctx) {
  cx_dtype q = ctx->in_dtype[0];
  if (q != CX_S8 && q != CX_U8 && q != CX_S32)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (DequantizeLinear): input 0 is %s; expected "
                   "int8, uint8 or int32", ctx->node->name, cx_dtype_name(q));
  CX_TRY(check_scale_zero(ctx, 0, 1));
  if (has_input(ctx->node, 2)) CX_TRY(need_dtype(ctx, 2, q, "the zero point"));
  ctx->out_shape[0] = ctx->in_shape[0];
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

static cx_status check_range(const cx_node *n) {
  int64_t lo = cx_node_int(n, "qmin", 0), hi = cx_node_int(n, "qmax", 0);
  if (lo < hi && lo >= -(1LL << 24) && hi <= (1LL << 24)) return CX_OK;
  return cx_fail(CX_ERR_ARG, "node '%s' (%s): qmin %lld, qmax %lld; expected qmin < qmax",
                 n->name, n->op->name, (long long)lo, (long long)hi);
}

static cx_status infer_fake_quantize(const cx_infer_ctx *ctx) {
  CX_TRY(check_range(ctx->node));
  CX_TRY(need_dtype(ctx, 0, CX_F32, "input 0"));
  CX_TRY(check_scale_zero(ctx, 0, 1));
  if (has_input(ctx->node, 2)) CX_TRY(need_dtype(ctx, 2, CX_F32, "the zero point"));
  ctx->out_shape[0] = ctx->in_shape[0];
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

/* FakeQuantizeGrad(dY, X, scale[, zero_point]) → dX[, dScale]. */
static cx_status infer_fake_quantize_grad(const cx_infer_ctx *ctx) {
  CX_TRY(check_range(ctx->node));
  CX_TRY(need_dtype(ctx, 0, CX_F32, "dY"));
  CX_TRY(need_dtype(ctx, 1, CX_F32, "X"));
  CX_TRY(check_scale_zero(ctx, 1, 2));
  if (has_input(ctx->node, 3)) CX_TRY(need_dtype(ctx, 3, CX_F32, "the zero point"));
  ctx->out_shape[0] = ctx->in_shape[1];
  ctx->out_dtype[0] = CX_F32;
  if (ctx->node->n_out > 1) {
    ctx->out_shape[1] = ctx->in_shape[2];
    ctx->out_dtype[1] = CX_F32;
  }
  return CX_OK;
}

/* One FakeQuantizeGrad node: dX (the straight-through estimator) when X needs it, and dScale
 * as its second output only when the scale is trained (LSQ), with LSQ's gradient scale. The
 * zero point gets no gradient: it is a fixed integer (zero for symmetric ranges). */
static cx_status grad_fake_quantize(const cx_grad_ctx *c) {
  const cx_node *n = &c->g->nodes[c->node];
  if (c->dy[0] < 0 || !(c->need[0] || c->need[1])) return CX_OK;
  int x = n->in[0], scale = n->in[1], zero = has_input(n, 2) ? n->in[2] : -1;
  int64_t qmin = cx_node_int(n, "qmin", 0), qmax = cx_node_int(n, "qmax", 0);
  float g = cx_quant_lsq_grad_scale(&c->shape[x], &c->shape[scale], qmin, qmax);
  int in[4] = {c->dy[0], x, scale, zero};
  int node = cx_grad_node(c, "FakeQuantizeGrad", in, zero >= 0 ? 4 : 3, c->need[1] ? 2 : 1);
  if (node < 0) return cx_graph_status(c->g);
  cx_grad_copy_attrs(c, node);
  cx_node_set_float(c->g, node, "grad_scale", g);
  if (c->need[0]) c->dx[0] = cx_node_output(c->g, node, 0);
  if (c->need[1]) c->dx[1] = cx_node_output(c->g, node, 1);
  return cx_graph_status(c->g);
}

static const cx_attr_schema qdq_attrs[] = {{"axis", CX_ATTR_INT, false}, {NULL, 0, false}};
static const cx_attr_schema fq_attrs[] = {
    {"axis", CX_ATTR_INT, false}, {"qmin", CX_ATTR_INT, true}, {"qmax", CX_ATTR_INT, true},
    {NULL, 0, false}};
static const cx_attr_schema fq_grad_attrs[] = {
    {"axis", CX_ATTR_INT, false}, {"qmin", CX_ATTR_INT, true}, {"qmax", CX_ATTR_INT, true},
    {"grad_scale", CX_ATTR_FLOAT, false}, {NULL, 0, false}};

static const cx_op_def op_quantize = {"QuantizeLinear", CX_DOMAIN_ONNX, 2, 3, 1, 1, qdq_attrs,
                                      infer_quantize, NULL, NULL, CX_OP_NO_GRAD};
static const cx_op_def op_dequantize = {"DequantizeLinear", CX_DOMAIN_ONNX, 2, 3, 1, 1,
                                        qdq_attrs, infer_dequantize, NULL, NULL, CX_OP_NO_GRAD};
static const cx_op_def op_fake_quantize = {"FakeQuantize", CX_DOMAIN_COMPRESS, 2, 3, 1, 1,
                                           fq_attrs, infer_fake_quantize, grad_fake_quantize,
                                           NULL, 0};
static const cx_op_def op_fake_quantize_grad = {"FakeQuantizeGrad", CX_DOMAIN_COMPRESS, 3, 4, 1,
                                                2, fq_grad_attrs, infer_fake_quantize_grad,
                                                NULL, NULL, 0};

const cx_op_def *const cx_ops_quant[] = {
    &op_quantize, &op_dequantize, &op_fake_quantize, &op_fake_quantize_grad, NULL,
};
