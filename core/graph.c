#include "graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"

static char *dup(const char *s) {
  size_t n = strlen(s) + 1;
  char *r = malloc(n);
  if (r) memcpy(r, s, n);
  return r;
}

__attribute__((format(printf, 2, 3))) static void set_error(cx_graph *g, const char *fmt, ...) {
  if (g->status) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->error, sizeof g->error, fmt, ap);
  va_end(ap);
  g->status = CX_ERR_ARG;
}

static bool grow(void **p, int *cap, int need, size_t elem) {
  if (need <= *cap) return true;
  int c = *cap ? *cap * 2 : 16;
  while (c < need) c *= 2;
  void *q = realloc(*p, (size_t)c * elem);
  if (!q) return false;
  memset((char *)q + (size_t)*cap * elem, 0, (size_t)(c - *cap) * elem);
  *p = q;
  *cap = c;
  return true;
}

cx_graph *cx_graph_new(void) { return calloc(1, sizeof(cx_graph)); }

static void free_attr(cx_attr *a) {
  free(a->name);
  free(a->ints);
  free(a->floats);
  free(a->s);
}

static void free_node(cx_node *n) {
  free(n->name);
  free(n->in);
  free(n->out);
  for (int k = 0; k < n->n_attrs; k++) free_attr(&n->attrs[k]);
  free(n->attrs);
}

void cx_graph_free(cx_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n_values; i++) {
    free(g->values[i].name);
    free(g->values[i].init);
  }
  for (int i = 0; i < g->n_nodes; i++) free_node(&g->nodes[i]);
  free(g->values);
  free(g->nodes);
  free(g->outputs);
  free(g);
}

cx_status cx_graph_status(const cx_graph *g) {
  if (g->status) cx_fail(g->status, "%s", g->error);
  return g->status;
}

int cx_graph_find_value(const cx_graph *g, const char *name) {
  for (int i = g->n_values - 1; i >= 0; i--)
    if (strcmp(g->values[i].name, name) == 0) return i;
  return -1;
}

static int add_value(cx_graph *g, const char *name, cx_value_kind kind, cx_dtype dtype,
                     const cx_shape *shape) {
  if (g->status) return -1;
  if (!name || !*name) {
    set_error(g, "a value needs a non-empty name");
    return -1;
  }
  if (cx_graph_find_value(g, name) >= 0) {
    set_error(g, "value name '%s' is used twice", name);
    return -1;
  }
  if (!grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof(cx_value))) {
    set_error(g, "out of memory adding value '%s'", name);
    return -1;
  }
  cx_value *v = &g->values[g->n_values];
  *v = (cx_value){.name = dup(name), .kind = kind, .dtype = dtype, .producer = -1};
  if (shape) v->shape = *shape;
  return g->n_values++;
}

int cx_graph_input(cx_graph *g, const char *name, cx_dtype dtype, const cx_shape *shape) {
  return add_value(g, name, CX_VALUE_INPUT, dtype, shape);
}

int cx_graph_init(cx_graph *g, cx_value_kind kind, const char *name, cx_dtype dtype,
                  const cx_shape *shape, const void *data) {
  for (int i = 0; shape && i < shape->ndim; i++)
    if (shape->d[i] < 0) {
      set_error(g, "initializer '%s' has a negative dimension", name);
      return -1;
    }
  int id = add_value(g, name, kind, dtype, shape);
  if (id < 0) return -1;
  size_t bytes = (size_t)cx_shape_numel(shape) * cx_dtype_size(dtype);
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) {
    set_error(g, "out of memory for initializer '%s' (%zu bytes)", name, bytes);
    return -1;
  }
  if (data) memcpy(p, data, bytes);
  g->values[id].init = p;
  return id;
}

int cx_graph_param(cx_graph *g, const char *name, const cx_shape *shape, const float *data) {
  return cx_graph_init(g, CX_VALUE_PARAM, name, CX_F32, shape, data);
}

int cx_graph_const_f32(cx_graph *g, const char *name, const cx_shape *shape, const float *data) {
  return cx_graph_init(g, CX_VALUE_CONST, name, CX_F32, shape, data);
}

int cx_graph_const_s64(cx_graph *g, const char *name, int n, const int64_t *data) {
  cx_shape s = {.ndim = 1, .d = {n}};
  return cx_graph_init(g, CX_VALUE_CONST, name, CX_S64, &s, data);
}

void cx_graph_mark_output(cx_graph *g, int value) {
  if (g->status) return;
  if (value < 0 || value >= g->n_values) {
    set_error(g, "output value id %d does not exist", value);
    return;
  }
  if (!grow((void **)&g->outputs, &g->cap_outputs, g->n_outputs + 1, sizeof(int))) {
    set_error(g, "out of memory");
    return;
  }
  g->outputs[g->n_outputs++] = value;
}

