/* Which channels must be removed together (prune/channel.h): one rule per op kind ties channel
 * elements with union-find, anything else freezes what it touches. */
#include <stdlib.h>
#include <string.h>

#include "../core/graph_cost.h"
#include "../core/graph_shapes.h"
#include "../core/op.h"
#include "channel.h"

typedef struct ctx {
  cx_channel_groups *cg;
  const cx_graph *g;
  FILE *log;
  cx_shape *shape; /* batch 1 */
  int *parent;     /* union-find over elements */
  bool *frozen;    /* per element */
  int *readers;    /* per value: nodes reading it */
  cx_status status;
} ctx;

/* ---- union-find ---- */

static int find(ctx *c, int e) {
  while (c->parent[e] != e) e = c->parent[e] = c->parent[c->parent[e]];
  return e;
}

static void unite(ctx *c, int a, int b) {
  a = find(c, a), b = find(c, b);
  if (a == b) return;
  if (a > b) {
    int t = a;
    a = b;
    b = t;
  }
  c->parent[b] = a; /* the lower element is the root: units come out in element order */
}

static int elem(const ctx *c, int v, int64_t k) { return (int)(c->cg->elem_start[v] + k); }
static int64_t chans(const ctx *c, int v) { return v >= 0 ? c->cg->channels[v] : 0; }

/* Channel k of a ties channel k of b, for every k (same channel counts). */
static void tie_all(ctx *c, int a, int b) {
  for (int64_t k = 0; k < chans(c, a) && k < chans(c, b); k++)
    unite(c, elem(c, a, k), elem(c, b, k));
}

static void freeze_value(ctx *c, int v) {
  for (int64_t k = 0; k < chans(c, v); k++) c->frozen[elem(c, v, k)] = true;
}

/* Freezes every tracked input and output of node i and says which node and why. */
static void freeze_node(ctx *c, int i, const char *why) {
  const cx_node *n = &c->g->nodes[i];
  for (int k = 0; k < n->n_in; k++) freeze_value(c, n->in[k]);
  for (int k = 0; k < n->n_out; k++) freeze_value(c, n->out[k]);
  c->cg->n_frozen_nodes++;
  if (c->log)
    fprintf(c->log, "prune: node '%s' (%s): %s; the channels it touches are kept\n", n->name,
            n->op->name, why);
}

static bool is_init(const ctx *c, int v) {
  if (v < 0) return false;
  const cx_value *x = &c->g->values[v];
  return x->kind != CX_VALUE_ACT && x->kind != CX_VALUE_INPUT && x->init;
}

/* An initializer this node alone reads, which the rewrite may therefore change. */
static bool own_init(const ctx *c, int v) { return is_init(c, v) && c->readers[v] == 1; }

static void edit(ctx *c, cx_channel_edit_kind kind, int node, int value, int axis, int by) {
  cx_channel_groups *cg = c->cg;
  if (cg->n_edits == cg->cap_edits) {
    int cap = cg->cap_edits ? 2 * cg->cap_edits : 64;
    cx_channel_edit *e = realloc(cg->edits, (size_t)cap * sizeof *e);
    if (!e) {
      c->status = cx_fail(CX_ERR_NOMEM, "out of memory");
      return;
    }
    cg->edits = e, cg->cap_edits = cap;
  }
  cg->edits[cg->n_edits++] = (cx_channel_edit){kind, node, value, axis, by};
}

/* ---- the rules: each returns NULL when it handled the node, else why it cannot ---- */

static const char *rule_conv(ctx *c, int i) {
  const cx_node *n = &c->g->nodes[i];
  int x = n->in[0], w = n->in[1], b = n->n_in > 2 ? n->in[2] : -1, y = n->out[0];
  if (!own_init(c, w) || (b >= 0 && !own_init(c, b)))
    return "its weight or bias is computed or shared";
  const cx_shape *ws = &c->g->values[w].shape;
  int64_t groups = cx_node_int(n, "group", 1), cin = chans(c, x), cout = chans(c, y);
  if (ws->ndim < 3 || ws->d[0] != cout || ws->d[1] * groups != cin || cout % groups)
    return "its weight does not match its input and output channels";
  edit(c, CX_CHANNEL_SLICE, i, w, 0, y);
  if (b >= 0) edit(c, CX_CHANNEL_SLICE, i, b, 0, y);
  if (groups == 1) {
    edit(c, CX_CHANNEL_SLICE, i, w, 1, x);
    return NULL;
  }
  /* Grouped and depthwise: a group's input and output channels go as one, so every group left
   * keeps its full width and `group` counts the groups left. */
  int64_t gi = cin / groups, go = cout / groups;
  for (int64_t g = 0; g < groups; g++) {
    int root = elem(c, y, g * go);
    for (int64_t k = 0; k < gi; k++) unite(c, root, elem(c, x, g * gi + k));
    for (int64_t k = 1; k < go; k++) unite(c, root, elem(c, y, g * go + k));
  }
  edit(c, CX_CHANNEL_GROUPS, i, -1, 0, y);
  return NULL;
}

