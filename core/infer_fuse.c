/* cx_infer_fuse: Conv / Gemm / MatMul with the residual or bias Add and the activation after
 * them, as one node. */
#include "infer_fuse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuse.h"
#include "op.h"

/* The live nodes reading value v, up to `max` of them into who[]; returns how many read it. */
static int readers_of(const cx_graph *g, const bool *dead, int v, int *who, int max) {
  int count = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    if (dead[i]) continue;
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == v) {
        if (count < max) who[count] = i;
        count++;
        break;
      }
  }
  return count;
}

static bool is_op(const cx_node *n, const char *op) { return !strcmp(n->op->name, op); }

static bool f32_act(const cx_graph *g, int v) {
  return v >= 0 && g->values[v].dtype == CX_F32 && g->values[v].kind == CX_VALUE_ACT;
}

/* The node a fusion starts from. */
typedef enum base { BASE_CONV, BASE_GEMM, BASE_MATMUL } base;

/* What one fused node takes on: the residual operand or the bias, the activation and its
 * parameters. */
typedef struct fusion {
  int sum;           /* Conv: S, or -1 */
  int bias;          /* MatMul: the added bias, or -1 */
  const char *act;   /* NULL: none */
  float alpha, beta, lo, hi;
  bool has_alpha, has_beta;
} fusion;

/* Activation node a reading y as its only data input, taken into f; false when it is none the
 * fused ops apply. */
static bool take_activation(const cx_graph *g, const cx_node *a, int y, fusion *f) {
  if (a->n_in < 1 || a->in[0] != y || a->n_out != 1) return false;
  static const char *const simple[] = {"Relu", "Sigmoid", "HardSwish", "Tanh", NULL};
  for (int k = 0; simple[k]; k++)
    if (is_op(a, simple[k]) && a->n_in == 1) {
      f->act = simple[k];
      return true;
    }
  if (is_op(a, "Gelu") && !strcmp(cx_node_string(a, "approximate", "none"), "none")) {
    f->act = "Gelu";
    return true;
  }
  if (is_op(a, "LeakyRelu") || is_op(a, "HardSigmoid")) {
    f->act = a->op->name;
    f->has_alpha = cx_node_attr(a, "alpha") != NULL;
    f->has_beta = cx_node_attr(a, "beta") != NULL;
    f->alpha = cx_node_float(a, "alpha", 0);
    f->beta = cx_node_float(a, "beta", 0);
    return true;
  }
  if (is_op(a, "Clip") && cx_fuse_clamp_of(g, a, &f->lo, &f->hi)) {
    f->act = "Clip";
    return true;
  }
  return false;
}

/* A gate g(x) whose product x·g(x) is an activation the fused ops apply: Sigmoid (Swish), or
 * HardSigmoid with alpha 1/6 and beta 1/2 (x·clamp(x/6 + 1/2, 0, 1) is HardSwish). */
static bool is_gate(const cx_node *n) {
  if (is_op(n, "Sigmoid")) return true;
  return is_op(n, "HardSigmoid") && fabsf(cx_node_float(n, "alpha", 0.2f) - 1.0f / 6) < 1e-6f &&
         cx_node_float(n, "beta", 0.5f) == 0.5f;
}

/* The Add node r of *y and another value, taken into f as a Conv's residual S (of y's shape) or
 * a MatMul's bias (an f32 initializer [N], N y's last dimension); false when it is neither. */
static bool take_add(const cx_graph *g, const cx_node *r, int y, base b, fusion *f) {
  int s = r->in[0] == y ? r->in[1] : r->in[0];
  const cx_value *sv = &g->values[s], *yv = &g->values[y];
  if (s == y || !f32_act(g, r->out[0]) || sv->dtype != CX_F32 ||
      !cx_shape_equal(&g->values[r->out[0]].shape, &yv->shape))
    return false;
  if (b == BASE_CONV) {
    if (!cx_shape_equal(&sv->shape, &yv->shape)) return false;
    f->sum = s;
    return true;
  }
  bool init = sv->kind == CX_VALUE_PARAM || sv->kind == CX_VALUE_CONST;
  if (!init || sv->shape.ndim != 1 || sv->shape.d[0] != yv->shape.d[yv->shape.ndim - 1])
    return false;
  f->bias = s;
  return true;
}

