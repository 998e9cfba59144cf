#include "dnnl_post_ops.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "../../core/op.h"
#include "../../core/ops/activation.h"
#include "dnnl_util.h"

static cx_status eltwise(const cx_node *n, dnnl_post_ops_t po, dnnl_alg_kind_t alg, float alpha,
                         float beta) {
  CX_DNNL(dnnl_post_ops_append_eltwise(po, 1.0f, alg, alpha, beta), n);
  return CX_OK;
}

cx_status cx_dnnl_append_activation(const cx_node *n, dnnl_post_ops_t po) {
  const char *act = cx_node_string(n, "activation", NULL);
  if (!act) return CX_OK;
  if (!strcmp(act, "Swish")) return eltwise(n, po, dnnl_eltwise_swish, 1.0f, 0.0f);
  int a = cx_act_find(act);
  /* the defaults of the activation's own op (LeakyRelu 0.01, HardSigmoid 0.2 and 0.5) */
  float alpha = cx_node_float(n, "act_alpha", a == CX_ACT_LEAKY_RELU ? 0.01f : 0.2f),
        beta = cx_node_float(n, "act_beta", 0.5f);
  switch (a) {
  case CX_ACT_RELU: return eltwise(n, po, dnnl_eltwise_relu, 0.0f, 0.0f);
  case CX_ACT_LEAKY_RELU: return eltwise(n, po, dnnl_eltwise_relu, alpha, 0.0f);
  case CX_ACT_CLIP:
    return eltwise(n, po, dnnl_eltwise_clip,
                   fmaxf(cx_node_float(n, "act_min", -INFINITY), -FLT_MAX),
                   fminf(cx_node_float(n, "act_max", INFINITY), FLT_MAX));
  case CX_ACT_SIGMOID: return eltwise(n, po, dnnl_eltwise_logistic, 0.0f, 0.0f);
  case CX_ACT_TANH: return eltwise(n, po, dnnl_eltwise_tanh, 0.0f, 0.0f);
  case CX_ACT_GELU: return eltwise(n, po, dnnl_eltwise_gelu_erf, 0.0f, 0.0f);
  case CX_ACT_HARD_SWISH: return eltwise(n, po, dnnl_eltwise_hardswish, 0.0f, 0.0f);
  case CX_ACT_HARD_SIGMOID:
    CX_TRY(eltwise(n, po, dnnl_eltwise_linear, alpha, beta));
    return eltwise(n, po, dnnl_eltwise_clip, 0.0f, 1.0f);
  default: break;
  }
  return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): no oneDNN post-op for activation '%s'",
                 n->name, n->op->name, cx_printable(act));
}
