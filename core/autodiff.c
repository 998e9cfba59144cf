/* Reverse-mode differentiation on the graph: walks the forward nodes backwards and asks each op's
 * gradient rule to add the nodes that compute its inputs' gradients. Gradients reaching a value
 * from several consumers are added with one Sum node. */
#include "autodiff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"

int cx_grad_node(const cx_grad_ctx *ctx, const char *op, const int *in, int n_in, int n_out) {
  char base[600];
  snprintf(base, sizeof base, "%s/grad/%s", ctx->g->nodes[ctx->node].name, op);
  char *name = cx_graph_unique_name(ctx->g, base);
  int node = cx_graph_node(ctx->g, op, name, in, n_in, n_out);
  free(name);
  return node;
}

int cx_grad_emit(const cx_grad_ctx *ctx, const char *op, const int *in, int n_in) {
  int n = cx_grad_node(ctx, op, in, n_in, 1);
  return n < 0 ? -1 : ctx->g->nodes[n].out[0];
}

void cx_grad_copy_attrs(const cx_grad_ctx *ctx, int node) {
  const cx_node *f = &ctx->g->nodes[ctx->node];
  for (int k = 0; k < f->n_attrs; k++) {
    const cx_attr *a = &f->attrs[k];
    switch (a->type) {
    case CX_ATTR_INT: cx_node_set_int(ctx->g, node, a->name, a->i); break;
    case CX_ATTR_FLOAT: cx_node_set_float(ctx->g, node, a->name, a->f); break;
    case CX_ATTR_INTS: cx_node_set_ints(ctx->g, node, a->name, a->ints, a->n); break;
    case CX_ATTR_FLOATS: cx_node_set_floats(ctx->g, node, a->name, a->floats, a->n); break;
    case CX_ATTR_STRING: cx_node_set_string(ctx->g, node, a->name, a->s); break;
    }
  }
}

int cx_grad_reduce_to(const cx_grad_ctx *ctx, int dy, const cx_shape *from, const cx_shape *to) {
  if (cx_shape_equal(from, to)) return dy;
  int n = cx_grad_node(ctx, "ReduceSumTo", &dy, 1, 1);
  if (n < 0) return -1;
  cx_node_set_ints(ctx->g, n, "shape", to->d, to->ndim);
  return ctx->g->nodes[n].out[0];
}

int cx_grad_scalar(const cx_grad_ctx *ctx, float v) {
  char base[560];
  snprintf(base, sizeof base, "%s/grad/scalar", ctx->g->nodes[ctx->node].name);
  char *name = cx_graph_unique_name(ctx->g, base);
  cx_shape s = {.ndim = 0};
  int id = cx_graph_const_f32(ctx->g, name, &s, &v);
  free(name);
  return id;
}

/* Per value: the gradient contributions collected so far. */
typedef struct contribs {
  int *v;
  int n, cap;
} contribs;

static void contrib_add(contribs *c, int value) {
  if (c->n == c->cap) {
    c->cap = c->cap ? c->cap * 2 : 4;
    c->v = realloc(c->v, sizeof(int) * (size_t)c->cap);
  }
  c->v[c->n++] = value;
}

/* One value holding the sum of all contributions (-1 when there are none). */
static int contrib_total(cx_graph *g, contribs *c, const char *value_name) {
  if (c->n == 0) return -1;
  if (c->n > 1) {
    char base[600];
    snprintf(base, sizeof base, "%s@gradsum", value_name);
    char *name = cx_graph_unique_name(g, base);
    int sum = cx_graph_op(g, "Sum", name, c->v, c->n);
    free(name);
    c->n = 1;
    c->v[0] = sum;
  }
  return c->v[0];
}

/* Which values depend on a parameter: only those need gradients. */
static bool *requires_grad(const cx_graph *g, int n_fwd) {
  bool *r = calloc((size_t)g->n_values + 1, 1);
  for (int v = 0; v < g->n_values; v++) r[v] = g->values[v].kind == CX_VALUE_PARAM;
  for (int i = 0; i < n_fwd; i++) {
    const cx_node *n = &g->nodes[i];
    bool any = false;
    for (int k = 0; k < n->n_in; k++) any |= n->in[k] >= 0 && r[n->in[k]];
    if (n->op->flags & CX_OP_NO_GRAD) any = false;
    for (int k = 0; k < n->n_out; k++) r[n->out[k]] = any;
  }
  return r;
}

static cx_status grad_of_node(cx_graph *g, int i, contribs *acc, const bool *req,
                              const cx_shape *shapes) {
  int n_in = g->nodes[i].n_in, n_out = g->nodes[i].n_out;
  int dy[16], dx[16];
  bool need[16], any_dy = false, any_need = false;
  if (n_in > 16 || n_out > 16)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s': more than 16 inputs or outputs in training",
                   g->nodes[i].name);
  for (int k = 0; k < n_out; k++) {
    dy[k] = contrib_total(g, &acc[g->nodes[i].out[k]], g->values[g->nodes[i].out[k]].name);
    any_dy |= dy[k] >= 0;
  }
  for (int k = 0; k < n_in; k++) {
    int v = g->nodes[i].in[k];
    need[k] = v >= 0 && req[v];
    any_need |= need[k];
    dx[k] = -1;
  }
  if (!any_dy || !any_need) return CX_OK;
  CX_TRY(cx_graph_reserve(g, 64, 256)); /* the rule may hold pointers into g while it adds */
  const cx_node *n = &g->nodes[i];
  if (!n->op->grad)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): the op has no gradient, but a parameter "
                   "before it is trained", n->name, n->op->name);
  cx_grad_ctx ctx = {.g = g, .node = i, .dy = dy, .dx = dx, .need = need, .shape = shapes};
  cx_status s = n->op->grad(&ctx);
  if (s == CX_OK) s = cx_graph_status(g);
  if (s != CX_OK) {
    cx_error_prefix("gradient of node '%s' (%s)", g->nodes[i].name, g->nodes[i].op->name);
    return s;
  }
  for (int k = 0; k < n_in; k++)
    if (need[k] && dx[k] >= 0) contrib_add(&acc[g->nodes[i].in[k]], dx[k]);
  return CX_OK;
}

cx_status cx_autodiff(cx_graph *g, int n_fwd, const int *seed_values, const int *seed_grads,
                      int n_seeds, int *param_grad) {
  int n_values0 = g->n_values;
  bool *req = requires_grad(g, n_fwd);
  contribs *acc = calloc((size_t)n_values0 + 1, sizeof(contribs));
  cx_shape *shapes = malloc(sizeof(cx_shape) * ((size_t)n_values0 + 1));
  for (int v = 0; v < n_values0; v++) shapes[v] = g->values[v].shape;
  for (int k = 0; k < n_seeds; k++) contrib_add(&acc[seed_values[k]], seed_grads[k]);
  cx_status s = CX_OK;
  for (int i = n_fwd - 1; i >= 0 && s == CX_OK; i--) s = grad_of_node(g, i, acc, req, shapes);
  for (int v = 0; v < n_values0 && s == CX_OK; v++) {
    param_grad[v] = -1;
    if (g->values[v].kind == CX_VALUE_PARAM)
      param_grad[v] = contrib_total(g, &acc[v], g->values[v].name);
  }
  if (s == CX_OK) s = cx_graph_status(g);
  for (int v = 0; v < n_values0; v++) free(acc[v].v);
  free(acc);
  free(req);
  free(shapes);
  return s;
}