/* Follows value *y (read only by the next node) through an Add (Conv: the residual; MatMul: the
 * bias; before any activation) and one activation; marks what it swallows dead (counted in
 * *count) and leaves in *y the value the fused node writes. */
static void follow(const cx_graph *g, const int *readers, bool *dead, base b, int *y, fusion *f,
                   int *count) {
  for (;;) {
    int who[2];
    bool out = false;
    for (int k = 0; k < g->n_outputs; k++) out = out || g->outputs[k] == *y;
    int n = out ? 0 : readers_of(g, dead, *y, who, 2);
    if (n == 1 && readers[*y] == 1) {
      const cx_node *r = &g->nodes[who[0]];
      if (b != BASE_GEMM && f->sum < 0 && f->bias < 0 && !f->act && is_op(r, "Add") &&
          r->n_in == 2) {
        if (!take_add(g, r, *y, b, f)) return;
      } else if (f->act || !take_activation(g, r, *y, f)) {
        return;
      }
      dead[who[0]] = true;
      (*count)++;
      *y = r->out[0];
      continue;
    }
    /* Swish: y read by a Sigmoid and by the Mul of y by that Sigmoid's output alone; HardSwish
     * likewise with HardSigmoid(alpha 1/6, beta 1/2), as PyTorch exports it below opset 14 */
    if (n != 2 || readers[*y] != 2 || f->act) return;
    int sig = is_gate(&g->nodes[who[0]]) ? who[0] : who[1], mul = who[0] + who[1] - sig;
    const cx_node *sn = &g->nodes[sig], *mn = &g->nodes[mul];
    if (!is_gate(sn) || !is_op(mn, "Mul") || sn->n_in != 1 || sn->in[0] != *y || mn->n_in != 2)
      return;
    int sv = sn->out[0];
    bool pair = (mn->in[0] == *y && mn->in[1] == sv) || (mn->in[1] == *y && mn->in[0] == sv);
    if (!pair || readers[sv] != 1 || !f32_act(g, mn->out[0])) return;
    for (int k = 0; k < g->n_outputs; k++)
      if (g->outputs[k] == sv) return;
    dead[sig] = dead[mul] = true;
    *count += 2;
    f->act = is_op(sn, "Sigmoid") ? "Swish" : "HardSwish";
    *y = mn->out[0];
    return;
  }
}

/* Sets input k of node n to v (-1 for the ones added before it). */
static cx_status set_input(cx_node *n, int k, int v) {
  if (k >= n->n_in) {
    int *in = realloc(n->in, sizeof(int) * (size_t)(k + 1));
    if (!in) return cx_fail(CX_ERR_NOMEM, "inference fusion: out of memory");
    for (int j = n->n_in; j < k; j++) in[j] = -1;
    n->in = in;
    n->n_in = k + 1;
  }
  n->in[k] = v;
  return CX_OK;
}

/* Node i becomes its fused form writing value y, with S as input 3 (Conv) or the bias as input
 * 2 (MatMul), and the activation's attributes. */
