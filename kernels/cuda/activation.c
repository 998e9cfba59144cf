/* CUDA kernels of the activations and of ActivationGrad (kernels/cpu/activation.c's formulas).
 * Clip's bound inputs live on the device: their pointers go to the kernel, which reads them. */

#include <string.h>

#include "../../core/ops/activation.h"
#include "activation_launch.h"
#include "cuda.h"

_Static_assert(CX_CU_RELU == (int)CX_ACT_RELU && CX_CU_CLIP == (int)CX_ACT_CLIP &&
                   CX_CU_HARD_SWISH == (int)CX_ACT_HARD_SWISH && CX_CU_LOG == (int)CX_ACT_LOG &&
                   CX_CU_GELU == (int)CX_ACT_GELU && CX_CU_RECIPROCAL == (int)CX_ACT_RECIPROCAL &&
                   CX_CU_ACT_COUNT == (int)CX_ACT_COUNT,
               "activation_launch.h must list the activations in cx_act's order");

static const float *opt_f32(const cx_kernel_args *a, int i) {
  return i < a->n_in && a->in[i].data ? cx_cuda_f32(&a->in[i]) : NULL;
}

/* The activation's parameters; Clip's bounds from inputs lo_in, lo_in + 1 when present (device
 * pointers), else the attributes min / max, else -inf / +inf (cx_act_clip_bounds without the
 * inputs). */
static cx_cu_act_par params(const cx_kernel_args *a, int lo_in) {
  cx_cu_act_par p = {.op = cx_act_of_node(a->node)};
  if (p.op < 0) return p;
  cx_act_params(a->node, (cx_act)p.op, &p.alpha, &p.beta);
  cx_act_clip_bounds(a->node, NULL, NULL, &p.lo, &p.hi);
  p.lo_p = opt_f32(a, lo_in);
  p.hi_p = opt_f32(a, lo_in + 1);
  return p;
}

static cx_status run_act(const cx_kernel_args *a) {
  cx_cu_act_par p = params(a, 1);
  CX_CUDA(cx_cu_act_forward(p, cx_cuda_f32(&a->out[0]), cx_cuda_f32(&a->in[0]),
                            cx_tensor_numel(&a->out[0]), cx_cuda_stream(a->stream)->s));
  return CX_OK;
}

/* ActivationGrad(dY, X, Y[, min, max]) */
static cx_status run_act_grad(const cx_kernel_args *a) {
  cx_cu_act_par p = params(a, 3);
  if (p.op < 0)
    return cx_fail(CX_ERR_ARG, "node '%s' (ActivationGrad): unknown activation '%s'",
                   a->node->name, cx_node_string(a->node, "op", "(missing)"));
  CX_CUDA(cx_cu_act_backward(p, cx_cuda_f32(&a->out[0]), cx_cuda_f32(&a->in[0]), opt_f32(a, 1),
                             opt_f32(a, 2), cx_tensor_numel(&a->out[0]),
                             cx_cuda_stream(a->stream)->s));
  return CX_OK;
}

/* Gelu's approximate is "none" or "tanh" (infer refuses others), ActivationGrad's op one of the
 * activations; anything else finds no kernel here. An ActivationGrad without its op attribute
 * (the attribute-less probes of `compress ops` and the compile passes) has one: run refuses it
 * with a message, as the CPU's does. */
static bool supports_act(const cx_node *n) {
  int act = cx_act_of_node(n);
  if (act < 0) return !cx_node_string(n, "op", NULL);
  const char *m = cx_node_string(n, "approximate", "none");
  return act != CX_ACT_GELU || !strcmp(m, "none") || !strcmp(m, "tanh");
}

const cx_kernel cx_cuda_activation[] = {
    {"Relu", NULL, run_act, NULL, 0, supports_act, 0},
    {"LeakyRelu", NULL, run_act, NULL, 0, supports_act, 0},
    {"Clip", NULL, run_act, NULL, 0, supports_act, 0},
    {"Sigmoid", NULL, run_act, NULL, 0, supports_act, 0},
    {"HardSigmoid", NULL, run_act, NULL, 0, supports_act, 0},
    {"HardSwish", NULL, run_act, NULL, 0, supports_act, 0},
    {"Tanh", NULL, run_act, NULL, 0, supports_act, 0},
    {"Exp", NULL, run_act, NULL, 0, supports_act, 0},
    {"Log", NULL, run_act, NULL, 0, supports_act, 0},
    {"Sqrt", NULL, run_act, NULL, 0, supports_act, 0},
    {"Erf", NULL, run_act, NULL, 0, supports_act, 0},
    {"Gelu", NULL, run_act, NULL, 0, supports_act, 0},
    {"Reciprocal", NULL, run_act, NULL, 0, supports_act, 0},
    {"ActivationGrad", NULL, run_act_grad, NULL, 0, supports_act, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