int cx_graph_node(cx_graph *g, const char *op, const char *name, const int *in, int n_in,
                  int n_out) {
  return cx_graph_node_named(g, op, name, in, n_in, NULL, n_out);
}

int cx_graph_node_named(cx_graph *g, const char *op, const char *name, const int *in, int n_in,
                        const char *const *out_names, int n_out) {
  if (g->status) return -1;
  const cx_op_def *def = cx_op_find(op);
  if (!def) {
    set_error(g, "node '%s': unknown op '%s'", name, op);
    return -1;
  }
  if (n_in < def->min_in || n_in > def->max_in || n_out < def->min_out || n_out > def->max_out) {
    set_error(g, "node '%s' (%s): %d inputs and %d outputs given; the op takes %d..%d inputs and "
                 "%d..%d outputs", name, op, n_in, n_out, def->min_in, def->max_in, def->min_out,
              def->max_out);
    return -1;
  }
  for (int i = 0; i < n_in; i++)
    if (in[i] < -1 || in[i] >= g->n_values) {
      set_error(g, "node '%s' (%s): input %d is value id %d, which does not exist", name, op, i,
                in[i]);
      return -1;
    }
  if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(cx_node))) {
    set_error(g, "out of memory adding node '%s'", name);
    return -1;
  }
  int id = g->n_nodes;
  cx_node *n = &g->nodes[id];
  *n = (cx_node){.name = dup(name), .op = def, .n_in = n_in, .n_out = n_out};
  n->in = malloc(sizeof(int) * (size_t)(n_in ? n_in : 1));
  n->out = malloc(sizeof(int) * (size_t)n_out);
  if (n_in) memcpy(n->in, in, sizeof(int) * (size_t)n_in);
  g->n_nodes++;
  for (int k = 0; k < n_out; k++) {
    char buf[512];
    if (out_names && out_names[k] && *out_names[k]) snprintf(buf, sizeof buf, "%s", out_names[k]);
    else if (n_out == 1) snprintf(buf, sizeof buf, "%s", name);
    else snprintf(buf, sizeof buf, "%s:%d", name, k);
    int v = add_value(g, buf, CX_VALUE_ACT, CX_F32, NULL);
    g->nodes[id].out[k] = v;
    if (v < 0) return -1;
    g->values[v].producer = id;
  }
  return id;
}

int cx_graph_op(cx_graph *g, const char *op, const char *name, const int *in, int n_in) {
  int n = cx_graph_node(g, op, name, in, n_in, 1);
  return n < 0 ? -1 : g->nodes[n].out[0];
}

int cx_node_output(const cx_graph *g, int node, int k) {
  if (node < 0 || node >= g->n_nodes || k >= g->nodes[node].n_out) return -1;
  return g->nodes[node].out[k];
}

static cx_attr *new_attr(cx_graph *g, int node, const char *name, cx_attr_type type) {
  if (g->status || node < 0 || node >= g->n_nodes) return NULL;
  cx_node *n = &g->nodes[node];
  for (int k = 0; k < n->n_attrs; k++)
    if (strcmp(n->attrs[k].name, name) == 0) {
      free_attr(&n->attrs[k]);
      n->attrs[k] = (cx_attr){.name = dup(name), .type = type};
      return &n->attrs[k];
    }
  cx_attr *a = realloc(n->attrs, sizeof(cx_attr) * (size_t)(n->n_attrs + 1));
  if (!a) {
    set_error(g, "out of memory");
    return NULL;
  }
  n->attrs = a;
  n->attrs[n->n_attrs] = (cx_attr){.name = dup(name), .type = type};
  return &n->attrs[n->n_attrs++];
}

void cx_node_set_int(cx_graph *g, int node, const char *name, int64_t v) {
  cx_attr *a = new_attr(g, node, name, CX_ATTR_INT);
  if (a) a->i = v;
}

void cx_node_set_float(cx_graph *g, int node, const char *name, float v) {
  cx_attr *a = new_attr(g, node, name, CX_ATTR_FLOAT);
  if (a) a->f = v;
}

void cx_node_set_ints(cx_graph *g, int node, const char *name, const int64_t *v, int n) {
  cx_attr *a = new_attr(g, node, name, CX_ATTR_INTS);
  if (!a) return;
  a->n = n;
  a->ints = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  if (n) memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
}

void cx_node_set_floats(cx_graph *g, int node, const char *name, const float *v, int n) {
  cx_attr *a = new_attr(g, node, name, CX_ATTR_FLOATS);
  if (!a) return;
  a->n = n;
  a->floats = malloc(sizeof(float) * (size_t)(n ? n : 1));
  if (n) memcpy(a->floats, v, sizeof(float) * (size_t)n);
}

