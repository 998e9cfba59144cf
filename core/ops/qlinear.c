/* INT8 runtime ops (com.compress), made only by the inference compile pass core/quant_fuse.c from
 * a QDQ pattern; no file carries them.
 *
 *   QLinearConvFused(X, W[, B]) attrs: Conv's, scales, act_min, act_max, quantized_output,
 *                                      x_signed, frozen_weights
 *   QLinearGemmFused(X, W[, B]) attrs: scales, act_min, act_max, quantized_output, x_signed,
 *                                      frozen_weights
 *
 * X int8 (zero point 0; x_signed 0, the default, where the pass knows X >= 0, 1 where it may be
 * negative, which a backend may not run exactly: see quant_fuse.h; frozen_weights 1 where W never
 * changes after compile, so a kernel may keep it in its own layout), W int8
 * ([C_out, C_in/group, kh, kw] for Conv, [N, K] for Gemm: Y = X·Wᵀ), B f32 [C_out] already in
 * accumulator units (b / (x_scale·w_scale[c])). With acc the INT32 sum of X·W per output element
 * and c its output channel:
 *
 *   v = clamp(scales[c] · (acc + B[c]), act_min, act_max)
 *   Y = quantized_output ? saturate_int8(round_half_even(v)) : v (f32)
 *
 * scales (1 value, or C_out) is x_scale·w_scale[c]/y_scale when Y is requantized, else
 * x_scale·w_scale[c]; act_min/act_max (default ∓inf) are the fused Relu/Clip bounds in Y's units.
 * This is oneDNN's int8 convolution semantics (output scales applied to acc + bias, then the
 * eltwise post-op, then rounding and saturation), so the kernel is one primitive.
 *
 *   QLinearAddFused(A, B) attrs: a_scale, b_scale, y_scale, act_min, act_max
 *
 * A, B int8 of one shape (zero points 0), Y int8 of that shape: the residual Add of two
 * dequantized tensors, an optional Relu / Clip (bounds in real units) and the QuantizeLinear, in
 * the f32 arithmetic those ops use (so it equals them bit for bit):
 *   Y = saturate_int8(round_half_even(clamp(A·a_scale + B·b_scale, act_min, act_max) / y_scale)) */

#include <math.h>
#include <stddef.h>

#include "conv.h"
#include "families.h"

static cx_status need(const cx_infer_ctx *ctx, int i, cx_dtype want, const char *what) {
  if (ctx->in_dtype[i] == want) return CX_OK;
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): %s is %s; expected %s", ctx->node->name,
                 ctx->node->op->name, what, cx_dtype_name(ctx->in_dtype[i]), cx_dtype_name(want));
}

static bool has_bias(const cx_node *n) { return n->n_in > 2 && n->in[2] >= 0; }

/* Types, the bias shape, the scale count and the output type, shared by both ops. */
static cx_status check_common(const cx_infer_ctx *ctx, int64_t c_out) {
  const cx_node *n = ctx->node;
  const float *sc;
  char b[CX_SHAPE_STR];
  CX_TRY(need(ctx, 0, CX_S8, "X"));
  CX_TRY(need(ctx, 1, CX_S8, "W"));
  if (has_bias(n)) {
    CX_TRY(need(ctx, 2, CX_F32, "B"));
    const cx_shape *bs = &ctx->in_shape[2];
    if (bs->ndim != 1 || bs->d[0] != c_out)
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): B is %s, expected [%lld]", n->name,
                     n->op->name, cx_shape_str(bs, b), (long long)c_out);
  }
  int ns = cx_node_floats(n, "scales", &sc);
  if (ns != 1 && ns != c_out)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): %d scales; expected 1 or %lld (one per output "
                   "channel)", n->name, n->op->name, ns, (long long)c_out);
  for (int i = 0; i < ns; i++)
    if (!(sc[i] > 0) || !isfinite(sc[i]))
      return cx_fail(CX_ERR_ARG, "node '%s' (%s): scale %d is %g; expected a positive finite "
                     "number", n->name, n->op->name, i, (double)sc[i]);
  ctx->out_dtype[0] = cx_node_int(n, "quantized_output", 1) ? CX_S8 : CX_F32;
  return CX_OK;
}