/* Gemm (transA 0) and MatMul of a [N, K] activation by a [K, M] (or transB [M, K]) initializer:
 * the activation's channels are the weight's K entries, the output's its M entries. */
static const char *rule_linear(ctx *c, int i) {
  const cx_node *n = &c->g->nodes[i];
  bool gemm = !strcmp(n->op->name, "Gemm");
  int a = n->in[0], w = n->in[1], b = gemm && n->n_in > 2 ? n->in[2] : -1, y = n->out[0];
  if (gemm && cx_node_int(n, "transA", 0)) return "transA is set";
  bool tb = gemm && cx_node_int(n, "transB", 0);
  const cx_shape *ws = &c->g->values[w].shape;
  if (c->shape[a].ndim != 2 || chans(c, a) == 0 || !own_init(c, w) || ws->ndim != 2 ||
      ws->d[tb ? 1 : 0] != chans(c, a) || ws->d[tb ? 0 : 1] != chans(c, y))
    return "it is not a [N, K] activation times its own [K, M] weight";
  edit(c, CX_CHANNEL_SLICE, i, w, tb ? 1 : 0, a);
  edit(c, CX_CHANNEL_SLICE, i, w, tb ? 0 : 1, y);
  if (b >= 0) {
    const cx_shape *bs = &c->g->values[b].shape;
    if (cx_shape_numel(bs) == 1) return NULL;
    if (!own_init(c, b) || bs->ndim < 1 || bs->ndim > 2 || bs->d[bs->ndim - 1] != chans(c, y) ||
        cx_shape_numel(bs) != chans(c, y))
      return "its bias is not its own [M] or [1, M] initializer";
    edit(c, CX_CHANNEL_SLICE, i, b, bs->ndim - 1, y);
  }
  return NULL;
}

static const char *rule_batch_norm(ctx *c, int i) {
  const cx_node *n = &c->g->nodes[i];
  if (n->n_out != 1 || n->n_in != 5) return "it is not an inference BatchNormalization";
  for (int k = 1; k < 5; k++)
    if (!own_init(c, n->in[k]) ||
        cx_shape_numel(&c->g->values[n->in[k]].shape) != chans(c, n->in[0]))
      return "its parameters are computed, shared or not one per channel";
  for (int k = 1; k < 5; k++) edit(c, CX_CHANNEL_SLICE, i, n->in[k], 0, n->in[0]);
  tie_all(c, n->in[0], n->out[0]);
  return NULL;
}

/* Channel-wise ops: output channel k is a function of input channel k alone. Further inputs
 * (Clip's bounds) must be constants without a channel axis. */
static const char *rule_channelwise(ctx *c, int i) {
  const cx_node *n = &c->g->nodes[i];
  for (int k = 1; k < n->n_in; k++)
    if (n->in[k] >= 0 &&
        (!is_init(c, n->in[k]) || cx_shape_numel(&c->g->values[n->in[k]].shape) != 1))
      return "a further input is not a scalar constant";
  for (int k = 0; k < n->n_out; k++) {
    if (chans(c, n->out[k]) != chans(c, n->in[0])) return "an output has other channels";
    tie_all(c, n->in[0], n->out[k]);
  }
  return NULL;
}

/* Add, Sub, Mul, Div, Sum: same-shaped operands are pruned identically (residuals, and the
 * squeeze-and-excitation scale [N, C, 1, 1] on its feature map); an operand broadcast along the
 * channels (a per-sample scalar) does not care; a constant with a channel axis is sliced. */
