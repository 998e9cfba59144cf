#ifndef CX_GRAPH_H
#define CX_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "status.h"
#include "tensor.h"

struct cx_op_def;

typedef enum cx_attr_type {
  CX_ATTR_INT,
  CX_ATTR_FLOAT,
  CX_ATTR_INTS,
  CX_ATTR_FLOATS,
  CX_ATTR_STRING,
} cx_attr_type;

typedef struct cx_attr {
  char *name;
  cx_attr_type type;
  int64_t i;
  float f;
  int n;           /* element count of ints / floats */
  int64_t *ints;
  float *floats;
  char *s;
} cx_attr;

typedef enum cx_value_kind {
  CX_VALUE_ACT,   /* produced by a node */
  CX_VALUE_INPUT, /* fed by the caller each step */
  CX_VALUE_PARAM, /* trainable initializer */
  CX_VALUE_STATE, /* non-trainable initializer the program updates (BN running statistics) */
  CX_VALUE_CONST, /* frozen initializer */
} cx_value_kind;

typedef struct cx_value {
  char *name;
  cx_value_kind kind;
  cx_dtype dtype;
  cx_shape shape;  /* for inputs, -1 marks the batch dimension */
  void *init;      /* owned initializer bytes for PARAM, STATE and CONST */
  int producer;    /* node index, or -1 */
} cx_value;

typedef struct cx_node {
  char *name;
  const struct cx_op_def *op;
  int n_in, n_out, n_attrs;
  int *in;  /* value ids; -1 for an omitted optional input */
  int *out; /* value ids */
  cx_attr *attrs;
} cx_node;

/* Argument k of node n, inputs first, then outputs: a value id, or -1 for an omitted input. */
static inline int cx_node_arg(const cx_node *n, int k) {
  return k < n->n_in ? n->in[k] : n->out[k - n->n_in];
}

/* The graph IR. Building records nodes only; shapes are inferred and memory placed when a program
 * is compiled. Builder calls never fail loudly: the first error sticks in `status`/`error` and
 * later calls are ignored, so model code reads straight through and checks once at the end. */
typedef struct cx_graph {
  cx_value *values;
  int n_values, cap_values;
  cx_node *nodes;
  int n_nodes, cap_nodes;
  int *outputs;
  int n_outputs, cap_outputs;
  cx_status status;
  char error[1024];
} cx_graph;

cx_graph *cx_graph_new(void);
void cx_graph_free(cx_graph *g);
/* The sticky builder error, if any, copied into the thread's message. */
cx_status cx_graph_status(const cx_graph *g);

int cx_graph_input(cx_graph *g, const char *name, cx_dtype dtype, const cx_shape *shape);
/* data may be NULL (zero-filled); it is copied */
int cx_graph_init(cx_graph *g, cx_value_kind kind, const char *name, cx_dtype dtype,
                  const cx_shape *shape, const void *data);
int cx_graph_param(cx_graph *g, const char *name, const cx_shape *shape, const float *data);
int cx_graph_const_f32(cx_graph *g, const char *name, const cx_shape *shape, const float *data);
int cx_graph_const_s64(cx_graph *g, const char *name, int n, const int64_t *data);
void cx_graph_mark_output(cx_graph *g, int value);

/* Adds a node of an op from the registry, making n_out fresh output values named
 * "<name>" (one output) or "<name>:<k>". Returns the node index, or -1 after an error. */
int cx_graph_node(cx_graph *g, const char *op, const char *name, const int *in, int n_in, int n_out);
/* The same with the outputs' names given (ONNX import); a NULL or empty name gets the default. */
int cx_graph_node_named(cx_graph *g, const char *op, const char *name, const int *in, int n_in,
                        const char *const *out_names, int n_out);
/* Single-output convenience: returns the output value id. */
int cx_graph_op(cx_graph *g, const char *op, const char *name, const int *in, int n_in);
int cx_node_output(const cx_graph *g, int node, int k);

void cx_node_set_int(cx_graph *g, int node, const char *name, int64_t v);
void cx_node_set_float(cx_graph *g, int node, const char *name, float v);
void cx_node_set_ints(cx_graph *g, int node, const char *name, const int64_t *v, int n);
void cx_node_set_floats(cx_graph *g, int node, const char *name, const float *v, int n);
void cx_node_set_string(cx_graph *g, int node, const char *name, const char *v);

const cx_attr *cx_node_attr(const cx_node *n, const char *name);
int64_t cx_node_int(const cx_node *n, const char *name, int64_t fallback);
float cx_node_float(const cx_node *n, const char *name, float fallback);
/* Returns the count (0 when absent) and points *v at the values. */
int cx_node_ints(const cx_node *n, const char *name, const int64_t **v);
int cx_node_floats(const cx_node *n, const char *name, const float **v);
const char *cx_node_string(const cx_node *n, const char *name, const char *fallback);

int cx_graph_find_value(const cx_graph *g, const char *name);
/* A name not yet used in the graph, made from base ("base", "base_1", ...), that is also free
 * as a node name (its outputs "name:k"). Caller frees. */
char *cx_graph_unique_name(const cx_graph *g, const char *base);
/* Copies the whole graph, initializers included. */
cx_graph *cx_graph_clone(const cx_graph *g);
/* Checks value ids, dangling inputs and cycles; the message names the node. */
cx_status cx_graph_validate(const cx_graph *g);
int64_t cx_graph_param_count(const cx_graph *g);
/* Deletes the nodes marked in dead[] (n_nodes entries), then every activation value that no node
 * produces and nothing reads (outputs of the deleted nodes, values a rewrite left behind).
 * Node and value ids change; their order is kept. */
cx_status cx_graph_remove_nodes(cx_graph *g, const bool *dead);
/* Makes room so that the next `nodes` nodes and `values` values are added without moving the
 * arrays (pointers to nodes and values stay valid meanwhile). */
cx_status cx_graph_reserve(cx_graph *g, int nodes, int values);

#endif
