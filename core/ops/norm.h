#ifndef CX_OPS_NORM_H
#define CX_OPS_NORM_H

#include <stdbool.h>

#include "../graph.h"

/* A training program fuses the activation after a BatchNormTrain into it (core/fuse.c): the
 * node then clamps its output to [activation_min, activation_max] (Relu: [0, inf], ReLU6:
 * [0, 6]), and its BatchNormGrad, given B as a sixth input, recomputes the normalised value
 * z = (X - mean) * invstd * scale + B to pass dY only where min < z < max, as the unfused
 * activation's gradient would. So neither the activation's output nor its gradient is stored. */
#define CX_BN_ACT_MIN "activation_min"
#define CX_BN_ACT_MAX "activation_max"

/* Whether node n (BatchNormTrain or BatchNormGrad) has a fused activation, and its bounds. */
bool cx_bn_activation(const cx_node *n, float *lo, float *hi);

/* LayerNormalization (opset 17) normalises X over its trailing axes from `axis` (default -1): X
 * seen as [rows, cols], cols the product of the normalised dimensions. Shared by shape
 * inference, the kernels and the references so that they split alike. */
cx_status cx_layer_norm_split(const cx_node *n, const cx_shape *x, int64_t *rows, int64_t *cols);

#endif