static cx_status rewrite(cx_graph *g, int i, int y, base b, const fusion *f, bool frozen) {
  cx_node *n = &g->nodes[i];
  static const char *const fused[] = {"ConvFused", "GemmFused", "MatMulFused"};
  n->op = cx_op_find(fused[b]);
  if (f->sum >= 0) CX_TRY(set_input(n, 3, f->sum));
  if (f->bias >= 0) CX_TRY(set_input(n, 2, f->bias));
  g->values[n->out[0]].producer = -1;
  n->out[0] = y;
  g->values[y].producer = i;
  if (f->act) cx_node_set_string(g, i, "activation", f->act);
  if (f->has_alpha) cx_node_set_float(g, i, "act_alpha", f->alpha);
  if (f->has_beta) cx_node_set_float(g, i, "act_beta", f->beta);
  if (f->act && !strcmp(f->act, "Clip")) {
    if (f->lo > -INFINITY) cx_node_set_float(g, i, "act_min", f->lo);
    if (f->hi < INFINITY) cx_node_set_float(g, i, "act_max", f->hi);
  }
  int w = n->in[1];
  bool init = w >= 0 && (g->values[w].kind == CX_VALUE_PARAM || g->values[w].kind == CX_VALUE_CONST);
  if (b == BASE_CONV && frozen && init) cx_node_set_int(g, i, "frozen_weights", 1);
  return cx_graph_status(g);
}

/* Whether backend be has a kernel for op (probed with a node of that op alone). */
static bool backend_has(const cx_backend *be, const char *op) {
  cx_node probe = {.name = (char *)op, .op = cx_op_find(op)};
  return probe.op && be->find_kernel(be, &probe, NULL, 0) != NULL;
}

/* The fusion node n can start, or -1: a Conv, a Gemm, or a MatMul of a rank-2 initializer B
 * (a Linear layer) without transposes. */
static int base_of(const cx_graph *g, const cx_node *n) {
  if (n->n_out != 1 || !f32_act(g, n->out[0])) return -1;
  if (is_op(n, "Conv")) return BASE_CONV;
  if (is_op(n, "Gemm")) return BASE_GEMM;
  if (!is_op(n, "MatMul") || n->n_in != 2 || n->in[1] < 0) return -1;
  const cx_value *w = &g->values[n->in[1]];
  bool init = w->kind == CX_VALUE_PARAM || w->kind == CX_VALUE_CONST;
  return init && w->dtype == CX_F32 && w->shape.ndim == 2 && g->values[n->in[0]].shape.ndim >= 2
             ? BASE_MATMUL
             : -1;
}

static cx_status fuse_all(cx_graph *g, int *readers, bool *dead, int *count, bool frozen) {
  for (int i = 0; i < g->n_nodes; i++) {
    int b = dead[i] ? -1 : base_of(g, &g->nodes[i]);
    if (b < 0) continue;
    fusion f = {.sum = -1, .bias = -1, .lo = -INFINITY, .hi = INFINITY};
    int y = g->nodes[i].out[0];
    follow(g, readers, dead, (base)b, &y, &f, count);
    if (y != g->nodes[i].out[0]) CX_TRY(rewrite(g, i, y, (base)b, &f, frozen));
  }
  return CX_OK;
}

cx_status cx_infer_fuse(cx_graph *g, const cx_backend *be, bool frozen_weights, int *n_fused) {
  if (n_fused) *n_fused = 0;
  if (!cx_fuse_enabled() || !backend_has(be, "ConvFused") || !backend_has(be, "GemmFused") ||
      !backend_has(be, "MatMulFused"))
    return CX_OK;
  int *readers = calloc((size_t)g->n_values + 1, sizeof(int));
  bool *dead = calloc((size_t)g->n_nodes + 1, sizeof(bool));
  int count = 0;
  cx_status s = readers && dead ? CX_OK : cx_fail(CX_ERR_NOMEM, "inference fusion: out of memory");
  if (s == CX_OK) {
    cx_fuse_count_readers(g, readers, NULL);
    s = fuse_all(g, readers, dead, &count, frozen_weights);
  }
  if (s == CX_OK && count) s = cx_graph_remove_nodes(g, dead);
  free(readers);
  free(dead);
  if (n_fused) *n_fused = count;
  return s;
}

int cx_infer_fuse_accumulator(const cx_node *n) {
  return !strcmp(n->op->name, "ConvFused") && n->n_in > 3 && n->in[3] >= 0 ? 3 : -1;
}
