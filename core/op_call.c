#include "op_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_shapes.h"
#include "op.h"

enum { MAX_ARGS = 16 };

struct cx_op_call {
  const cx_backend *b;
  cx_stream *s;
  cx_graph *g; /* the one node kernels are given, with its input and output values */
  const cx_kernel *k;
  void *state, *scratch;
  int n_in, n_out;
  cx_tensor like[2 * MAX_ARGS]; /* inputs then outputs as at create: what run must match */
};

static const cx_node *node_of(const cx_op_call *c) { return &c->g->nodes[0]; }

static cx_status check_attrs(const cx_op_def *def, const char *name, const cx_op_call_desc *d) {
  for (int i = 0; i < d->n_attrs; i++) {
    const cx_attr_schema *s = def->attrs;
    while (s && s->name && strcmp(s->name, d->attrs[i].name) != 0) s++;
    if (!s || !s->name)
      return cx_fail(CX_ERR_ARG, "op call '%s' (%s): no attribute '%s'", name, def->name,
                     d->attrs[i].name);
    if (s->type != d->attrs[i].type)
      return cx_fail(CX_ERR_ARG, "op call '%s' (%s): attribute '%s' has the wrong type", name,
                     def->name, s->name);
  }
  for (const cx_attr_schema *s = def->attrs; s && s->name; s++) {
    bool given = false;
    for (int i = 0; i < d->n_attrs; i++) given = given || strcmp(s->name, d->attrs[i].name) == 0;
    if (s->required && !given)
      return cx_fail(CX_ERR_ARG, "op call '%s' (%s): attribute '%s' is required", name,
                     def->name, s->name);
  }
  return CX_OK;
}

static void set_attr(cx_graph *g, const cx_attr *a) {
  switch (a->type) {
  case CX_ATTR_INT: cx_node_set_int(g, 0, a->name, a->i); break;
  case CX_ATTR_FLOAT: cx_node_set_float(g, 0, a->name, a->f); break;
  case CX_ATTR_INTS: cx_node_set_ints(g, 0, a->name, a->ints, a->n); break;
  case CX_ATTR_FLOATS: cx_node_set_floats(g, 0, a->name, a->floats, a->n); break;
  case CX_ATTR_STRING: cx_node_set_string(g, 0, a->name, a->s); break;
  }
}

/* A graph of one node whose inputs are values shaped like d's. */
static cx_status build_node(cx_op_call *c, const cx_op_call_desc *d, const char *name) {
  if (!(c->g = cx_graph_new())) return cx_fail(CX_ERR_NOMEM, "out of memory");
  int ids[MAX_ARGS];
  for (int i = 0; i < d->n_in; i++) {
    char in_name[32];
    snprintf(in_name, sizeof in_name, "in%d", i);
    ids[i] = d->in[i].data ? cx_graph_input(c->g, in_name, d->in[i].dtype, &d->in[i].shape) : -1;
  }
  cx_graph_node(c->g, d->op, name, ids, d->n_in, d->n_out);
  for (int i = 0; i < d->n_attrs; i++) set_attr(c->g, &d->attrs[i]);
  return cx_graph_status(c->g);
}

/* The op's shape inference (core/graph_shapes.h), and the outputs given must be what it says. */
static cx_status infer(const cx_op_call *c, const cx_op_call_desc *d) {
  const cx_graph *g = c->g;
  const cx_node *n = node_of(c);
  cx_shape *shape = malloc(sizeof(cx_shape) * ((size_t)g->n_values + 1));
  cx_dtype *dtype = malloc(sizeof(cx_dtype) * ((size_t)g->n_values + 1));
  cx_status s = shape && dtype ? cx_graph_infer_shapes(g, 0, shape, dtype)
                               : cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int k = 0; k < d->n_out && s == CX_OK; k++) {
    const cx_shape *want = &shape[n->out[k]];
    if (cx_shape_equal(want, &d->out[k].shape) && dtype[n->out[k]] == d->out[k].dtype) continue;
    char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
    s = cx_fail(CX_ERR_SHAPE, "op call '%s' (%s): output %d is %s %s; the op makes %s %s",
                n->name, d->op, k, cx_dtype_name(d->out[k].dtype),
                cx_shape_str(&d->out[k].shape, a), cx_dtype_name(dtype[n->out[k]]),
                cx_shape_str(want, b));
  }
  free(shape);
  free(dtype);
  return s;
}

static cx_kernel_args args_of(const cx_op_call *c, const cx_tensor *in, const cx_tensor *out) {
  return (cx_kernel_args){.node = node_of(c), .in = in, .n_in = c->n_in, .out = out,
                          .n_out = c->n_out, .state = c->state, .scratch = c->scratch,
                          .training = true, .precision = CX_PRECISION_F32, .stream = c->s};
}

