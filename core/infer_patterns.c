/* cx_infer_patterns: exporters' decompositions of GELU and LayerNorm back into one op each. */
#include "infer_patterns.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuse.h"
#include "op.h"

typedef struct matcher {
  cx_graph *g;
  int *readers; /* node inputs reading each value, graph outputs counted */
  int *reader;  /* the last node found reading it */
  bool *dead;
} matcher;

static bool is_op(const cx_node *n, const char *op) { return !strcmp(n->op->name, op); }

/* The node that alone reads value v (which is no graph output), when it is an `op`; else -1. */
static int sole_reader(const matcher *m, int v, const char *op) {
  if (v < 0 || m->readers[v] != 1) return -1;
  int i = m->reader[v];
  return !m->dead[i] && is_op(&m->g->nodes[i], op) ? i : -1;
}

/* Node i's operand other than v (a two-input node reading v), or -1. */
static int other_input(const cx_node *n, int v) {
  if (n->n_in != 2) return -1;
  if (n->in[0] == v) return n->in[1];
  return n->in[1] == v ? n->in[0] : -1;
}

static bool scalar_near(const matcher *m, int v, float want) {
  float c;
  return cx_fuse_const_scalar(m->g, v, &c) && fabsf(c - want) <= 1e-6f * fabsf(want);
}

/* Node i becomes op(in[0..n)) writing its own output; its old inputs are dropped. */
static cx_status become(matcher *m, int i, const char *op, const int *in, int n) {
  cx_node *node = &m->g->nodes[i];
  int *copy = realloc(node->in, sizeof(int) * (size_t)n);
  if (!copy) return cx_fail(CX_ERR_NOMEM, "inference patterns: out of memory");
  memcpy(copy, in, sizeof(int) * (size_t)n);
  node->in = copy;
  node->n_in = n;
  node->op = cx_op_find(op);
  return node->op ? CX_OK : cx_fail(CX_ERR_UNSUPPORTED, "inference patterns: no op %s", op);
}

static void drop(matcher *m, const int *nodes, int n, int *count) {
  for (int k = 0; k < n; k++) m->dead[nodes[k]] = true;
  *count += n;
}

/* GELU from its Div (or Mul) node d: x / √2 → Erf → + 1 → · x → · 0.5. */
static cx_status gelu_at(matcher *m, int d, int *count) {
  const cx_node *dn = &m->g->nodes[d];
  bool div = is_op(dn, "Div"), mul = is_op(dn, "Mul");
  if ((!div && !mul) || dn->n_in != 2) return CX_OK;
  int x = dn->in[0];
  if (!(div ? scalar_near(m, dn->in[1], sqrtf(2)) : scalar_near(m, dn->in[1], sqrtf(0.5f))))
    return CX_OK;
  int erf = sole_reader(m, dn->out[0], "Erf");
  int add = erf < 0 ? -1 : sole_reader(m, m->g->nodes[erf].out[0], "Add");
  if (add < 0 || !scalar_near(m, other_input(&m->g->nodes[add], m->g->nodes[erf].out[0]), 1))
    return CX_OK;
  int m1 = sole_reader(m, m->g->nodes[add].out[0], "Mul");
  if (m1 < 0 || other_input(&m->g->nodes[m1], m->g->nodes[add].out[0]) != x) return CX_OK;
  int m2 = sole_reader(m, m->g->nodes[m1].out[0], "Mul");
  if (m2 < 0 || !scalar_near(m, other_input(&m->g->nodes[m2], m->g->nodes[m1].out[0]), 0.5f))
    return CX_OK;
  CX_TRY(become(m, m2, "Gelu", &x, 1));
  drop(m, (int[]){d, erf, add, m1}, 4, count);
  return CX_OK;
}

/* Whether reduction node r averages over the last axis of its input alone, keeping it. */
static bool mean_last_axis(const matcher *m, const cx_node *r) {
  const int64_t *axes = NULL;
  int rank = m->g->values[r->in[0]].shape.ndim;
  if (!is_op(r, "ReduceMean") || r->n_in != 1 || cx_node_int(r, "keepdims", 1) != 1 ||
      cx_node_ints(r, "axes", &axes) != 1)
    return false;
  return axes[0] == -1 || axes[0] == rank - 1;
}