static const char *rule_eltwise(ctx *c, int i) {
  const cx_node *n = &c->g->nodes[i];
  int y = n->out[0];
  int rank = c->shape[y].ndim;
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    const cx_shape *s = &c->shape[v];
    int axis = 1 - (rank - s->ndim); /* the operand's axis under the output's channel axis */
    if (axis < 0 || s->d[axis] == 1) continue;
    if (s->d[axis] != chans(c, y)) return "an operand's channels do not broadcast";
    if (is_init(c, v)) {
      if (!own_init(c, v)) return "a constant operand with channels is shared";
      edit(c, CX_CHANNEL_SLICE, i, v, axis, y);
    } else if (axis != 1) {
      return "a computed operand of lower rank has channels";
    } else {
      tie_all(c, v, y);
    }
  }
  return NULL;
}

static const char *rule_concat(ctx *c, int i) {
  const cx_node *n = &c->g->nodes[i];
  int y = n->out[0], axis;
  if (cx_axis_normalize(n, cx_node_int(n, "axis", 0), c->shape[y].ndim, &axis) != CX_OK) {
    cx_error_clear();
    return "its axis is invalid";
  }
  int64_t at = 0;
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (is_init(c, v)) return "an operand is a constant";
    if (axis != 1) {
      tie_all(c, v, y);
      continue;
    }
    for (int64_t j = 0; j < chans(c, v); j++) unite(c, elem(c, v, j), elem(c, y, at + j));
    at += chans(c, v);
  }
  return NULL;
}

/* Flatten (axis 1) and a Reshape that keeps the batch: [N, C, H, W] -> [N, C·H·W] maps channel k
 * to the feature columns k·H·W ... (k + 1)·H·W - 1; a Reshape that keeps [N, C] keeps the
 * channels. */
static const char *rule_reshape(ctx *c, int i) {
  const cx_node *n = &c->g->nodes[i];
  int x = n->in[0], y = n->out[0];
  const cx_shape *xs = &c->shape[x], *ys = &c->shape[y];
  bool reshape = !strcmp(n->op->name, "Reshape");
  if (!reshape && cx_node_int(n, "axis", 1) != 1) return "its axis is not 1";
  if (xs->ndim < 2 || ys->ndim < 2 || xs->d[0] != ys->d[0]) return "it moves the channel axis";
  bool same = ys->d[1] == xs->d[1];
  if (!same && ys->ndim != 2) return "it moves the channel axis";
  if (reshape) {
    int t = n->in[1];
    if (!own_init(c, t) || c->g->values[t].dtype != CX_S64)
      return "its target is not its own constant";
    edit(c, CX_CHANNEL_RESHAPE, i, t, 1, y);
  }
  if (same) {
    tie_all(c, x, y);
    return NULL;
  }
  int64_t per = ys->d[1] / xs->d[1]; /* columns per channel */
  for (int64_t k = 0; k < xs->d[1]; k++)
    for (int64_t j = 0; j < per; j++) unite(c, elem(c, x, k), elem(c, y, k * per + j));
  return NULL;
}

static const char *const channelwise_ops[] = {
    "Relu",        "LeakyRelu", "Clip",        "Sigmoid",
    "HardSigmoid", "HardSwish", "Tanh",        "Exp",
    "Log",         "Sqrt",      "Neg",         "Identity",
    "Dropout",     "MaxPool",   "AveragePool", "GlobalAveragePool",
    NULL};
static const char *const eltwise_ops[] = {"Add", "Sub", "Mul", "Div", "Sum", NULL};

static bool in_list(const char *op, const char *const *list) {
  for (; *list; list++)
    if (!strcmp(op, *list)) return true;
  return false;
}

static void apply_rule(ctx *c, int i) {
  const cx_node *n = &c->g->nodes[i];
  const char *op = n->op->name, *why = "the channel analysis does not know this op";
  bool tracked = n->n_in > 0 && n->in[0] >= 0 && n->n_out > 0 && chans(c, n->out[0]) > 0;
  if (!tracked)
    why = "its input or output has no channel axis";
  else if (!strcmp(op, "Conv"))
    why = chans(c, n->in[0]) > 0 ? rule_conv(c, i) : why;
  else if (!strcmp(op, "Gemm") || !strcmp(op, "MatMul"))
    why = rule_linear(c, i);
  else if (!strcmp(op, "BatchNormalization"))
    why = rule_batch_norm(c, i);
  else if (in_list(op, channelwise_ops))
    why = rule_channelwise(c, i);
  else if (in_list(op, eltwise_ops))
    why = rule_eltwise(c, i);
  else if (!strcmp(op, "Concat"))
    why = rule_concat(c, i);
  else if (!strcmp(op, "Flatten") || !strcmp(op, "Reshape"))
    why = rule_reshape(c, i);
  if (why) freeze_node(c, i, why);
}

