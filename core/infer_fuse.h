#ifndef CX_INFER_FUSE_H
#define CX_INFER_FUSE_H

#include "backend.h"
#include "graph.h"

/* Inference programs' fusions (cx_program_compile, programs not compiled for training; CX_FUSE=off
 * turns them off, as it does the training ones of core/fuse.h).
 *
 * Before shapes are inferred the compile folds every BatchNormalization it can into the Conv or
 * Gemm before it with cx_graph_fold_bn (core/graph_fold_bn.h), the one BN fold. Then, on the
 * inferred graph (after the INT8 pass, whose patterns read plain Conv and Relu nodes), this pass
 * rewrites each f32 Conv into a ConvFused, each Gemm into a GemmFused and each MatMul of a
 * rank-2 initializer B into a MatMulFused (core/ops/fused.c) that swallows, in this order, what
 * follows it:
 *   - Conv only: an Add of its output and another value S of the same shape (the residual):
 *     S becomes ConvFused's input 3 and the conv's primitive adds it (oneDNN's sum post-op);
 *   - MatMul only: an Add of its output and an f32 initializer [N] (the bias of a Linear layer
 *     on a tensor of rank 3 or 4): MatMulFused's input 2 (oneDNN's bias);
 *   - one activation: Relu, LeakyRelu, Clip with constant bounds (ReLU6), Sigmoid, HardSigmoid,
 *     HardSwish, Tanh, Gelu (erf form), or Swish: a Sigmoid of the value and the Mul of the
 *     value by it (a HardSigmoid with alpha 1/6 and beta 1/2 in its place is HardSwish, as PyTorch exports
 *     it below opset 14).
 * Each value swallowed must be read by the next node of the chain alone and not be a graph
 * output; the last node's output value (its name, its readers) stays, produced by the fused
 * node. Nothing is fused when the backend has no kernel for the fused ops. n_fused (may be
 * NULL) gets the count of nodes removed.
 *
 * frozen_weights: the program's parameters never change after compile (an inference program
 * not compiled with params_copied_in; cx_program_copy_params is refused or not used). Each
 * ConvFused whose W is an initializer then gets frozen_weights = 1, and the CPU kernel reorders W
 * into the primitive's layout once, at its first run, instead of at every run (ResNet-18 at
 * batch 1: 11 of 70 ms were those reorders). Writing such a W later is not seen. */
cx_status cx_infer_fuse(cx_graph *g, const cx_backend *be, bool frozen_weights, int *n_fused);

/* The input of node n whose buffer its output 0 may take over (ConvFused's S: the conv adds
 * into it), or -1. The memory planner gives both one buffer when that input dies at n, and the
 * layout pass gives both one layout. */
int cx_infer_fuse_accumulator(const cx_node *n);

#endif
