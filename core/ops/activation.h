#ifndef CX_OPS_ACTIVATION_H
#define CX_OPS_ACTIVATION_H

/* The element-wise activations, as one list shared by their op records, the one gradient op
 * (ActivationGrad, which switches on the forward op's name), kernels and references. */

#include <stdbool.h>

#include "../graph.h"

typedef enum cx_act {
  CX_ACT_RELU,
  CX_ACT_LEAKY_RELU,
  CX_ACT_CLIP,
  CX_ACT_SIGMOID,
  CX_ACT_HARD_SIGMOID,
  CX_ACT_HARD_SWISH,
  CX_ACT_TANH,
  CX_ACT_EXP,
  CX_ACT_LOG,
  CX_ACT_SQRT,
  CX_ACT_ERF,
  CX_ACT_GELU,
  CX_ACT_RECIPROCAL,
  CX_ACT_COUNT
} cx_act;

typedef struct cx_act_info {
  const char *name; /* the ONNX op */
  bool grad_x, grad_y; /* whether the derivative reads the forward input X / output Y */
} cx_act_info;

const cx_act_info *cx_act_get(cx_act a);
/* The activation named `name`, or -1. */
int cx_act_find(const char *name);

/* The activation a node computes: its own op, or for ActivationGrad its attribute `op`. -1 if
 * neither names one. */
int cx_act_of_node(const cx_node *n);

/* alpha and beta with the ONNX defaults of the node's activation (LeakyRelu alpha 0.01,
 * HardSigmoid alpha 0.2 beta 0.5, Gelu alpha 1 for approximate = "tanh" and 0 for the exact
 * erf form); 0 for the others. */
void cx_act_params(const cx_node *n, cx_act a, float *alpha, float *beta);

/* Clip's bounds: opset 11+ inputs 1 and 2 when present (value pointers, NULL when omitted),
 * else the opset-6 attributes min/max, else -inf / +inf. */
void cx_act_clip_bounds(const cx_node *n, const float *min_in, const float *max_in, float *lo,
                        float *hi);

#endif
