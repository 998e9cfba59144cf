#ifndef CX_OPS_QUANT_H
#define CX_OPS_QUANT_H

#include <stdbool.h>

#include "../graph.h"

/* What QuantizeLinear, DequantizeLinear, FakeQuantize and FakeQuantizeGrad (core/ops/quant.c)
 * share between shape inference, the gradient rule, the CPU kernels and the references, so that
 * all of them index channels, clamp and check scales alike. */

/* X seen as [outer, channels, inner] around the quantization axis: element i belongs to
 * channel (i / inner) % channels. A per-tensor scale gives channels 1 (inner = numel). */
typedef struct cx_quant_geom {
  int64_t outer, channels, inner;
} cx_quant_geom;

/* The split of X (shape x) for a scale of shape `scale` and the node's `axis` (default 1). With
 * nhwc, X is a 4-D tensor stored channels-last (kernels only): the split is of the stored
 * [N, H, W, C] order, so axis 1 becomes the innermost dimension. */
cx_status cx_quant_geometry(const cx_node *n, const cx_shape *x, const cx_shape *scale, bool nhwc,
                            cx_quant_geom *g);

/* The integer range of QuantizeLinear's output and DequantizeLinear's input type: int8
 * [-128, 127], uint8 [0, 255], int32 its own. Other types: false. */
bool cx_quant_dtype_range(cx_dtype t, int64_t *lo, int64_t *hi);

/* Scales are divided by (QuantizeLinear, FakeQuantize and its gradient): one that is not a
 * positive finite number is refused with a message naming the node and the channel, rather
 * than quantizing to inf or NaN. Shape inference cannot see it, so the kernels and references
 * check every run (a learned LSQ scale may go there while training). */
cx_status cx_quant_check_scale(const cx_node *n, int64_t channel, double scale);

/* LSQ's gradient scale g = 1 / sqrt(numel(X) / numel(scale) * Qp), Qp = qmax (the positive
 * range; qmax - qmin for a range with qmax <= 0), as the gradient rule of FakeQuantize sets it
 * on FakeQuantizeGrad (attribute grad_scale). */
float cx_quant_lsq_grad_scale(const cx_shape *x, const cx_shape *scale, int64_t qmin,
                              int64_t qmax);

#endif
