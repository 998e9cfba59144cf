/* Which weights are prunable: the weights of Conv, Gemm and MatMul nodes that are initializers,
 * chosen by default or by node-name globs. Magnitude, N:M and channel pruning all start from
 * this one list. */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "../core/graph_shapes.h"
#include "../core/op.h"
#include "prune.h"

static cx_status nomem(void) { return cx_fail(CX_ERR_NOMEM, "out of memory"); }

static const char *node_name(const cx_node *n) { return n->name ? n->name : ""; }

static bool is_linear(const cx_node *n) {
  return !strcmp(n->op->name, "Gemm") || !strcmp(n->op->name, "MatMul");
}

/* The weight's [outer, channels, inner] view (prune.h); false when the node's weight is not a
 * prunable f32 initializer of a shape we know. */
static bool weight_layout(const cx_graph *g, const cx_node *n, int64_t dims[3]) {
  bool conv = !strcmp(n->op->name, "Conv");
  if ((!conv && !is_linear(n)) || n->n_in < 2 || n->in[1] < 0) return false;
  const cx_value *w = &g->values[n->in[1]];
  if ((w->kind != CX_VALUE_PARAM && w->kind != CX_VALUE_CONST) || w->dtype != CX_F32 || !w->init)
    return false;
  const cx_shape *s = &w->shape;
  if (conv) {
    if (s->ndim < 3) return false;
    dims[0] = s->d[0], dims[1] = s->d[1], dims[2] = 1;
    for (int d = 2; d < s->ndim; d++) dims[2] *= s->d[d];
    return true;
  }
  if (s->ndim != 2) return false;
  bool trans_b = !strcmp(n->op->name, "Gemm") && cx_node_int(n, "transB", 0);
  if (trans_b) dims[0] = s->d[0], dims[1] = s->d[1], dims[2] = 1; /* [N, K] */
  else dims[0] = 1, dims[1] = s->d[0], dims[2] = s->d[1];          /* [K, N] */
  return true;
}

/* The nodes on the way to value v (its producer and theirs), marked in on[]. */
static void mark_ancestors(const cx_graph *g, int v, bool *on, int *stack) {
  int top = 0;
  if (v >= 0 && g->values[v].producer >= 0) stack[top++] = g->values[v].producer;
  while (top > 0) {
    int k = stack[--top];
    if (on[k]) continue;
    on[k] = true;
    for (int i = 0; i < g->nodes[k].n_in; i++) {
      int in = g->nodes[k].in[i];
      int p = in >= 0 ? g->values[in].producer : -1;
      if (p >= 0 && !on[p]) stack[top++] = p;
    }
  }
}

/* The default exclusions: the topologically first Conv and the last Gemm/MatMul that feeds the
 * first output, among the candidates. */
static cx_status find_ends(const cx_graph *g, const bool *cand, int *first_conv, int *classifier) {
  *first_conv = *classifier = -1;
  int n = g->n_nodes;
  int *order = malloc(sizeof *order * (size_t)(n + 1)), *stack = NULL;
  bool *on = calloc((size_t)n + 1, sizeof *on);
  /* each node is pushed at most once per input, so the stack holds every input at most */
  int64_t inputs = 1;
  for (int k = 0; k < n; k++) inputs += g->nodes[k].n_in;
  stack = malloc(sizeof *stack * (size_t)(inputs + 1));
  cx_status s = order && on && stack ? cx_graph_topo_order(g, order) : nomem();
  if (s == CX_OK) {
    if (g->n_outputs > 0) mark_ancestors(g, g->outputs[0], on, stack);
    for (int i = 0; i < n; i++) {
      int k = order[i];
      if (!cand[k]) continue;
      if (*first_conv < 0 && !strcmp(g->nodes[k].op->name, "Conv")) *first_conv = k;
      if (on[k] && is_linear(&g->nodes[k])) *classifier = k;
    }
  }
  free(order), free(on), free(stack);
  return s;
}

static bool matches(const char *const *globs, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (fnmatch(globs[i], name, 0) == 0) return true;
  return false;
}