void cx_node_set_string(cx_graph *g, int node, const char *name, const char *v) {
  cx_attr *a = new_attr(g, node, name, CX_ATTR_STRING);
  if (a) a->s = dup(v);
}

const cx_attr *cx_node_attr(const cx_node *n, const char *name) {
  for (int k = 0; k < n->n_attrs; k++)
    if (strcmp(n->attrs[k].name, name) == 0) return &n->attrs[k];
  return NULL;
}

int64_t cx_node_int(const cx_node *n, const char *name, int64_t fallback) {
  const cx_attr *a = cx_node_attr(n, name);
  return a && a->type == CX_ATTR_INT ? a->i : fallback;
}

float cx_node_float(const cx_node *n, const char *name, float fallback) {
  const cx_attr *a = cx_node_attr(n, name);
  if (a && a->type == CX_ATTR_FLOAT) return a->f;
  if (a && a->type == CX_ATTR_INT) return (float)a->i;
  return fallback;
}

int cx_node_ints(const cx_node *n, const char *name, const int64_t **v) {
  const cx_attr *a = cx_node_attr(n, name);
  if (!a || a->type != CX_ATTR_INTS) return 0;
  *v = a->ints;
  return a->n;
}

int cx_node_floats(const cx_node *n, const char *name, const float **v) {
  const cx_attr *a = cx_node_attr(n, name);
  if (!a || a->type != CX_ATTR_FLOATS) return 0;
  *v = a->floats;
  return a->n;
}

const char *cx_node_string(const cx_node *n, const char *name, const char *fallback) {
  const cx_attr *a = cx_node_attr(n, name);
  return a && a->type == CX_ATTR_STRING ? a->s : fallback;
}

/* A node named s names its outputs s or s:k, so both forms must be free. */
static bool name_taken(const cx_graph *g, const char *s) {
  char first[600];
  snprintf(first, sizeof first, "%s:0", s);
  return cx_graph_find_value(g, s) >= 0 || cx_graph_find_value(g, first) >= 0;
}

char *cx_graph_unique_name(const cx_graph *g, const char *base) {
  size_t len = strlen(base) + 24;
  char *s = malloc(len);
  snprintf(s, len, "%s", base);
  for (int k = 1; name_taken(g, s); k++) snprintf(s, len, "%s_%d", base, k);
  return s;
}

static void copy_attr(cx_attr *dst, const cx_attr *src) {
  *dst = *src;
  dst->name = dup(src->name);
  dst->s = src->s ? dup(src->s) : NULL;
  dst->ints = NULL;
  dst->floats = NULL;
  if (src->ints) {
    dst->ints = malloc(sizeof(int64_t) * (size_t)(src->n ? src->n : 1));
    memcpy(dst->ints, src->ints, sizeof(int64_t) * (size_t)src->n);
  }
  if (src->floats) {
    dst->floats = malloc(sizeof(float) * (size_t)(src->n ? src->n : 1));
    memcpy(dst->floats, src->floats, sizeof(float) * (size_t)src->n);
  }
}

cx_graph *cx_graph_clone(const cx_graph *g) {
  cx_graph *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->values = calloc((size_t)(g->n_values + 1), sizeof(cx_value));
  c->nodes = calloc((size_t)(g->n_nodes + 1), sizeof(cx_node));
  c->outputs = calloc((size_t)(g->n_outputs + 1), sizeof(int));
  c->cap_values = g->n_values + 1;
  c->cap_nodes = g->n_nodes + 1;
  c->cap_outputs = g->n_outputs + 1;
  c->status = g->status;
  memcpy(c->error, g->error, sizeof c->error);
  for (int i = 0; i < g->n_values; i++) {
    cx_value *v = &c->values[i];
    *v = g->values[i];
    v->name = dup(v->name);
    if (v->init) {
      size_t bytes = (size_t)cx_shape_numel(&v->shape) * cx_dtype_size(v->dtype);
      v->init = malloc(bytes ? bytes : 1);
      memcpy(v->init, g->values[i].init, bytes);
    }
  }
  c->n_values = g->n_values;
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *s = &g->nodes[i];
    cx_node *n = &c->nodes[i];
    *n = *s;
    n->name = dup(s->name);
    n->in = malloc(sizeof(int) * (size_t)(s->n_in ? s->n_in : 1));
    n->out = malloc(sizeof(int) * (size_t)(s->n_out ? s->n_out : 1));
    memcpy(n->in, s->in, sizeof(int) * (size_t)s->n_in);
    memcpy(n->out, s->out, sizeof(int) * (size_t)s->n_out);
    n->attrs = calloc((size_t)(s->n_attrs ? s->n_attrs : 1), sizeof(cx_attr));
    for (int k = 0; k < s->n_attrs; k++) copy_attr(&n->attrs[k], &s->attrs[k]);
  }
  c->n_nodes = g->n_nodes;
  memcpy(c->outputs, g->outputs, sizeof(int) * (size_t)g->n_outputs);
  c->n_outputs = g->n_outputs;
  return c;
}

