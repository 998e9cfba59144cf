/* Gradient checkpointing by recomputation (recompute.h): marks segments of forward nodes, clones
 * what the backward pass reads from inside them into the backward schedule, and points the
 * backward nodes at the clones. */
#include "recompute.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"

typedef struct rc {
  cx_graph *g;
  int n_fwd, n0, nv0; /* forward nodes; nodes and values before the clones */
  int *seg;           /* by forward node: segment id, -1 when unmarked */
  bool *need;         /* by value: recomputed for the backward pass */
  int *clone_of;      /* by value: the clone's value */
  int *at;            /* by segment id: the first backward node that reads a recomputed value */
  int *clone_seg;     /* by clone (node index - n0): its segment id */
} rc;

static bool is_boundary(char c) { return c == '.' || c == '/' || c == ':' || c == 0; }

/* The length of name's block key: up to the end of its first numeric component; 0: none. */
static size_t block_key(const char *name) {
  for (const char *p = strchr(name, '.'); p; p = strchr(p + 1, '.')) {
    const char *d = p + 1;
    while (isdigit((unsigned char)*d)) d++;
    if (d > p + 1 && is_boundary(*d)) return (size_t)(d - name);
  }
  return 0;
}

/* Whether prefix takes name: at its start or after a '/', followed by a boundary. */
static bool prefix_takes(const char *name, const char *prefix) {
  size_t n = strlen(prefix);
  for (const char *at = name; n;) {
    if (strncmp(at, prefix, n) == 0 && is_boundary(at[n])) return true;
    if (!(at = strchr(at, '/'))) return false;
    at++;
  }
  return false;
}

/* The segment of forward node i among the prefixes: the longest that takes it, or -1. */
static int prefix_segment(const char *name, const char *const *prefixes, int n) {
  int best = -1;
  for (int k = 0; k < n; k++)
    if (prefix_takes(name, prefixes[k]) &&
        (best < 0 || strlen(prefixes[k]) > strlen(prefixes[best])))
      best = k;
  return best;
}

/* Blocks: the id of a segment is the first node with the same key. */
static int block_segment(const cx_graph *g, int i) {
  size_t len = block_key(g->nodes[i].name);
  if (!len) return -1;
  for (int j = 0; j < i; j++)
    if (block_key(g->nodes[j].name) == len && !strncmp(g->nodes[j].name, g->nodes[i].name, len))
      return j;
  return i;
}

static cx_status mark_segments(rc *r, const char *const *segments, int n) {
  const cx_graph *g = r->g;
  bool blocks = n == 1 && !strcmp(segments[0], "blocks");
  for (int i = 0; i < r->n_fwd; i++)
    r->seg[i] = blocks ? block_segment(g, i) : prefix_segment(g->nodes[i].name, segments, n);
  for (int k = 0; k < n && !blocks; k++) {
    bool used = false;
    for (int i = 0; i < r->n_fwd && !used; i++) used = r->seg[i] == k;
    if (!used)
      return cx_fail(CX_ERR_ARG, "checkpoint segment '%s' names no forward node (node names "
                     "look like '%s'; or give \"blocks\")", segments[k],
                     g->nodes[r->n_fwd / 2].name);
  }
  return CX_OK;
}

/* A value that, read by backward, would be recomputed: made inside a segment and read by no
 * forward node outside it, and not a graph output. */
static bool *find_inner(const rc *r) {
  const cx_graph *g = r->g;
  bool *inner = calloc((size_t)r->nv0 + 1, 1);
  if (!inner) return NULL;
  for (int v = 0; v < r->nv0; v++) {
    int p = g->values[v].producer;
    inner[v] = g->values[v].kind == CX_VALUE_ACT && p >= 0 && p < r->n_fwd && r->seg[p] >= 0;
  }
  for (int j = 0; j < r->n_fwd; j++)
    for (int k = 0; k < g->nodes[j].n_in; k++) {
      int v = g->nodes[j].in[k];
      if (v >= 0 && inner[v] && r->seg[g->values[v].producer] != r->seg[j]) inner[v] = false;
    }
  for (int k = 0; k < g->n_outputs; k++) inner[g->outputs[k]] = false;
  return inner;
}

/* need: inner values backward reads, and inside their segment what computing them needs. */
static cx_status find_needed(rc *r) {
  const cx_graph *g = r->g;
  bool *inner = find_inner(r);
  if (!inner) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int b = r->n0 - 1; b >= r->n_fwd; b--) /* downwards: at[] ends at the first reader */
    for (int k = 0; k < g->nodes[b].n_in; k++) {
      int v = g->nodes[b].in[k];
      if (v < 0 || !inner[v]) continue;
      r->need[v] = true;
      r->at[r->seg[g->values[v].producer]] = b;
    }
  for (int i = r->n_fwd - 1; i >= 0; i--) { /* producers come before: one pass */
    bool cloned = false;
    for (int k = 0; k < g->nodes[i].n_out; k++) cloned |= r->need[g->nodes[i].out[k]];
    for (int k = 0; cloned && k < g->nodes[i].n_in; k++) {
      int v = g->nodes[i].in[k];
      if (v >= 0 && inner[v]) r->need[v] = true;
    }
  }
  free(inner);
  return CX_OK;
}