/* t matches the tensor the call was prepared for: present alike, same dtype, shape and place. */
static cx_status check_arg(const cx_op_call *c, int k, const cx_tensor *t) {
  const cx_tensor *like = &c->like[k];
  const char *what = k < c->n_in ? "input" : "output";
  int i = k < c->n_in ? k : k - c->n_in;
  char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
  if (!like->data && !t->data) return CX_OK;
  if (!like->data || !t->data)
    return cx_fail(CX_ERR_ARG, "op call '%s': %s %d is %s", node_of(c)->name, what, i,
                   t->data ? "given, but was omitted at create" : "missing");
  if (t->dtype != like->dtype || !cx_shape_equal(&t->shape, &like->shape))
    return cx_fail(CX_ERR_SHAPE, "op call '%s': %s %d is %s %s; it was made for %s %s",
                   node_of(c)->name, what, i, cx_dtype_name(t->dtype), cx_shape_str(&t->shape, a),
                   cx_dtype_name(like->dtype), cx_shape_str(&like->shape, b));
  if (!cx_tensor_is_contiguous(t) || t->device.kind != c->b->device)
    return cx_fail(CX_ERR_ARG, "op call '%s': %s %d must be a contiguous tensor of the %s "
                   "backend", node_of(c)->name, what, i, c->b->name);
  return CX_OK;
}

static cx_status check_args(const cx_op_call *c, const cx_tensor *in, const cx_tensor *out) {
  for (int k = 0; k < c->n_in; k++) CX_TRY(check_arg(c, k, &in[k]));
  for (int k = 0; k < c->n_out; k++) CX_TRY(check_arg(c, c->n_in + k, &out[k]));
  return CX_OK;
}

static cx_status prepare(cx_op_call *c, const cx_op_call_desc *d) {
  const cx_node *n = node_of(c);
  c->k = c->b->find_kernel(c->b, n, d->in, d->n_in);
  if (!c->k)
    return cx_fail(CX_ERR_UNSUPPORTED, "op call '%s': the %s backend has no kernel for %s",
                   n->name, c->b->name, d->op);
  size_t scratch = 0;
  if (c->k->prepare) {
    cx_kernel_args a = args_of(c, d->in, d->out);
    cx_status s = c->k->prepare(&a, &c->state, &scratch);
    if (s != CX_OK) {
      if (!strstr(cx_last_error(), n->name)) cx_error_prefix("op call '%s' (%s)", n->name, d->op);
      return s;
    }
  }
  if (scratch && !(c->scratch = c->b->alloc(scratch)))
    return cx_fail(CX_ERR_NOMEM, "op call '%s': cannot allocate %zu scratch bytes", n->name,
                   scratch);
  return CX_OK;
}

static cx_status create(cx_op_call *c, const cx_op_call_desc *d) {
  const char *name = d->name ? d->name : d->op;
  const cx_op_def *def = cx_op_find(d->op);
  if (!def) return cx_fail(CX_ERR_ARG, "op call '%s': no op '%s'", name, d->op);
  if (d->n_in < 0 || d->n_in > MAX_ARGS || d->n_out < 0 || d->n_out > MAX_ARGS)
    return cx_fail(CX_ERR_ARG, "op call '%s': %d inputs and %d outputs; at most %d each", name,
                   d->n_in, d->n_out, MAX_ARGS);
  CX_TRY(check_attrs(def, name, d));
  CX_TRY(build_node(c, d, name));
  c->n_in = d->n_in;
  c->n_out = d->n_out;
  for (int k = 0; k < d->n_in; k++) c->like[k] = d->in[k];
  for (int k = 0; k < d->n_out; k++) c->like[d->n_in + k] = d->out[k];
  CX_TRY(check_args(c, d->in, d->out));
  CX_TRY(infer(c, d));
  return prepare(c, d);
}

cx_status cx_op_call_create(const cx_backend *b, cx_stream *s, const cx_op_call_desc *d,
                            cx_op_call **out) {
  *out = NULL;
  cx_op_call *c = calloc(1, sizeof *c);
  if (!c) return cx_fail(CX_ERR_NOMEM, "out of memory");
  c->b = b;
  c->s = s;
  cx_status st = create(c, d);
  if (st != CX_OK) {
    cx_op_call_free(c);
    return st;
  }
  *out = c;
  return CX_OK;
}

cx_status cx_op_call_run(cx_op_call *c, const cx_tensor *in, const cx_tensor *out) {
  CX_TRY(check_args(c, in, out));
  cx_kernel_args a = args_of(c, in, out);
  cx_status s = c->k->run(&a);
  if (s != CX_OK && !strstr(cx_last_error(), node_of(c)->name))
    cx_error_prefix("op call '%s' (%s)", node_of(c)->name, node_of(c)->op->name);
  return s;
}

void cx_op_call_free(cx_op_call *c) {
  if (!c) return;
  if (c->k && c->k->release && c->state) c->k->release(c->state);
  if (c->scratch) c->b->free(c->scratch);
  cx_graph_free(c->g);
  free(c);
}
