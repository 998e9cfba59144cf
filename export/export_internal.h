#ifndef CX_EXPORT_INTERNAL_H
#define CX_EXPORT_INTERNAL_H

/* The exporter's state, shared by the files in export/. Everything the protobuf messages point
 * at is either owned by the graph (names, initializer bytes) or allocated in the exporter's arena
 * and freed in one go once the file is written. */

#include "../core/graph.h"
#include "onnx.pb-c.h"
#include "onnx_export.h"

enum { CX_EX_MAX_ATTRS = 32 };

typedef struct cx_exporter {
  const cx_graph *g;
  int64_t opset;
  int *order;           /* nodes in topological order */
  cx_shape *shape[2];   /* by value id, for batch 1 and 2 */
  cx_shape *sym;        /* by value id: -1 the batch, -2 otherwise batch-dependent */
  cx_dtype *dtype;      /* by value id */
  bool *used;           /* by value id: referenced by a written node */
  int *qdq_pairs;       /* by value id: QuantizeLinear→DequantizeLinear pairs written for it */
  /* all-zero zero points written so far, one initializer per type and size (export_qdq.c) */
  struct cx_ex_zero { cx_dtype q; int64_t count; const char *name; } *zeros;
  int n_zeros, cap_zeros;
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
/* Writes initializer value v. */
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
cx_status cx_ex_lower_node(cx_exporter *ex, int node);   /* export_nodes.c */
/* LayerNormalization below opset 17, Gelu below 20 and ExpandBatch as several ONNX nodes
 * (export_compose.c); *done false: the node is not one of those. */
cx_status cx_ex_lower_composed(cx_exporter *ex, int node, bool *done);

/* ---- FakeQuantize as QDQ (export_qdq.c) ---- */
/* Whether value v is the output of a FakeQuantize on an activation (its input is not an
 * initializer): such a node is written as one QuantizeLinear→DequantizeLinear pair per reader. */
bool cx_ex_is_activation_fq(const cx_exporter *ex, int v);
/* Writes a new pair for one reader of activation-FakeQuantize output v; *name gets the
 * DequantizeLinear's output (v's own name for the first pair). */
cx_status cx_ex_qdq_pair(cx_exporter *ex, int v, const char **name);
/* A FakeQuantize node: on a weight, the INT8 initializer and its DequantizeLinear; on an
 * activation, nothing (its readers write the pairs). */
cx_status cx_ex_lower_fake_quantize(cx_exporter *ex, int node);
/* Refuses opsets below 13 for a graph with FakeQuantize, naming the node. */
cx_status cx_ex_check_qdq_opset(const cx_graph *g, int64_t opset, const char *path);

#endif