static void copy_attrs(cx_graph *g, int from, int to) {
  for (int k = 0; k < g->nodes[from].n_attrs; k++) {
    const cx_attr a = g->nodes[from].attrs[k]; /* a copy: setting may move the array */
    switch (a.type) {
    case CX_ATTR_INT: cx_node_set_int(g, to, a.name, a.i); break;
    case CX_ATTR_FLOAT: cx_node_set_float(g, to, a.name, a.f); break;
    case CX_ATTR_INTS: cx_node_set_ints(g, to, a.name, a.ints, a.n); break;
    case CX_ATTR_FLOATS: cx_node_set_floats(g, to, a.name, a.floats, a.n); break;
    case CX_ATTR_STRING: cx_node_set_string(g, to, a.name, a.s); break;
    }
  }
}

/* Appends the clone of forward node i, reading clones where they exist. */
static cx_status clone_node(rc *r, int i) {
  cx_graph *g = r->g;
  int n_in = g->nodes[i].n_in, n_out = g->nodes[i].n_out;
  int *in = malloc(sizeof(int) * ((size_t)n_in + 1));
  char base[600];
  snprintf(base, sizeof base, "%s/grad/recompute", g->nodes[i].name);
  char *name = cx_graph_unique_name(g, base);
  if (!in || !name) return free(in), free(name), cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int k = 0; k < n_in; k++) {
    int v = g->nodes[i].in[k];
    in[k] = v >= 0 && r->need[v] ? r->clone_of[v] : v;
  }
  int c = cx_graph_node(g, g->nodes[i].op->name, name, in, n_in, n_out);
  free(in);
  free(name);
  CX_TRY(cx_graph_status(g));
  copy_attrs(g, i, c);
  cx_node_set_string(g, c, CX_RECOMPUTE_OF, g->nodes[i].name);
  for (int k = 0; k < n_out; k++) {
    int v = g->nodes[i].out[k], w = g->nodes[c].out[k];
    g->values[w].shape = g->values[v].shape;
    g->values[w].dtype = g->values[v].dtype;
    r->clone_of[v] = w;
  }
  r->clone_seg[c - r->n0] = r->seg[i];
  return cx_graph_status(g);
}

/* Backward nodes read the clones; each segment's clones move just before its first reader. */
static cx_status rewire_and_order(rc *r) {
  cx_graph *g = r->g;
  int n = g->n_nodes, placed = 0;
  for (int b = r->n_fwd; b < r->n0; b++)
    for (int k = 0; k < g->nodes[b].n_in; k++) {
      int v = g->nodes[b].in[k];
      if (v >= 0 && v < r->nv0 && r->need[v]) g->nodes[b].in[k] = r->clone_of[v];
    }
  cx_node *sorted = malloc(sizeof(cx_node) * ((size_t)n + 1));
  if (!sorted) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = 0; i < r->n_fwd; i++) sorted[placed++] = g->nodes[i];
  for (int b = r->n_fwd; b < r->n0; b++) {
    for (int c = r->n0; c < n; c++)
      if (r->at[r->clone_seg[c - r->n0]] == b) sorted[placed++] = g->nodes[c];
    sorted[placed++] = g->nodes[b];
  }
  memcpy(g->nodes, sorted, sizeof(cx_node) * (size_t)placed);
  free(sorted);
  for (int i = 0; i < placed; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++) g->values[g->nodes[i].out[k]].producer = i;
  return placed == n ? CX_OK : cx_fail(CX_ERR_ARG, "recompute: %d clones have no reader",
                                       n - placed);
}

static cx_status recompute(rc *r, const char *const *segments, int n_segments) {
  CX_TRY(mark_segments(r, segments, n_segments));
  CX_TRY(find_needed(r));
  int n_clone = 0;
  for (int v = 0; v < r->nv0; v++) n_clone += r->need[v];
  r->clone_seg = malloc(sizeof(int) * ((size_t)n_clone + 1));
  if (!r->clone_seg) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = 0; i < r->n_fwd; i++) {
    bool cloned = false;
    for (int k = 0; k < r->g->nodes[i].n_out; k++) cloned |= r->need[r->g->nodes[i].out[k]];
    if (cloned) CX_TRY(clone_node(r, i));
  }
  return rewire_and_order(r);
}

cx_status cx_recompute(cx_graph *g, int n_fwd, const char *const *segments, int n_segments,
                       int *n_clones) {
  rc r = {.g = g, .n_fwd = n_fwd, .n0 = g->n_nodes, .nv0 = g->n_values};
  size_t nv = (size_t)g->n_values + 1, ns = (size_t)(n_fwd + n_segments) + 1;
  r.seg = malloc(sizeof(int) * ((size_t)n_fwd + 1));
  r.need = calloc(nv, 1);
  r.clone_of = malloc(sizeof(int) * nv);
  r.at = malloc(sizeof(int) * ns);
  cx_status s = r.seg && r.need && r.clone_of && r.at ? CX_OK
                : cx_fail(CX_ERR_NOMEM, "out of memory");
  for (size_t k = 0; s == CX_OK && k < ns; k++) r.at[k] = -1;
  if (s == CX_OK) s = recompute(&r, segments, n_segments);
  if (n_clones) *n_clones = g->n_nodes - r.n0;
  free(r.seg);
  free(r.need);
  free(r.clone_of);
  free(r.at);
  free(r.clone_seg);
  return s;
}
