#ifndef CX_DNNL_POST_OPS_H
#define CX_DNNL_POST_OPS_H

#include <oneapi/dnnl/dnnl.h>

#include "../../core/graph.h"
#include "../../core/status.h"

/* Appends the activation that a fused node (ConvFused, GemmFused: core/ops/fused.c) names in its
 * `activation` attribute to po as oneDNN eltwise post-ops (nothing when it names none):
 *   Relu, LeakyRelu   relu (alpha: the slope below 0)
 *   Clip              clip (act_min, act_max)
 *   Sigmoid, Tanh     logistic, tanh
 *   HardSigmoid       linear (act_alpha, act_beta) then clip (0, 1): oneDNN 2.6 has no hardsigmoid
 *   HardSwish         hardswish (x·relu6(x + 3)/6, ONNX's)
 *   Swish             swish with alpha 1: x·sigmoid(x) */
cx_status cx_dnnl_append_activation(const cx_node *n, dnnl_post_ops_t po);

#endif