/* Every glob must name at least one candidate: a typo is an error, not a silent no-op. */
static cx_status check_globs(const cx_graph *g, const bool *cand, const char *key,
                             const char *const *globs, int n_globs, const char *model) {
  for (int i = 0; i < n_globs; i++) {
    bool hit = false;
    for (int k = 0; k < g->n_nodes && !hit; k++)
      hit = cand[k] && fnmatch(globs[i], node_name(&g->nodes[k]), 0) == 0;
    if (!hit)
      return cx_fail(CX_ERR_ARG, "%s: prune %s glob '%s' matches no Conv, Gemm or MatMul node "
                     "with a weight initializer (`compress inspect` lists the node names)", model,
                     key, globs[i]);
  }
  return CX_OK;
}

static cx_status add_target(cx_prune_targets *out, const cx_graph *g, int k, const int64_t *d) {
  const cx_node *n = &g->nodes[k];
  cx_prune_target t = {.node = k, .weight = n->in[1], .outer = d[0], .channels = d[1],
                       .inner = d[2]};
  t.node_name = strdup(node_name(n));
  t.weight_name = strdup(g->values[n->in[1]].name);
  if (!t.node_name || !t.weight_name) return free(t.node_name), free(t.weight_name), nomem();
  out->t[out->n++] = t;
  return CX_OK;
}

/* The candidates chosen by the defaults or the globs, each weight once. */
static cx_status choose(const cx_graph *g, const cx_prune_config *c, const bool *cand,
                        int64_t (*dims)[3], cx_prune_targets *out) {
  int first_conv, classifier;
  CX_TRY(find_ends(g, cand, &first_conv, &classifier));
  bool *taken = calloc((size_t)g->n_values + 1, sizeof *taken);
  out->t = calloc((size_t)g->n_nodes + 1, sizeof *out->t);
  if (!taken || !out->t) return free(taken), nomem();
  cx_status s = CX_OK;
  for (int k = 0; k < g->n_nodes && s == CX_OK; k++) {
    const char *name = node_name(&g->nodes[k]);
    bool in = c->n_include > 0 ? matches(c->include, c->n_include, name)
                               : k != first_conv && k != classifier;
    if (!cand[k] || !in || matches(c->exclude, c->n_exclude, name) || taken[g->nodes[k].in[1]])
      continue;
    taken[g->nodes[k].in[1]] = true;
    s = add_target(out, g, k, dims[k]);
  }
  free(taken);
  return s;
}

cx_status cx_prune_select(const cx_graph *g, const cx_prune_config *c, const char *model,
                          cx_prune_targets *out) {
  *out = (cx_prune_targets){0};
  if (!model) model = "the model";
  bool *cand = calloc((size_t)g->n_nodes + 1, sizeof *cand);
  int64_t(*dims)[3] = calloc((size_t)g->n_nodes + 1, sizeof *dims);
  if (!cand || !dims) return free(cand), free(dims), nomem();
  for (int k = 0; k < g->n_nodes; k++) cand[k] = weight_layout(g, &g->nodes[k], dims[k]);
  cx_status s = check_globs(g, cand, "include", c->include, c->n_include, model);
  if (s == CX_OK) s = check_globs(g, cand, "exclude", c->exclude, c->n_exclude, model);
  if (s == CX_OK) s = choose(g, c, cand, dims, out);
  if (s == CX_OK && out->n == 0)
    s = cx_fail(CX_ERR_ARG, "%s: nothing to prune: no Conv, Gemm or MatMul weight is left once "
                "the first convolution and the classifier (or the include/exclude globs) are "
                "set aside", model);
  free(cand), free(dims);
  if (s != CX_OK) cx_prune_targets_free(out);
  return s;
}

void cx_prune_targets_free(cx_prune_targets *t) {
  for (int i = 0; t->t && i < t->n; i++) free(t->t[i].node_name), free(t->t[i].weight_name);
  free(t->t);
  *t = (cx_prune_targets){0};
}
