/* Inference fusions (com.compress), made only by the inference compile pass core/infer_fuse.c;
 * no file carries them.
 *
 *   ConvFused(X, W[, B][, S])  attrs: Conv's, activation, act_alpha, act_beta, act_min, act_max,
 *                              frozen_weights (1: W never changes after the first run, so a kernel
 *                              may keep it in its own layout; core/infer_fuse.h)
 *   GemmFused(A, B[, C])       attrs: Gemm's, the same activation attributes
 *   MatMulFused(A, B[, Bias])  attrs: the same activation attributes
 *
 * ConvFused: Y = act(Conv(X, W, B) + S), S (optional, input 3) of Y's shape: the residual Add's
 * other operand. GemmFused: Y = act(Gemm(A, B, C)). MatMulFused: Y = act(MatMul(A, B) + Bias),
 * B of rank 2, Bias [N] (Y's last dimension) added to every row: a Linear layer on a tensor of
 * rank 3 or 4, as exporters write it (MatMul, then Add of the bias). `activation` names the
 * ONNX activation op applied ("Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid",
 * "HardSwish", "Tanh", "Gelu": its erf form), or
 * "Swish" for x·sigmoid(x) (a Sigmoid and the Mul of its input by it); absent: none. Its
 * parameters are act_alpha / act_beta (LeakyRelu's alpha, HardSigmoid's alpha and beta, with
 * the ONNX defaults when absent) and act_min / act_max (Clip's bounds, default ∓inf). The CPU
 * kernels run each as one oneDNN primitive with sum and eltwise post-ops. */

#include <string.h>

#include "activation.h"
#include "families.h"

/* The activation attribute names one the kernels and references know. */
static cx_status check_activation(const cx_node *n) {
  const char *act = cx_node_string(n, "activation", NULL);
  if (!act || !strcmp(act, "Swish")) return CX_OK;
  int a = cx_act_find(act);
  if (a == CX_ACT_RELU || a == CX_ACT_LEAKY_RELU || a == CX_ACT_CLIP || a == CX_ACT_SIGMOID ||
      a == CX_ACT_HARD_SIGMOID || a == CX_ACT_HARD_SWISH || a == CX_ACT_TANH || a == CX_ACT_GELU)
    return CX_OK;
  return cx_fail(CX_ERR_ARG, "node '%s' (%s): activation '%s'; expected Relu, LeakyRelu, Clip, "
                 "Sigmoid, HardSigmoid, HardSwish, Tanh, Gelu or Swish", n->name, n->op->name,
                 cx_printable(act));
}

/* Conv's own shape inference, then S of Y's shape. */
static cx_status conv_fused_infer(const cx_infer_ctx *ctx) {
  const cx_node *n = ctx->node;
  CX_TRY(check_activation(n));
  CX_TRY(cx_op_find("Conv")->infer(ctx));
  if (n->n_in > 3 && n->in[3] >= 0 && !cx_shape_equal(&ctx->in_shape[3], &ctx->out_shape[0])) {
    char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
    return cx_fail(CX_ERR_SHAPE, "node '%s' (ConvFused): the summed input S is %s; expected the "
                   "output's shape %s", n->name, cx_shape_str(&ctx->in_shape[3], a),
                   cx_shape_str(&ctx->out_shape[0], b));
  }
  return CX_OK;
}

static cx_status gemm_fused_infer(const cx_infer_ctx *ctx) {
  CX_TRY(check_activation(ctx->node));
  return cx_op_find("Gemm")->infer(ctx);
}

/* MatMul's own shape inference (B of rank 2), then Bias as [N]. */
static cx_status matmul_fused_infer(const cx_infer_ctx *ctx) {
  const cx_node *n = ctx->node;
  CX_TRY(check_activation(n));
  CX_TRY(cx_op_find("MatMul")->infer(ctx));
  const cx_shape *y = &ctx->out_shape[0], *b = &ctx->in_shape[1];
  char a[CX_SHAPE_STR], c[CX_SHAPE_STR];
  if (b->ndim != 2)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (MatMulFused): B is %s; expected rank 2", n->name,
                   cx_shape_str(b, a));
  bool has_bias = n->n_in > 2 && n->in[2] >= 0;
  if (has_bias && (ctx->in_shape[2].ndim != 1 || ctx->in_shape[2].d[0] != y->d[y->ndim - 1]))
    return cx_fail(CX_ERR_SHAPE, "node '%s' (MatMulFused): Bias is %s; expected [%lld], the last "
                   "dimension of Y %s", n->name, cx_shape_str(&ctx->in_shape[2], a),
                   (long long)y->d[y->ndim - 1], cx_shape_str(y, c));
  return CX_OK;
}

#define ACT_ATTRS                                                                                  \
  {"activation", CX_ATTR_STRING, false}, {"act_alpha", CX_ATTR_FLOAT, false},                      \
      {"act_beta", CX_ATTR_FLOAT, false}, {"act_min", CX_ATTR_FLOAT, false},                       \
      {"act_max", CX_ATTR_FLOAT, false}

static const cx_attr_schema conv_fused_attrs[] = {
    {"auto_pad", CX_ATTR_STRING, false}, {"dilations", CX_ATTR_INTS, false},
    {"group", CX_ATTR_INT, false},       {"kernel_shape", CX_ATTR_INTS, false},
    {"pads", CX_ATTR_INTS, false},       {"strides", CX_ATTR_INTS, false},
    ACT_ATTRS,                           {"frozen_weights", CX_ATTR_INT, false},
    {NULL, 0, false},
};
static const cx_attr_schema gemm_fused_attrs[] = {
    {"alpha", CX_ATTR_FLOAT, false}, {"beta", CX_ATTR_FLOAT, false},
    {"transA", CX_ATTR_INT, false},  {"transB", CX_ATTR_INT, false},
    ACT_ATTRS,                       {NULL, 0, false},
};

static const cx_attr_schema matmul_fused_attrs[] = {ACT_ATTRS, {NULL, 0, false}};

/* No gradient rule: training programs never contain them. */
static const cx_op_def op_conv_fused = {"ConvFused", CX_DOMAIN_COMPRESS, 2, 4, 1, 1,
                                        conv_fused_attrs, conv_fused_infer, NULL, NULL, 0};
static const cx_op_def op_gemm_fused = {"GemmFused", CX_DOMAIN_COMPRESS, 2, 3, 1, 1,
                                        gemm_fused_attrs, gemm_fused_infer, NULL, NULL, 0};

static const cx_op_def op_matmul_fused = {"MatMulFused", CX_DOMAIN_COMPRESS, 2, 3, 1, 1,
                                          matmul_fused_attrs, matmul_fused_infer, NULL, NULL, 0};

const cx_op_def *const cx_ops_fused[] = {&op_conv_fused, &op_gemm_fused, &op_matmul_fused, NULL};
