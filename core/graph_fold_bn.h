#ifndef CX_GRAPH_FOLD_BN_H
#define CX_GRAPH_FOLD_BN_H

#include "graph.h"

/* BatchNormalization folding, the one mechanism (the ONNX exporter's `fold_bn` and quantization
 * both call it). An inference-mode BatchNormalization (training_mode 0, one output) whose input
 * is the only output of a Conv or Gemm, read by that BN alone and not a graph output, is folded
 * into the weighted op:
 *   BN(y) = f·y + shift,  f = scale / sqrt(var + eps),  shift = B − mean·f,
 *   W' = f·W (per output channel),  b' = f·b + shift   (Gemm: b' = f·beta·C + shift, beta = 1),
 * computed in double and stored in f32. The weight and bias must be f32 initializers that only
 * that node reads (a shared or computed weight is left alone, and so is its BN); the BN's
 * parameters must be f32 initializers of one value per channel. A Conv without a bias gets one,
 * named "<conv>.bias" (made unique). The weighted op then writes the BN's output value, so its
 * name and every reader stay; the BN node and the Conv's old output disappear.
 *
 * constant_channels (quantization asks for it): a channel whose running variance is below
 * 1e-6·eps (its input varied by under 1e-3·sqrt(eps) in training: a dead input, typically)
 * folds to its constant, W' = 0 and b' = B, instead of weights scaled by about scale/sqrt(eps):
 * the same outputs wherever the input is what training saw, and no weights hundreds of times
 * larger than the channel's signal to set its INT8 scale (and the grid its bias is rounded to).
 * Without it the fold is exact for every input.
 *
 * Graph to graph: g is not changed; *out is a new graph (free it with cx_graph_free), and
 * n_folded (may be NULL) gets the count of BatchNormalization nodes folded. */
cx_status cx_graph_fold_bn(const cx_graph *g, bool constant_channels, cx_graph **out,
                           int *n_folded);

#endif
