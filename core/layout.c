#include "layout.h"

#include <stdlib.h>
#include <string.h>

#include "infer_fuse.h"

/* Union-find over values: nodes whose kernels need their 4-D arguments to share one layout join
 * those values in a set; a set becomes channels-last unless some member is blocked (a producer or
 * consumer that takes plain tensors only, or a shared node that also touches a plain-only value). */

typedef struct layout_sets {
  int *parent;
  bool *blocked;
} layout_sets;

static int find(layout_sets *s, int v) {
  while (s->parent[v] != v) v = s->parent[v] = s->parent[s->parent[v]];
  return v;
}

static void join(layout_sets *s, int a, int b) {
  a = find(s, a);
  b = find(s, b);
  if (a == b) return;
  s->parent[a] = b;
  s->blocked[b] = s->blocked[b] || s->blocked[a];
}

static void block(layout_sets *s, int v) { s->blocked[find(s, v)] = true; }

/* A tensor whose layout matters: 4-D with more than one channel and more than one pixel. */
static bool layout_matters(const cx_tensor *t) {
  const int64_t *d = t->shape.d;
  return t->shape.ndim == 4 && d[1] > 1 && d[2] * d[3] > 1;
}

/* f32 activations, and the INT8 runtime's int8 ones (only its kernels and Q/DQ touch int8
 * values, and all of them take channels-last). */
static bool may_change(const cx_graph *g, const bool *pinned, const cx_tensor *t, int v) {
  return !pinned[v] && g->values[v].kind == CX_VALUE_ACT &&
         (t[v].dtype == CX_F32 || t[v].dtype == CX_S8) &&
         layout_matters(&t[v]);
}

/* A shape whose layout is moot: at most 4-D and, aligned right to 4-D, one channel or one pixel. */
static bool layout_moot(const cx_shape *s) {
  if (s->ndim > 4) return false;
  int64_t d[4] = {1, 1, 1, 1};
  for (int i = 0; i < s->ndim; i++) d[4 - s->ndim + i] = s->d[i];
  return d[1] == 1 || d[2] * d[3] == 1;
}

/* Element-wise kernels (and ReduceSumTo / BroadcastTo) take channels-last when the operands whose
 * layout matters all have one 4-D shape and the rest have moot layouts (a scalar, [N,1,1,1],
 * [N,C,1,1], [C,1,1], [W]): they then run as row-major [N,H,W,C] problems
 * (kernels/cpu/eltwise.c). */
static bool eltwise_fits(const cx_node *n, const cx_tensor *t) {
  const cx_shape *big = NULL;
  for (int k = 0; k < n->n_in + n->n_out; k++) {
    int v = cx_node_arg(n, k);
    if (v < 0 || layout_moot(&t[v].shape)) continue;
    if (t[v].shape.ndim != 4 || (big && !cx_shape_equal(&t[v].shape, big))) return false;
    big = &t[v].shape;
  }
  return true;
}

static void constrain_node(layout_sets *s, const cx_graph *g, const cx_node *n, unsigned flags,
                           const bool *pinned, const cx_tensor *t) {
  if (flags & CX_LAYOUT_ANY) return;
  bool shared = (flags & CX_LAYOUT_SHARED) || ((flags & CX_LAYOUT_ELTWISE) && eltwise_fits(n, t));
  int first = -1;
  bool plain_member = false;
  for (int k = 0; k < n->n_in + n->n_out; k++) {
    int v = cx_node_arg(n, k);
    if (v < 0 || !layout_matters(&t[v])) continue;
    if (!may_change(g, pinned, t, v)) {
      plain_member = true;
      continue;
    }
    if (!shared) block(s, v);
    else if (first < 0) first = v;
    else join(s, first, v);
  }
  if (plain_member && first >= 0) block(s, first);
}

/* A node that adds into an input (core/infer_fuse.h) may be given that input's buffer for its
 * output, so the two share one layout. */
static void accumulator_layout(layout_sets *s, const cx_graph *g, const cx_node *n,
                               const bool *pinned, const cx_tensor *t) {
  int k = cx_infer_fuse_accumulator(n);
  if (k < 0) return;
  int a = n->in[k], y = n->out[0];
  if (!layout_matters(&t[a]) || !layout_matters(&t[y])) return;
  bool ma = may_change(g, pinned, t, a), my = may_change(g, pinned, t, y);
  if (ma && my) join(s, a, y);
  else if (ma) block(s, a);
  else if (my) block(s, y);
}

int cx_layout_assign(const cx_graph *g, const cx_kernel *const *kernel, const bool *pinned,
                     cx_tensor *t) {
  int nv = g->n_values, count = 0;
  layout_sets s = {malloc(sizeof(int) * ((size_t)nv + 1)), calloc((size_t)nv + 1, sizeof(bool))};
  if (!s.parent || !s.blocked) {
    free(s.parent);
    free(s.blocked);
    return 0; /* everything stays plain, which is always correct */
  }
  for (int v = 0; v < nv; v++) s.parent[v] = v;
  for (int i = 0; i < g->n_nodes; i++) {
    constrain_node(&s, g, &g->nodes[i], kernel[i]->layouts, pinned, t);
    accumulator_layout(&s, g, &g->nodes[i], pinned, t);
  }
  for (int v = 0; v < nv; v++) {
    if (!may_change(g, pinned, t, v) || s.blocked[find(&s, v)]) continue;
    t[v] = cx_tensor_channels_last_view(&t[v]);
    count++;
  }
  free(s.parent);
  free(s.blocked);
  return count;
}

bool cx_layout_enabled(void) {
  const char *e = getenv("CX_LAYOUT");
  return !(e && strcmp(e, "plain") == 0);
}
