#ifndef CX_QUANT_FUSE_H
#define CX_QUANT_FUSE_H

#include "graph.h"

/* The INT8 runtime's compile pass, for inference programs (called by cx_program_compile after
 * shapes are inferred). It recognises, in a QDQ graph,
 *
 *   DequantizeLinear(x_q int8, scalar scale, zero point 0) ─┐
 *   DequantizeLinear(w_q int8 initializer, scale per output channel or scalar, zero point 0) ─┤
 *   [bias f32 initializer] ─┴─► Conv (any group) | Gemm (alpha = beta = 1, transA = 0) | MatMul
 *   [→ Relu | Clip with constant bounds] [→ QuantizeLinear(scalar scale, int8 zero point 0)]
 *
 * (after collapsing Q → DQ → f → Q' with Q, Q' alike around f in Relu, Clip, MaxPool, Reshape,
 * Flatten, Dropout into f → Q': the same integers) and replaces it with one QLinearConvFused or
 * QLinearGemmFused node (core/ops/qlinear.c) that
 * reads x_q and w_q and writes the QuantizeLinear's int8 output (or, with no QuantizeLinear
 * after it, the f32 result: the logits). Its output value keeps the replaced value's name and
 * type, so what reads it does not change. DequantizeLinear nodes left without readers go.
 *
 * Add(DQ(a int8), DQ(b int8)) [→ Relu | Clip] → QuantizeLinear, a and b of one shape, becomes
 * QLinearAddFused(a, b): the same f32 operations in one pass over int8 memory. QuantizeLinear
 * nodes alike on one value (the same scale, zero point 0: one pair per reader, as our exporter
 * writes them) are merged into one first, so an Add read by two of them fuses too.
 *
 * x_q is known to be >= 0 when its QuantizeLinear reads a Relu, a Clip with min >= 0, a fused
 * node whose act_min is >= 0, or a DequantizeLinear of such a value through MaxPool, AveragePool,
 * GlobalAveragePool, Flatten, Reshape or Dropout. oneDNN's int8 primitives on x86 CPUs without
 * VNNI (AMD EPYC before Zen 4: AVX2) multiply with vpmaddubsw, which saturates int16 pair sums:
 * they are exact only for uint8 sources up to 128 against int8 weights (and lossy for int8
 * sources, whose weights they halve). A non-negative int8 tensor is such a uint8 tensor byte for
 * byte, so the kernel reads it as uint8. A source that may be negative (the first convolution's,
 * a MobileNetV2 block's expansion's, after its linear bottleneck) is fused with x_signed = 1 only
 * where backend be runs such a node (its find_kernel, asked with a probe node): the CPU backend
 * where oneDNN has VNNI, which is exact on int8 sources. Elsewhere it stays float and runs as
 * before, as do uint8 inputs and non-zero zero points.
 *
 * frozen_weights: the program's parameters never change after compile (as for cx_infer_fuse):
 * each fused node then gets frozen_weights = 1, and the CPU kernel reorders its int8 weights into
 * the primitive's layout once instead of at every run (MobileNetV2-0.5 at batch 32: 0.5 of 3.9 ms
 * a step). The scales and the bias in accumulator units are computed here from the initializers
 * in any case, so the pass reads them as constants either way.
 *
 * CX_INT8=off in the environment turns the pass off (the float QDQ simulation, to compare). */
struct cx_backend;
cx_status cx_quant_fuse(cx_graph *g, const struct cx_backend *be, bool frozen_weights);

/* Whether the pass is on (CX_INT8 is not "off"). */
bool cx_quant_fuse_enabled(void);

#endif
