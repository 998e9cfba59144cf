#ifndef CX_GRAPH_COST_H
#define CX_GRAPH_COST_H

/* What a model costs, from its graph: parameters and multiply-accumulates, dense and counting
 * only non-zero weights. The one cost function: the report, `compress inspect` and channel
 * pruning (its sparsity is a fraction of these MACs) all count with it. */

#include <stdint.h>

#include "graph.h"

/* Effective MACs skip the multiply-accumulates whose weight (the Conv, Gemm or MatMul operand
 * that is an initializer, or the DequantizeLinear of one: an INT8 file's weights) is exactly
 * zero, which is what unstructured sparsity saves; a weight computed by other nodes counts as
 * dense. The parameters are the model's weights as stored: the trainable initializers and the
 * quantized ones (the integer initializers that DequantizeLinear nodes read), not the
 * quantization scales and zero points, so an INT8 file counts its int8 weights (and, its
 * BatchNorms folded, one bias per channel where the float model had a scale and a shift). */
typedef struct cx_graph_cost {
  int64_t params;         /* weights as stored, quantized or not (above) */
  int64_t params_nonzero; /* of those, the values not exactly zero */
  int64_t macs;           /* Conv, Gemm and MatMul multiply-accumulates per sample */
  int64_t macs_effective; /* those whose weight is not exactly zero */
} cx_graph_cost;

/* Multiply-accumulates of one Conv, Gemm or MatMul node for one sample (0 for other ops), given
 * every value's shape at batch 1; *effective (may be NULL) gets those with a non-zero weight. */
int64_t cx_graph_node_macs(const cx_graph *g, const cx_node *n, const cx_shape *one,
                           int64_t *effective);
/* The weights node n reads (its parameters, and the quantized weights behind its
 * DequantizeLinear inputs), each input counted once; 0 for Q/DQ nodes themselves, whose weights
 * count at their readers. */
int64_t cx_graph_node_params(const cx_graph *g, const cx_node *n);
/* The model's totals (what `compress inspect` and the report show). */
cx_status cx_graph_measure_cost(const cx_graph *g, cx_graph_cost *cost);

#endif