static cx_status qconv_infer(const cx_infer_ctx *ctx) {
  cx_conv_geom g;
  CX_TRY(cx_conv_geom_make(ctx->node, &ctx->in_shape[0], &ctx->in_shape[1], &g));
  CX_TRY(check_common(ctx, g.c_out));
  ctx->out_shape[0] = cx_shape_make(4, (int64_t[]){g.n, g.c_out, g.oh, g.ow});
  return CX_OK;
}

static cx_status qgemm_infer(const cx_infer_ctx *ctx) {
  const cx_shape *x = &ctx->in_shape[0], *w = &ctx->in_shape[1];
  char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
  if (x->ndim != 2 || w->ndim != 2 || x->d[1] != w->d[1])
    return cx_fail(CX_ERR_SHAPE, "node '%s' (QLinearGemmFused): X %s and W %s; expected [M, K] "
                   "and [N, K]", ctx->node->name, cx_shape_str(x, a), cx_shape_str(w, b));
  CX_TRY(check_common(ctx, w->d[0]));
  ctx->out_shape[0] = cx_shape_make(2, (int64_t[]){x->d[0], w->d[0]});
  return CX_OK;
}

static cx_status qadd_infer(const cx_infer_ctx *ctx) {
  const cx_node *n = ctx->node;
  char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
  CX_TRY(need(ctx, 0, CX_S8, "A"));
  CX_TRY(need(ctx, 1, CX_S8, "B"));
  if (!cx_shape_equal(&ctx->in_shape[0], &ctx->in_shape[1]))
    return cx_fail(CX_ERR_SHAPE, "node '%s' (QLinearAddFused): A %s and B %s; expected one shape",
                   n->name, cx_shape_str(&ctx->in_shape[0], a), cx_shape_str(&ctx->in_shape[1], b));
  const char *names[3] = {"a_scale", "b_scale", "y_scale"};
  for (int i = 0; i < 3; i++) {
    float v = cx_node_float(n, names[i], 0);
    if (!(v > 0) || !isfinite(v))
      return cx_fail(CX_ERR_ARG, "node '%s' (QLinearAddFused): %s is %g; expected a positive "
                     "finite number", n->name, names[i], (double)v);
  }
  ctx->out_shape[0] = ctx->in_shape[0];
  ctx->out_dtype[0] = CX_S8;
  return CX_OK;
}

#define QUANT_ATTRS                                                                                \
  {"scales", CX_ATTR_FLOATS, true}, {"act_min", CX_ATTR_FLOAT, false},                             \
      {"act_max", CX_ATTR_FLOAT, false}, {"quantized_output", CX_ATTR_INT, false},               \
      {"x_signed", CX_ATTR_INT, false}, {"frozen_weights", CX_ATTR_INT, false}

static const cx_attr_schema qconv_attrs[] = {
    {"auto_pad", CX_ATTR_STRING, false}, {"dilations", CX_ATTR_INTS, false},
    {"group", CX_ATTR_INT, false},       {"kernel_shape", CX_ATTR_INTS, false},
    {"pads", CX_ATTR_INTS, false},       {"strides", CX_ATTR_INTS, false},
    QUANT_ATTRS,                         {NULL, 0, false},
};
static const cx_attr_schema qgemm_attrs[] = {QUANT_ATTRS, {NULL, 0, false}};

static const cx_attr_schema qadd_attrs[] = {
    {"a_scale", CX_ATTR_FLOAT, true}, {"b_scale", CX_ATTR_FLOAT, true},
    {"y_scale", CX_ATTR_FLOAT, true}, {"act_min", CX_ATTR_FLOAT, false},
    {"act_max", CX_ATTR_FLOAT, false}, {NULL, 0, false}};

static const cx_op_def op_qadd = {"QLinearAddFused", CX_DOMAIN_COMPRESS, 2, 2, 1, 1, qadd_attrs,
                                  qadd_infer, NULL, NULL, CX_OP_NO_GRAD};
static const cx_op_def op_qconv = {"QLinearConvFused", CX_DOMAIN_COMPRESS, 2, 3, 1, 1,
                                   qconv_attrs, qconv_infer, NULL, NULL, CX_OP_NO_GRAD};
static const cx_op_def op_qgemm = {"QLinearGemmFused", CX_DOMAIN_COMPRESS, 2, 3, 1, 1,
                                   qgemm_attrs, qgemm_infer, NULL, NULL, CX_OP_NO_GRAD};

const cx_op_def *const cx_ops_qlinear[] = {&op_qconv, &op_qgemm, &op_qadd, NULL};
