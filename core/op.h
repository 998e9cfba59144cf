#ifndef CX_OP_H
#define CX_OP_H

#include "graph.h"

/* One record per op: its ONNX name and attribute schema, shape inference and gradient rule.
 * Kernels are not here: each backend keeps its own table keyed by op name, so that a backend can be
 * added without touching core (kernels/cpu/backend.c, later kernels/cuda/). */

#define CX_DOMAIN_ONNX ""
#define CX_DOMAIN_COMPRESS "com.compress" /* our gradient and loss ops */

typedef struct cx_attr_schema {
  const char *name;
  cx_attr_type type;
  bool required;
} cx_attr_schema;

/* Shape inference: fill out_shape/out_dtype from the inputs. `in_data` is non-NULL for inputs whose
 * contents are known at compile time (constants), for ops such as Reshape whose output shape
 * depends on an input's values. */
typedef struct cx_infer_ctx {
  const cx_node *node;
  const cx_shape *in_shape;
  const cx_dtype *in_dtype;
  const void *const *in_data;
  cx_shape *out_shape;
  cx_dtype *out_dtype;
} cx_infer_ctx;

/* Gradient rule: given the gradients of the node's outputs (dy[k], -1 where nothing flows back),
 * add nodes to g that compute the gradients of its inputs and store their value ids in dx[i]
 * (-1 where none). Only inputs with need[i] set must get a gradient. Shapes of every forward
 * value are known (shape[] indexed by value id) so a rule can emit reshapes and reductions. */
typedef struct cx_grad_ctx {
  cx_graph *g;
  int node;             /* index of the forward node in g */
  const int *dy;
  int *dx;
  const bool *need;
  const cx_shape *shape; /* by value id, for values that existed before backward began */
} cx_grad_ctx;

enum {
  CX_OP_NO_GRAD = 1 << 0,     /* outputs do not depend differentiably on inputs (Shape, ...) */
  CX_OP_RANDOM = 1 << 1,      /* reads the program's RNG stream (Dropout) */
};

typedef struct cx_op_def {
  const char *name;
  const char *domain;
  int min_in, max_in, min_out, max_out;
  const cx_attr_schema *attrs; /* terminated by {NULL} */
  cx_status (*infer)(const cx_infer_ctx *ctx);
  cx_status (*grad)(const cx_grad_ctx *ctx); /* NULL: not differentiable here */
  /* In a training program a node of this op is replaced by one of `train_op` with the same
   * inputs and attributes and extra outputs saved for the gradient (BatchNormalization keeps
   * its batch mean and inverse std, Dropout its mask). */
  const char *train_op;
  unsigned flags;
} cx_op_def;

const cx_op_def *cx_op_find(const char *name);
/* All registered ops, for listings; NULL-terminated. */
const cx_op_def *const *cx_op_all(void);

/* Helpers shared by shape-inference functions. */
cx_status cx_infer_same_as_input(const cx_infer_ctx *ctx);
cx_status cx_infer_broadcast(const cx_infer_ctx *ctx);
/* Normalises a possibly negative axis against rank; fails naming the node. */
cx_status cx_axis_normalize(const cx_node *n, int64_t axis, int rank, int *out);

/* Helpers for gradient rules (core/autodiff.c). Nodes they add get unique names derived from the
 * forward node's ("conv1/grad/ConvGrad"). */
int cx_grad_node(const cx_grad_ctx *ctx, const char *op, const int *in, int n_in, int n_out);
/* Single-output form: returns the output value id, or -1 after an error (sticky in ctx->g). */
int cx_grad_emit(const cx_grad_ctx *ctx, const char *op, const int *in, int n_in);
/* Copies every attribute of the forward node onto node (a grad op that needs strides, pads...). */
void cx_grad_copy_attrs(const cx_grad_ctx *ctx, int node);
/* The gradient of a broadcast operand: dy summed over the broadcast axes down to `to` (emits the
 * ReduceSumTo op with attribute shape=to); returns dy itself when the shapes are equal. */
int cx_grad_reduce_to(const cx_grad_ctx *ctx, int dy, const cx_shape *from, const cx_shape *to);
/* A scalar f32 constant (shape []). */
int cx_grad_scalar(const cx_grad_ctx *ctx, float v);

#endif
