#ifndef CX_INFER_PATTERNS_H
#define CX_INFER_PATTERNS_H

#include "graph.h"

/* Inference programs' op patterns (cx_program_compile, before the fusions of core/infer_fuse.h;
 * CX_FUSE=off turns them off): subgraphs that exporters write for one op of our set, below the
 * opset that has it, become that op, so that a transformer's or ConvNeXt's forward pass makes one
 * pass over memory where it made five or nine.
 *   - GELU, as PyTorch exports it below opset 20: Div(x, √2) (or Mul(x, 1/√2)), Erf, Add 1,
 *     Mul by x, Mul by 0.5 → Gelu(x).
 *   - LayerNorm over the last axis, below opset 17: ReduceMean(x), Sub, Pow 2, ReduceMean, Add ε,
 *     Sqrt, Div, Mul γ, Add β → LayerNormalization(x, γ, β, axis -1, epsilon ε).
 * Operands of Add and Mul may come in either order; every value inside a pattern must be read by
 * the pattern alone and not be a graph output. The pattern's last node becomes the op, so its
 * output value (name, readers) stays. n_rewritten (may be NULL) gets the count of nodes
 * removed. Results equal the decomposed graph's within rounding (tests/test_infer_fuse.c). */
cx_status cx_infer_patterns(cx_graph *g, int *n_rewritten);

#endif
