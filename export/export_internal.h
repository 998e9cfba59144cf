#ifndef CX_EXPORT_INTERNAL_H
#define CX_EXPORT_INTERNAL_H

/* The exporter's state, shared by the files in export/. Everything the protobuf messages point
 * at is either owned by the graph (names, initializer bytes) or allocated in the exporter's arena
 * and freed in one go once the file is written. */

#include "../core/graph.h"
#include "onnx.pb-c.h"
#include "onnx_export.h"

enum { CX_EX_MAX_ATTRS = 32 };

/* What BatchNormalization folding changed about a Conv or Gemm node. */
typedef struct cx_ex_fold {
  const char *bias;  /* the new bias (Conv B, Gemm C) initializer, written in input slot 2 */
  bool unit_beta;    /* Gemm: beta is written as 1 (the folded C carries the old beta) */
} cx_ex_fold;

typedef struct cx_exporter {
  const cx_graph *g;
  int64_t opset;
  int *order;           /* nodes in topological order */
  cx_shape *shape[2];   /* by value id, for batch 1 and 2 */
  cx_shape *sym;        /* by value id: -1 the batch, -2 otherwise batch-dependent */
  cx_dtype *dtype;      /* by value id */
  const char **name;    /* by value id: the name written (a folded Conv writes the BN's output) */
  const void **data;    /* by value id: initializer bytes written (folded weights, else init) */
  bool *used;           /* by value id: referenced by a written node */
  bool *skip;           /* by node: folded into its producer */
  cx_ex_fold *fold;     /* by node */
  int n_folded;
  /* the arena */
  void **mem;
  int n_mem, cap_mem;
  /* the graph being written */
  Onnx__NodeProto **nodes;
  size_t n_nodes, cap_nodes;
  Onnx__TensorProto **inits;
  size_t n_inits, cap_inits;
} cx_exporter;

/* ---- arena and protobuf helpers (export_proto.c) ---- */
void *cx_ex_alloc(cx_exporter *ex, size_t bytes); /* zeroed; NULL when out of memory */
char *cx_ex_strdup(cx_exporter *ex, const char *s);
void cx_ex_free(cx_exporter *ex);
int32_t cx_ex_onnx_dtype(cx_dtype t);
/* A name for an initializer or value the exporter adds: base, or base_1, base_2, ... if base is
 * taken by a graph value or an earlier addition. */
const char *cx_ex_unique_name(cx_exporter *ex, const char *base);
/* Adds an initializer; data is copied into the arena. Returns its name (NULL: out of memory). */
const char *cx_ex_add_init(cx_exporter *ex, const char *name, cx_dtype dtype, const cx_shape *shape,
                           const void *data);
/* An int64 initializer of n values (1-D), or a scalar f32 one, named uniquely "<node>/<what>". */
const char *cx_ex_const_s64(cx_exporter *ex, const char *node, const char *what, int n,
                            const int64_t *v);
const char *cx_ex_const_f32(cx_exporter *ex, const char *node, const char *what, float v);
/* Initializer bytes of value v (folded or original); NULL when it has none. */
const void *cx_ex_value_data(const cx_exporter *ex, int v);
/* Writes initializer value v with the bytes in ex->data. */
cx_status cx_ex_write_value_init(cx_exporter *ex, int v);
/* A node with room for CX_EX_MAX_ATTRS attributes; NULL when out of memory. */
Onnx__NodeProto *cx_ex_node(cx_exporter *ex, const char *op, const char *name,
                            const char *const *in, int n_in, const char *const *out, int n_out);
cx_status cx_ex_attr_copy(cx_exporter *ex, Onnx__NodeProto *n, const cx_attr *a);
cx_status cx_ex_attr_int(cx_exporter *ex, Onnx__NodeProto *n, const char *name, int64_t v);
cx_status cx_ex_attr_float(cx_exporter *ex, Onnx__NodeProto *n, const char *name, float v);
cx_status cx_ex_attr_ints(cx_exporter *ex, Onnx__NodeProto *n, const char *name, const int64_t *v,
                          int count);
/* A tensor ValueInfo with the symbolic shape (NULL shape: type only). */
Onnx__ValueInfoProto *cx_ex_value_info(cx_exporter *ex, const char *name, cx_dtype dtype,
                                       const cx_shape *shape);
cx_status cx_ex_nomem(void);

/* ---- the passes ---- */
cx_status cx_ex_fold_bn(cx_exporter *ex);                /* export_fold.c */
cx_status cx_ex_lower_node(cx_exporter *ex, int node);   /* export_nodes.c */
/* How many nodes read value v (a node reading it twice counts twice), plus graph outputs. */
int cx_ex_consumers(const cx_graph *g, int v);

#endif
