#ifndef CX_ONNX_INTERNAL_H
#define CX_ONNX_INTERNAL_H

#include "../core/graph.h"
#include "onnx.pb-c.h"

/* A tensor held by the importer: initializer, Constant, or folded shape arithmetic. Integers are
 * kept as int64 and floats as double whatever their ONNX type, so folding has one code path. */
typedef struct cx_onnx_const {
  cx_dtype dtype; /* the ONNX element type it stands for */
  cx_shape shape;
  int64_t *i;     /* integer and bool types */
  double *f;      /* float types */
} cx_onnx_const;

void cx_onnx_const_free(cx_onnx_const *c);

/* Limits on what a model may declare: elements of one tensor, and one fixed dimension. */
enum { CX_ONNX_MAX_ELEMENTS = 1 << 30, CX_ONNX_MAX_DIM = 1 << 30 };
/* The element count of dims[0..n) into *out; false when a dimension is negative or the count
 * exceeds limit (checked before each multiplication, so it never overflows). */
bool cx_onnx_numel(const int64_t *dims, size_t n, int64_t limit, int64_t *out);
/* How many leading inputs ONNX requires of op at this opset (they must be present and
 * non-empty); later ones are optional. */
int cx_onnx_required_inputs(const char *op, int64_t opset);
bool cx_onnx_dtype_is_float(cx_dtype t);
/* ONNX TensorProto.DataType → ours; false for types we do not take (string, complex, ...). */
bool cx_onnx_dtype(int32_t onnx_type, cx_dtype *out);
const char *cx_onnx_dtype_name(int32_t onnx_type);

/* Decodes a TensorProto (raw_data or typed fields, or external data relative to base_dir) into
 * contiguous little-endian bytes of *dtype. `what` names it in messages. */
cx_status cx_onnx_tensor_bytes(const Onnx__TensorProto *t, const char *base_dir, const char *what,
                               cx_dtype *dtype, cx_shape *shape, void **data);
cx_status cx_onnx_tensor_const(const Onnx__TensorProto *t, const char *base_dir, const char *what,
                               cx_onnx_const *out);

#endif

/* ---- the importer's state, shared by onnx_import.c, onnx_fold.c and onnx_canon.c ---- */

/* Shape arithmetic is folded twice, for batch sizes 1 and 2 (the two "variants"): an element that
 * comes out the same both times is a constant; one that differs depends on the batch, and is
 * written back symbolically (0 or -1 in a Reshape target) so the graph keeps its symbolic batch. */
enum { CX_ONNX_VARIANTS = 2 };

typedef struct cx_onnx_folded {
  char *name;
  cx_onnx_const v[CX_ONNX_VARIANTS];
} cx_onnx_folded;

typedef struct cx_onnx_importer {
  const char *path;
  char base_dir[4096]; /* "" for a model read from memory: no external data */
  Onnx__ModelProto *model;
  int64_t opset;
  cx_graph *g;
  cx_onnx_folded *folded;
  int n_folded, cap_folded;
  char **alias_from, **alias_to; /* removed Identity nodes: output name -> input name */
  int n_alias, cap_alias;
  cx_shape *shape[CX_ONNX_VARIANTS]; /* by graph value id */
  int cap_shape;
} cx_onnx_importer;

/* The check of the whole model before anything of it is used (onnx_validate.c). */
cx_status cx_onnx_validate(const Onnx__ModelProto *m, const char *path, int64_t opset);

/* Looks a name up among folded constants (NULL when it is not one). */
const cx_onnx_folded *cx_onnx_find_folded(const cx_onnx_importer *im, const char *name);
cx_status cx_onnx_add_folded(cx_onnx_importer *im, const char *name, cx_onnx_const v[2]);
/* Whether a node can be folded now (its op folds and all its inputs are known), and folding it. */
bool cx_onnx_can_fold(cx_onnx_importer *im, const Onnx__NodeProto *n);
cx_status cx_onnx_fold(cx_onnx_importer *im, const Onnx__NodeProto *n);
/* Reads an input of a node as a constant for one variant: a folded value, an initializer or a
 * graph constant. False when it is not known at import time. */
bool cx_onnx_input_const(cx_onnx_importer *im, const char *name, int variant, cx_onnx_const *out);
/* Initializers are added to the graph when a node first uses them. */
const Onnx__TensorProto *cx_onnx_find_initializer(const cx_onnx_importer *im, const char *name);
/* Adds the node in canonical form (the engine's op set, newest semantics). */
cx_status cx_onnx_add_node(cx_onnx_importer *im, const Onnx__NodeProto *n, const char *name);
/* The graph value for an input name (materialising initializers and folded constants); -1 after
 * an error. `slot_kind` is the value kind an initializer gets when created for this use. */
int cx_onnx_value(cx_onnx_importer *im, const char *name, cx_value_kind slot_kind,
                  const char *node);
/* Records the two variant shapes of a node's outputs by running the op's shape inference. */
cx_status cx_onnx_infer(cx_onnx_importer *im, int node);
/* Whether an op type is one the importer can take (op table, folding, or canonicalisation). */
bool cx_onnx_op_known(const char *op_type);
const char *cx_onnx_resolve_alias(const cx_onnx_importer *im, const char *name);
/* A value's shape in one variant (activations as inferred, inputs with the batch filled in). */
cx_shape cx_onnx_var_shape(const cx_onnx_importer *im, int v, int variant);
/* A constant input named "<node>/<what>": n values of type dt (1-D), or a scalar for n < 0. */
int cx_onnx_const_input(cx_onnx_importer *im, const char *node, const char *what, cx_dtype dt,
                        int n, const double *vals);
/* A Reshape target taking `in` to `out` in both variants: dimensions that follow the batch are 0
 * (copy the input's) where they stay at their axis, else the one -1; -1 after an error. */
int cx_onnx_reshape_target(cx_onnx_importer *im, const char *node, const cx_shape in[2],
                           const cx_shape out[2]);
/* Ops written as others (onnx_rewrite.c): Einsum's attention forms as MatMul and Transpose,
 * Tile as Reshape, Expand, Reshape. */
cx_status cx_onnx_add_einsum(cx_onnx_importer *im, const Onnx__NodeProto *n, const char *name);
cx_status cx_onnx_add_tile(cx_onnx_importer *im, const Onnx__NodeProto *n, const char *name, int x);