/* ---- units and groups ---- */

/* Units are the union-find roots, numbered in element order. */
static void make_units(ctx *c) {
  cx_channel_groups *cg = c->cg;
  cg->n_units = 0;
  for (int64_t e = 0; e < cg->n_elems; e++) {
    int r = find(c, (int)e);
    if (r == e)
      cg->elem_unit[e] = cg->n_units++;
    else
      cg->elem_unit[e] = cg->elem_unit[r];
  }
}

/* A unit's signature: the values it occupies, hashed in value order (with a count, so a
 * collision needs two equal hashes of equal length). */
static cx_status make_groups(ctx *c) {
  cx_channel_groups *cg = c->cg;
  int nu = cg->n_units, nv = c->g->n_values;
  uint64_t *hash = calloc((size_t)nu + 1, sizeof *hash);
  int *last = malloc(((size_t)nu + 1) * sizeof *last), *len = calloc((size_t)nu + 1, sizeof *len);
  bool *ufrozen = calloc((size_t)nu + 1, sizeof *ufrozen);
  size_t tsize = 2 * (size_t)nu + 1;
  int *table = malloc(tsize * sizeof *table);
  cg->unit_group = malloc(((size_t)nu + 1) * sizeof(int));
  cg->unit_order = malloc(((size_t)nu + 1) * sizeof(int));
  cg->groups = calloc((size_t)nu + 1, sizeof *cg->groups);
  int *rep = malloc(((size_t)nu + 1) * sizeof *rep); /* a unit of each group, to compare */
  cx_status s = CX_OK;
  if (!hash || !last || !len || !ufrozen || !table || !cg->unit_group || !cg->unit_order ||
      !cg->groups || !rep) {
    s = cx_fail(CX_ERR_NOMEM, "out of memory");
    goto done;
  }
  for (int u = 0; u < nu; u++) last[u] = -1, hash[u] = 1469598103934665603ull;
  for (int v = 0; v < nv; v++)
    for (int64_t k = 0; k < cg->channels[v]; k++) {
      int64_t e = cg->elem_start[v] + k;
      int u = cg->elem_unit[e];
      ufrozen[u] |= c->frozen[e];
      if (last[u] == v) continue;
      last[u] = v, len[u]++;
      hash[u] = (hash[u] ^ (uint64_t)v) * 1099511628211ull;
    }
  for (size_t t = 0; t < tsize; t++) table[t] = -1;
  cg->n_groups = 0;
  for (int u = 0; u < nu; u++) {
    size_t t = hash[u] % tsize;
    while (table[t] >= 0 && !(hash[rep[table[t]]] == hash[u] && len[rep[table[t]]] == len[u]))
      t = (t + 1) % tsize;
    if (table[t] < 0) {
      table[t] = cg->n_groups;
      rep[cg->n_groups] = u;
      cg->groups[cg->n_groups++] = (cx_channel_group){.producer = -1};
    }
    int k = table[t];
    cg->unit_group[u] = k;
    cg->groups[k].n++;
    cg->groups[k].frozen |= ufrozen[u];
  }
  int at = 0;
  for (int k = 0; k < cg->n_groups; k++)
    cg->groups[k].first = at, at += cg->groups[k].n, cg->groups[k].n = 0;
  for (int u = 0; u < nu; u++) {
    cx_channel_group *gr = &cg->groups[cg->unit_group[u]];
    cg->unit_order[gr->first + gr->n++] = u;
  }
  /* a producer per group, to name it */
  for (int i = 0; i < c->g->n_nodes; i++) {
    const cx_node *n = &c->g->nodes[i];
    const char *op = n->op->name;
    if (strcmp(op, "Conv") && strcmp(op, "Gemm") && strcmp(op, "MatMul")) continue;
    int y = n->out[0];
    for (int64_t k = 0; k < cg->channels[y]; k++) {
      cx_channel_group *gr = &cg->groups[cg->unit_group[cg->elem_unit[cg->elem_start[y] + k]]];
      if (gr->producer < 0) gr->producer = i;
    }
  }
done:
  free(hash), free(last), free(len), free(ufrozen), free(table), free(rep);
  return s;
}