/* An affine parameter of LayerNorm over x's last axis: an f32 initializer of x's last dim. */
static bool affine_of(const matcher *m, int v, int x) {
  if (v < 0) return false;
  const cx_value *p = &m->g->values[v], *xv = &m->g->values[x];
  return (p->kind == CX_VALUE_PARAM || p->kind == CX_VALUE_CONST) && p->dtype == CX_F32 &&
         p->shape.ndim == 1 && xv->shape.ndim >= 1 &&
         p->shape.d[0] == xv->shape.d[xv->shape.ndim - 1];
}

/* LayerNorm from its first ReduceMean r1 (of x): the nine nodes the module's export writes. */
static cx_status layer_norm_at(matcher *m, int r1, int *count) {
  const cx_graph *g = m->g;
  if (!mean_last_axis(m, &g->nodes[r1])) return CX_OK;
  int x = g->nodes[r1].in[0], mean = g->nodes[r1].out[0];
  int sub = sole_reader(m, mean, "Sub");
  if (sub < 0 || g->nodes[sub].in[0] != x || g->nodes[sub].in[1] != mean) return CX_OK;
  int d = g->nodes[sub].out[0];
  int pow = -1, div = -1; /* d's two readers */
  for (int i = 0; i < g->n_nodes && m->readers[d] == 2; i++) {
    const cx_node *n = &g->nodes[i];
    if (m->dead[i] || n->n_in != 2 || n->in[0] != d) continue;
    if (is_op(n, "Pow") && scalar_near(m, n->in[1], 2)) pow = i;
    if (is_op(n, "Div")) div = i;
  }
  if (pow < 0 || div < 0) return CX_OK;
  int r2 = sole_reader(m, g->nodes[pow].out[0], "ReduceMean");
  if (r2 < 0 || !mean_last_axis(m, &g->nodes[r2])) return CX_OK;
  int add = sole_reader(m, g->nodes[r2].out[0], "Add");
  float eps;
  if (add < 0 || !cx_fuse_const_scalar(g, other_input(&g->nodes[add], g->nodes[r2].out[0]), &eps))
    return CX_OK;
  int sq = sole_reader(m, g->nodes[add].out[0], "Sqrt");
  if (sq < 0 || sole_reader(m, g->nodes[sq].out[0], "Div") != div ||
      g->nodes[div].in[1] != g->nodes[sq].out[0])
    return CX_OK;
  int mul = sole_reader(m, g->nodes[div].out[0], "Mul");
  int gamma = mul < 0 ? -1 : other_input(&g->nodes[mul], g->nodes[div].out[0]);
  if (mul < 0 || !affine_of(m, gamma, x)) return CX_OK;
  int bias = sole_reader(m, g->nodes[mul].out[0], "Add");
  int beta = bias < 0 ? -1 : other_input(&g->nodes[bias], g->nodes[mul].out[0]);
  if (bias < 0 || !affine_of(m, beta, x)) return CX_OK;
  CX_TRY(become(m, bias, "LayerNormalization", (int[]){x, gamma, beta}, 3));
  cx_node_set_int(m->g, bias, "axis", -1);
  cx_node_set_float(m->g, bias, "epsilon", eps);
  drop(m, (int[]){r1, sub, pow, r2, add, sq, div, mul}, 8, count);
  return cx_graph_status(m->g);
}

cx_status cx_infer_patterns(cx_graph *g, int *n_rewritten) {
  if (n_rewritten) *n_rewritten = 0;
  if (!cx_fuse_enabled()) return CX_OK;
  matcher m = {g, calloc((size_t)g->n_values + 1, sizeof(int)),
               calloc((size_t)g->n_values + 1, sizeof(int)),
               calloc((size_t)g->n_nodes + 1, sizeof(bool))};
  cx_status s = CX_OK;
  if (!m.readers || !m.reader || !m.dead)
    s = cx_fail(CX_ERR_NOMEM, "inference patterns: out of memory");
  int count = 0;
  if (s == CX_OK) {
    cx_fuse_count_readers(g, m.readers, m.reader);
    for (int i = 0; s == CX_OK && i < g->n_nodes; i++) {
      if (m.dead[i]) continue;
      s = is_op(&g->nodes[i], "ReduceMean") ? layer_norm_at(&m, i, &count) : gelu_at(&m, i, &count);
    }
  }
  if (s == CX_OK && count) s = cx_graph_remove_nodes(g, m.dead);
  free(m.readers);
  free(m.reader);
  free(m.dead);
  if (n_rewritten) *n_rewritten = count;
  return s;
}