cx_status cx_graph_validate(const cx_graph *g) {
  CX_TRY(cx_graph_status(g));
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++) {
      int v = n->in[k];
      if (v < -1 || v >= g->n_values)
        return cx_fail(CX_ERR_FORMAT, "node '%s' (%s): input %d names no value", n->name,
                       n->op->name, k);
      if (v >= 0 && g->values[v].kind == CX_VALUE_ACT && g->values[v].producer < 0)
        return cx_fail(CX_ERR_FORMAT, "node '%s' (%s): input '%s' is produced by no node", n->name,
                       n->op->name, g->values[v].name);
    }
  }
  /* Kahn's algorithm: a node left over is on a cycle. */
  int *pending = calloc((size_t)g->n_nodes + 1, sizeof(int));
  int *queue = malloc(sizeof(int) * ((size_t)g->n_nodes + 1));
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int v = g->nodes[i].in[k];
      if (v >= 0 && g->values[v].producer >= 0) pending[i]++;
    }
  int head = 0, tail = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!pending[i]) queue[tail++] = i;
  while (head < tail) {
    const cx_node *n = &g->nodes[queue[head++]];
    for (int o = 0; o < n->n_out; o++)
      for (int j = 0; j < g->n_nodes; j++)
        for (int k = 0; k < g->nodes[j].n_in; k++)
          if (g->nodes[j].in[k] == n->out[o] && --pending[j] == 0) queue[tail++] = j;
  }
  cx_status s = CX_OK;
  if (tail < g->n_nodes) {
    for (int i = 0; i < g->n_nodes; i++)
      if (pending[i]) {
        s = cx_fail(CX_ERR_FORMAT, "the graph has a cycle through node '%s' (%s)",
                    g->nodes[i].name, g->nodes[i].op->name);
        break;
      }
  }
  free(pending);
  free(queue);
  return s;
}

/* Drops the activation values no node produces or reads, renumbering the rest (order kept). */
static cx_status drop_orphans(cx_graph *g) {
  int nv = g->n_values;
  int *id = malloc(sizeof(int) * ((size_t)nv + 1));
  bool *used = calloc((size_t)nv + 1, 1);
  if (!id || !used) {
    free(id), free(used);
    return cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] >= 0) used[g->nodes[i].in[k]] = true;
  for (int k = 0; k < g->n_outputs; k++) used[g->outputs[k]] = true;
  int kept = 0;
  for (int v = 0; v < nv; v++) {
    cx_value *x = &g->values[v];
    if (x->kind == CX_VALUE_ACT && x->producer < 0 && !used[v]) {
      free(x->name);
      free(x->init);
      id[v] = -1;
      continue;
    }
    id[v] = kept;
    g->values[kept++] = *x;
  }
  g->n_values = kept;
  for (int i = 0; i < g->n_nodes; i++) {
    cx_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++) n->in[k] = n->in[k] < 0 ? -1 : id[n->in[k]];
    for (int k = 0; k < n->n_out; k++) n->out[k] = id[n->out[k]];
  }
  for (int k = 0; k < g->n_outputs; k++) g->outputs[k] = id[g->outputs[k]];
  free(id);
  free(used);
  return CX_OK;
}

cx_status cx_graph_remove_nodes(cx_graph *g, const bool *dead) {
  int kept = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    if (dead[i]) {
      free_node(&g->nodes[i]);
      continue;
    }
    g->nodes[kept++] = g->nodes[i];
  }
  g->n_nodes = kept;
  for (int v = 0; v < g->n_values; v++) g->values[v].producer = -1;
  for (int i = 0; i < kept; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++) g->values[g->nodes[i].out[k]].producer = i;
  return drop_orphans(g);
}

int64_t cx_graph_param_count(const cx_graph *g) {
  int64_t n = 0;
  for (int i = 0; i < g->n_values; i++)
    if (g->values[i].kind == CX_VALUE_PARAM) n += cx_shape_numel(&g->values[i].shape);
  return n;
}

cx_status cx_graph_reserve(cx_graph *g, int nodes, int values) {
  if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + nodes, sizeof(cx_node)) ||
      !grow((void **)&g->values, &g->cap_values, g->n_values + values, sizeof(cx_value)))
    return cx_fail(CX_ERR_NOMEM, "out of memory growing the graph");
  return CX_OK;
}