/* ---- the analysis ---- */

static cx_status analyse(ctx *c) {
  const cx_graph *g = c->g;
  cx_channel_groups *cg = c->cg;
  size_t nv = (size_t)g->n_values + 1;
  c->shape = calloc(nv, sizeof *c->shape);
  cx_dtype *dtype = calloc(nv, sizeof *dtype);
  c->readers = calloc(nv, sizeof *c->readers);
  cg->channels = calloc(nv, sizeof *cg->channels);
  cg->elem_start = calloc(nv, sizeof *cg->elem_start);
  if (!c->shape || !dtype || !c->readers || !cg->channels || !cg->elem_start) {
    free(dtype);
    return cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  cx_status s = cx_graph_infer_shapes(g, 1, c->shape, dtype);
  free(dtype);
  CX_TRY(s);
  cg->node_macs = calloc((size_t)g->n_nodes + 1, sizeof *cg->node_macs);
  if (!cg->node_macs) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = 0; i < g->n_nodes; i++)
    cg->macs += cg->node_macs[i] = cx_graph_node_macs(g, &g->nodes[i], c->shape, NULL);
  for (int v = 0; v < g->n_values; v++) {
    const cx_value *x = &g->values[v];
    bool act = x->kind == CX_VALUE_ACT || x->kind == CX_VALUE_INPUT;
    cg->elem_start[v] = cg->n_elems;
    cg->channels[v] = act && c->shape[v].ndim >= 2 ? c->shape[v].d[1] : 0;
    cg->n_elems += cg->channels[v];
  }
  if (cg->n_elems > 0x7fffffff) return cx_fail(CX_ERR_UNSUPPORTED, "prune: too many channels");
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] >= 0) c->readers[g->nodes[i].in[k]]++;
  size_t ne = (size_t)cg->n_elems + 1;
  c->parent = malloc(ne * sizeof *c->parent);
  c->frozen = calloc(ne, sizeof *c->frozen);
  cg->elem_unit = malloc(ne * sizeof *cg->elem_unit);
  if (!c->parent || !c->frozen || !cg->elem_unit) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int64_t e = 0; e < cg->n_elems; e++) c->parent[e] = (int)e;
  for (int i = 0; i < g->n_nodes && c->status == CX_OK; i++) apply_rule(c, i);
  CX_TRY(c->status);
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].kind == CX_VALUE_INPUT) freeze_value(c, v);
  for (int k = 0; k < g->n_outputs; k++) freeze_value(c, g->outputs[k]);
  make_units(c);
  return make_groups(c);
}

cx_status cx_channel_groups_build(const cx_graph *g, FILE *log, cx_channel_groups **out) {
  *out = NULL;
  cx_channel_groups *cg = calloc(1, sizeof *cg);
  if (!cg) return cx_fail(CX_ERR_NOMEM, "out of memory");
  cg->g = g;
  ctx c = {.cg = cg, .g = g, .log = log, .status = CX_OK};
  cx_status s = analyse(&c);
  free(c.shape), free(c.parent), free(c.frozen), free(c.readers);
  if (s != CX_OK) {
    cx_channel_groups_free(cg);
    return s;
  }
  *out = cg;
  return CX_OK;
}

void cx_channel_groups_free(cx_channel_groups *cg) {
  if (!cg) return;
  free(cg->channels), free(cg->elem_start), free(cg->elem_unit), free(cg->unit_group);
  free(cg->unit_order), free(cg->groups), free(cg->edits), free(cg->node_macs);
  free(cg);
}

int cx_channel_unit(const cx_channel_groups *cg, int value, int64_t c) {
  if (value < 0 || c < 0 || c >= cg->channels[value]) return -1;
  return cg->elem_unit[cg->elem_start[value] + c];
}

void cx_channel_group_freeze(cx_channel_groups *cg, int k, FILE *log, const char *why) {
  cx_channel_group *gr = &cg->groups[k];
  if (gr->frozen) return;
  gr->frozen = true;
  if (log)
    fprintf(log, "prune: the %d channels written by '%s' are kept: %s\n", gr->n,
            gr->producer >= 0 ? cg->g->nodes[gr->producer].name : "?", why);
}
