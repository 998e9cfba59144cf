/* Shape ops: Flatten, Reshape, Transpose, Concat, Split, Slice, Pad, Expand (and ExpandBatch),
 * Identity, Dropout,
 * and the internal ops their gradients use (SliceGrad, PadGrad, SplitGrad, DropoutTrain,
 * DropoutGrad). Shape-defining operands (Reshape's shape, Slice's starts...) must be constants:
 * programs are compiled for fixed shapes. */
#include "shape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "families.h"

enum { MAX_VARIADIC = 4096 };

static bool has_in(const cx_node *n, int i) { return i < n->n_in && n->in[i] >= 0; }

/* The node's axis attribute (default 0) made non-negative for rank. */
static cx_status axis_of(const cx_node *n, int rank, int *out) {
  return cx_axis_normalize(n, cx_node_int(n, "axis", 0), rank, out);
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

void cx_contiguous_strides(const cx_shape *s, int64_t *st) {
  int64_t acc = 1;
  for (int d = s->ndim - 1; d >= 0; d--) {
    st[d] = acc;
    acc *= s->d[d];
  }
}

/* The values of input i, which must be a constant 1-D (or scalar) s64 tensor. */
static cx_status const_ints(const cx_infer_ctx *c, int i, const char *what, const int64_t **v,
                            int *count) {
  const cx_node *n = c->node;
  if (c->in_dtype[i] != CX_S64)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): %s (input %d) must be s64, got %s", n->name,
                   n->op->name, what, i, cx_dtype_name(c->in_dtype[i]));
  if (!c->in_data[i])
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): %s (input %d) must be a constant "
                   "(initializer) so that shapes are known when compiling", n->name, n->op->name,
                   what, i);
  if (c->in_shape[i].ndim > 1) {
    char sb[CX_SHAPE_STR];
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): %s (input %d) must be 1-D, got shape %s", n->name,
                   n->op->name, what, i, cx_shape_str(&c->in_shape[i], sb));
  }
  *v = c->in_data[i];
  *count = (int)cx_shape_numel(&c->in_shape[i]);
  return CX_OK;
}

static cx_status check_optional_ints(const cx_infer_ctx *c, int i, const char *what) {
  const int64_t *v = NULL;
  int k = 0;
  return has_in(c->node, i) ? const_ints(c, i, what, &v, &k) : CX_OK;
}

static void set_out(const cx_infer_ctx *c, int k, const cx_shape *s, cx_dtype t) {
  c->out_shape[k] = *s;
  c->out_dtype[k] = t;
}

/* Numbered gradient constants ("<node>/grad/<what>") for shapes and sizes. */
static int grad_const_s64(const cx_grad_ctx *ctx, const char *what, const int64_t *v, int n) {
  char base[512];
  snprintf(base, sizeof base, "%s/grad/%s", ctx->g->nodes[ctx->node].name, what);
  char *name = cx_graph_unique_name(ctx->g, base);
  if (!name) return -1;
  int id = cx_graph_const_s64(ctx->g, name, n, v);
  free(name);
  return id;
}

/* ---- Flatten, Reshape, Identity ---- */

static cx_status infer_flatten(const cx_infer_ctx *c) {
  const cx_shape *x = &c->in_shape[0];
  int64_t axis = cx_node_int(c->node, "axis", 1);
  if (axis < -x->ndim || axis > x->ndim) {
    char sb[CX_SHAPE_STR];
    return cx_fail(CX_ERR_SHAPE, "node '%s' (Flatten): axis %lld is out of range [%d, %d] for "
                   "input shape %s", c->node->name, (long long)axis, -x->ndim, x->ndim,
                   cx_shape_str(x, sb));
  }
  if (axis < 0) axis += x->ndim;
  cx_shape out = {.ndim = 2, .d = {1, 1}};
  for (int d = 0; d < x->ndim; d++) out.d[d < axis ? 0 : 1] *= x->d[d];
  set_out(c, 0, &out, c->in_dtype[0]);
  return CX_OK;
}

static cx_status reshape_fail(const cx_infer_ctx *c, const int64_t *v, int k, const char *why) {
  char sx[CX_SHAPE_STR], sv[CX_SHAPE_STR];
  cx_shape want = {.ndim = k < CX_MAX_DIMS ? k : CX_MAX_DIMS};
  for (int i = 0; i < want.ndim; i++) want.d[i] = v[i];
  return cx_fail(CX_ERR_SHAPE, "node '%s' (Reshape): cannot reshape %s (%lld elements) to %s: %s",
                 c->node->name, cx_shape_str(&c->in_shape[0], sx),
                 (long long)cx_shape_numel(&c->in_shape[0]), cx_shape_str(&want, sv), why);
}

static cx_status infer_reshape(const cx_infer_ctx *c) {
  const cx_shape *x = &c->in_shape[0];
  const int64_t *v = NULL;
  int k = 0;
  CX_TRY(const_ints(c, 1, "shape", &v, &k));
  if (k > CX_MAX_DIMS) return reshape_fail(c, v, k, "too many dimensions");
  bool allowzero = cx_node_int(c->node, "allowzero", 0) != 0;
  cx_shape out = {.ndim = k};
  int infer_at = -1;
  int64_t known = 1;
  for (int i = 0; i < k; i++) {
    if (v[i] < -1) return reshape_fail(c, v, k, "a dimension below -1");
    if (v[i] == -1) {
      if (infer_at >= 0) return reshape_fail(c, v, k, "more than one -1");
      infer_at = i;
      continue;
    }
    if (v[i] == 0 && !allowzero) {
      if (i >= x->ndim) return reshape_fail(c, v, k, "0 copies a dimension the input lacks");
      out.d[i] = x->d[i];
    } else {
      out.d[i] = v[i];
    }
    known *= out.d[i];
  }
  int64_t numel = cx_shape_numel(x);
  if (infer_at >= 0) {
    if (known == 0 || numel % known) return reshape_fail(c, v, k, "-1 cannot be inferred");
    out.d[infer_at] = numel / known;
  }
  if (cx_shape_numel(&out) != numel) return reshape_fail(c, v, k, "element counts differ");
  set_out(c, 0, &out, c->in_dtype[0]);
  return CX_OK;
}

static cx_status infer_identity(const cx_infer_ctx *c) {
  set_out(c, 0, &c->in_shape[0], c->in_dtype[0]);
  return CX_OK;
}

/* Flatten and Reshape: dX is dY reshaped back to X's shape (allowzero, so a 0 means 0). */
static cx_status grad_reshape_back(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  cx_shape xs = ctx->shape[n->in[0]];
  int dy = ctx->dy[0];
  if (!ctx->need[0] || dy < 0) return CX_OK;
  int shape = grad_const_s64(ctx, "shape", xs.d, xs.ndim);
  int node = cx_grad_node(ctx, "Reshape", (int[]){dy, shape}, 2, 1);
  cx_node_set_int(ctx->g, node, "allowzero", 1);
  ctx->dx[0] = cx_node_output(ctx->g, node, 0);
  return cx_graph_status(ctx->g);
}

static cx_status grad_identity(const cx_grad_ctx *ctx) {
  if (ctx->need[0]) ctx->dx[0] = ctx->dy[0];
  return CX_OK;
}

/* ---- Transpose ---- */

/* perm, or the reversed axes when it is absent; fails unless it is a permutation of rank axes. */
static cx_status transpose_perm(const cx_node *n, int rank, int *perm) {
  const int64_t *p;
  int k = cx_node_ints(n, "perm", &p);
  if (k == 0) {
    for (int d = 0; d < rank; d++) perm[d] = rank - 1 - d;
    return CX_OK;
  }
  bool seen[CX_MAX_DIMS] = {false};
  if (k != rank)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (Transpose): perm has %d entries, the input has rank %d",
                   n->name, k, rank);
  for (int d = 0; d < k; d++) {
    if (p[d] < 0 || p[d] >= rank || seen[p[d]])
      return cx_fail(CX_ERR_SHAPE, "node '%s' (Transpose): perm is not a permutation of 0..%d "
                     "(entry %d is %lld)", n->name, rank - 1, d, (long long)p[d]);
    seen[p[d]] = true;
    perm[d] = (int)p[d];
  }
  return CX_OK;
}

static cx_status infer_transpose(const cx_infer_ctx *c) {
  const cx_shape *x = &c->in_shape[0];
  int perm[CX_MAX_DIMS];
  CX_TRY(transpose_perm(c->node, x->ndim, perm));
  cx_shape out = {.ndim = x->ndim};
  for (int d = 0; d < x->ndim; d++) out.d[d] = x->d[perm[d]];
  set_out(c, 0, &out, c->in_dtype[0]);
  return CX_OK;
}

static cx_status grad_transpose(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  int rank = ctx->shape[n->in[0]].ndim, perm[CX_MAX_DIMS];
  CX_TRY(transpose_perm(n, rank, perm));
  if (!ctx->need[0] || ctx->dy[0] < 0) return CX_OK;
  int64_t inv[CX_MAX_DIMS];
  for (int d = 0; d < rank; d++) inv[perm[d]] = d;
  int node = cx_grad_node(ctx, "Transpose", &ctx->dy[0], 1, 1);
  cx_node_set_ints(ctx->g, node, "perm", inv, rank);
  ctx->dx[0] = cx_node_output(ctx->g, node, 0);
  return cx_graph_status(ctx->g);
}

/* Output axis d reads X's axis perm[d]; taken as it is, since infer (transpose_perm) checked it. */
void cx_transpose_view(const cx_node *n, const cx_shape *x, int64_t *st) {
  int r = x->ndim;
  const int64_t *p;
  int k = cx_node_ints(n, "perm", &p);
  int64_t xs[CX_MAX_DIMS];
  cx_contiguous_strides(x, xs);
  for (int d = 0; d < r; d++) st[d] = xs[k ? p[d] : r - 1 - d];
}

/* ---- Concat, Split, SplitGrad ---- */

/* The whole is [outer, dim, inner] around axis: each of the outer rows holds the part's n * inner
 * elements at `at * inner`, which is what both the CPU loop and cudaMemcpy2D want. */
cx_part_rows cx_part_rows_of(const cx_shape *whole, int axis, int64_t at, int64_t n, size_t es) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < whole->ndim; d++) {
    if (d < axis) outer *= whole->d[d];
    if (d > axis) inner *= whole->d[d];
  }
  return (cx_part_rows){.rows = outer,
                        .chunk = (size_t)(n * inner) * es,
                        .pitch = (size_t)(whole->d[axis] * inner) * es,
                        .offset = (size_t)(at * inner) * es};
}

static cx_status infer_concat(const cx_infer_ctx *c) {
  const cx_node *n = c->node;
  const cx_shape *first = &c->in_shape[0];
  int axis = 0;
  CX_TRY(axis_of(n, first->ndim, &axis));
  cx_shape out = *first;
  for (int i = 1; i < n->n_in; i++) {
    const cx_shape *s = &c->in_shape[i];
    bool fits = s->ndim == first->ndim && c->in_dtype[i] == c->in_dtype[0];
    for (int d = 0; fits && d < s->ndim; d++) fits = d == axis || s->d[d] == first->d[d];
    if (!fits) {
      char sa[CX_SHAPE_STR], sb[CX_SHAPE_STR];
      return cx_fail(CX_ERR_SHAPE, "node '%s' (Concat): input %d is %s %s, input 0 is %s %s; they "
                     "must agree in dtype and in every dimension but axis %d", n->name, i,
                     cx_dtype_name(c->in_dtype[i]), cx_shape_str(s, sa),
                     cx_dtype_name(c->in_dtype[0]), cx_shape_str(first, sb), axis);
    }
    out.d[axis] += s->d[axis];
  }
  set_out(c, 0, &out, c->in_dtype[0]);
  return CX_OK;
}

/* Concat's gradient: dY split back into the inputs' extents along axis. */
static cx_status grad_concat(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  int n_in = n->n_in, rank = ctx->shape[n->in[0]].ndim, axis = 0;
  CX_TRY(axis_of(n, rank, &axis));
  bool any = false;
  for (int i = 0; i < n_in; i++) any |= ctx->need[i];
  if (!any || ctx->dy[0] < 0) return CX_OK;
  int64_t *sizes = malloc(sizeof(int64_t) * (size_t)n_in);
  if (!sizes) return cx_fail(CX_ERR_NOMEM, "out of memory in Concat's gradient");
  for (int i = 0; i < n_in; i++) sizes[i] = ctx->shape[ctx->g->nodes[ctx->node].in[i]].d[axis];
  int node = cx_grad_node(ctx, "Split", &ctx->dy[0], 1, n_in);
  cx_node_set_int(ctx->g, node, "axis", axis);
  cx_node_set_ints(ctx->g, node, "split", sizes, n_in);
  free(sizes);
  for (int i = 0; i < n_in; i++)
    if (ctx->need[i]) ctx->dx[i] = cx_node_output(ctx->g, node, i);
  return cx_graph_status(ctx->g);
}

static cx_status split_fail(const cx_node *n, const cx_shape *x, int axis, const char *why) {
  char sb[CX_SHAPE_STR];
  return cx_fail(CX_ERR_SHAPE, "node '%s' (Split): input %s into %d outputs along axis %d: %s",
                 n->name, cx_shape_str(x, sb), n->n_out, axis, why);
}

/* Sizes along axis: input 1 (opset 13+), attribute split (older), or equal parts (the last one
 * smaller when the axis does not divide, as opset 18 allows). */
static cx_status split_sizes(const cx_infer_ctx *c, int axis, int64_t *sizes) {
  const cx_node *n = c->node;
  const cx_shape *x = &c->in_shape[0];
  const int64_t *v = NULL;
  int k = 0;
  if (has_in(n, 1)) CX_TRY(const_ints(c, 1, "split", &v, &k));
  else k = cx_node_ints(n, "split", &v);
  int64_t dim = x->d[axis], total = 0;
  if (k == 0) {
    int64_t part = (dim + n->n_out - 1) / n->n_out;
    if (part * (n->n_out - 1) >= dim && n->n_out > 1)
      return split_fail(n, x, axis, "the axis is too short for that many parts");
    for (int i = 0; i < n->n_out; i++) sizes[i] = i < n->n_out - 1 ? part : dim - part * i;
    return CX_OK;
  }
  if (k != n->n_out) return split_fail(n, x, axis, "split has a different number of entries");
  for (int i = 0; i < k; i++) {
    if (v[i] < 0) return split_fail(n, x, axis, "a negative split size");
    sizes[i] = v[i];
    total += v[i];
  }
  if (total != dim) return split_fail(n, x, axis, "the split sizes do not add up to the axis");
  return CX_OK;
}

static cx_status infer_split(const cx_infer_ctx *c) {
  const cx_node *n = c->node;
  int axis = 0;
  CX_TRY(axis_of(n, c->in_shape[0].ndim, &axis));
  int64_t *sizes = malloc(sizeof(int64_t) * (size_t)n->n_out);
  if (!sizes) return cx_fail(CX_ERR_NOMEM, "out of memory in node '%s'", n->name);
  cx_status s = split_sizes(c, axis, sizes);
  for (int k = 0; s == CX_OK && k < n->n_out; k++) {
    cx_shape o = c->in_shape[0];
    o.d[axis] = sizes[k];
    set_out(c, k, &o, c->in_dtype[0]);
  }
  free(sizes);
  return s;
}

/* Split's gradient: the dY pieces concatenated again; pieces that got no gradient are zeros,
 * which SplitGrad fills in. */
static cx_status grad_split(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  int n_out = n->n_out, axis = 0;
  cx_shape xs = ctx->shape[n->in[0]];
  CX_TRY(axis_of(n, xs.ndim, &axis));
  if (!ctx->need[0]) return CX_OK;
  int64_t *sizes = malloc(sizeof(int64_t) * (size_t)n_out);
  if (!sizes) return cx_fail(CX_ERR_NOMEM, "out of memory in Split's gradient");
  bool all = true, none = true;
  for (int k = 0; k < n_out; k++) {
    sizes[k] = ctx->shape[ctx->g->nodes[ctx->node].out[k]].d[axis];
    all &= ctx->dy[k] >= 0;
    none &= ctx->dy[k] < 0;
  }
  if (!none) {
    int node = cx_grad_node(ctx, all ? "Concat" : "SplitGrad", ctx->dy, n_out, 1);
    cx_node_set_int(ctx->g, node, "axis", axis);
    if (!all) cx_node_set_ints(ctx->g, node, "split", sizes, n_out);
    ctx->dx[0] = cx_node_output(ctx->g, node, 0);
  }
  free(sizes);
  return cx_graph_status(ctx->g);
}

static cx_status infer_split_grad(const cx_infer_ctx *c) {
  const cx_node *n = c->node;
  const int64_t *sizes;
  int k = cx_node_ints(n, "split", &sizes), present = -1;
  int64_t axis = cx_node_int(n, "axis", 0), total = 0;
  for (int i = 0; i < n->n_in; i++)
    if (has_in(n, i)) present = i;
  if (k != n->n_in || present < 0 || axis < 0 || axis >= c->in_shape[present].ndim)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (SplitGrad): needs one split size per input, a valid "
                   "axis and at least one input", n->name);
  for (int i = 0; i < k; i++) total += sizes[i];
  for (int i = 0; i < n->n_in; i++) {
    if (!has_in(n, i)) continue;
    bool fits = c->in_shape[i].ndim == c->in_shape[present].ndim && c->in_shape[i].d[axis] == sizes[i];
    for (int d = 0; fits && d < c->in_shape[i].ndim; d++)
      fits = d == axis || c->in_shape[i].d[d] == c->in_shape[present].d[d];
    if (!fits) {
      char sb[CX_SHAPE_STR];
      return cx_fail(CX_ERR_SHAPE, "node '%s' (SplitGrad): input %d has shape %s, which does not "
                     "fit split size %lld along axis %lld", n->name, i,
                     cx_shape_str(&c->in_shape[i], sb), (long long)sizes[i], (long long)axis);
    }
  }
  cx_shape out = c->in_shape[present];
  out.d[axis] = total;
  set_out(c, 0, &out, c->in_dtype[present]);
  return CX_OK;
}

/* ---- Slice, SliceGrad ---- */

/* Slice's list operand k (1 starts, 2 ends, 3 axes, 4 steps): an input from opset 10, an
 * attribute before. Returns the count, or -1 when absent. */
static int slice_list(const cx_node *n, int k, const void *const *in_data, const cx_shape *in_shape,
                      const int64_t **v) {
  static const char *attr[] = {NULL, "starts", "ends", "axes", NULL};
  if (n->n_in == 1) {
    if (!attr[k] || !cx_node_attr(n, attr[k])) return -1;
    return cx_node_ints(n, attr[k], v);
  }
  if (!has_in(n, k) || !in_data[k]) return -1;
  *v = in_data[k];
  return (int)cx_shape_numel(&in_shape[k]);
}

static cx_status slice_axis(const cx_node *n, const cx_shape *x, int64_t ax, int64_t s, int64_t e,
                            int64_t step, cx_slice_plan *p) {
  int64_t dim = x->d[ax];
  if (step == 0) return cx_fail(CX_ERR_SHAPE, "node '%s' (Slice): a step is 0", n->name);
  if (step < -INT64_MAX) step = -INT64_MAX;
  if (s < 0) s += dim;
  if (e < 0) e += dim;
  int64_t len;
  if (step > 0) {
    s = clamp64(s, 0, dim);
    e = clamp64(e, 0, dim);
    len = e > s ? (e - s - 1) / step + 1 : 0;
  } else {
    s = clamp64(s, 0, dim - 1);
    e = clamp64(e, -1, dim - 1);
    len = s > e ? (s - e - 1) / -step + 1 : 0;
  }
  p->start[ax] = dim ? s : 0;
  p->step[ax] = step;
  p->len[ax] = dim ? len : 0;
  return CX_OK;
}

cx_status cx_slice_plan_make(const cx_node *n, const cx_shape *x, const void *const *in_data,
                             const cx_shape *in_shape, cx_slice_plan *p) {
  const int64_t *starts = NULL, *ends = NULL, *axes = NULL, *steps = NULL;
  int ns = slice_list(n, 1, in_data, in_shape, &starts), ne = slice_list(n, 2, in_data, in_shape, &ends);
  int na = slice_list(n, 3, in_data, in_shape, &axes), nt = slice_list(n, 4, in_data, in_shape, &steps);
  if (ns < 0 || ne < 0)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): starts and ends are needed (constant s64 inputs "
                   "from opset 10, attributes before)", n->name, n->op->name);
  if (ns != ne || (na >= 0 && na != ns) || (nt >= 0 && nt != ns) || ns > x->ndim)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): starts, ends, axes and steps have %d, %d, %d and "
                   "%d entries for an input of rank %d", n->name, n->op->name, ns, ne, na, nt,
                   x->ndim);
  for (int d = 0; d < x->ndim; d++) {
    p->start[d] = 0;
    p->step[d] = 1;
    p->len[d] = x->d[d];
  }
  bool seen[CX_MAX_DIMS] = {false};
  for (int k = 0; k < ns; k++) {
    int64_t ax = na >= 0 ? axes[k] : k;
    if (ax < -x->ndim || ax >= x->ndim || seen[ax < 0 ? ax + x->ndim : ax])
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): axis %lld is out of range or repeated for "
                     "rank %d", n->name, n->op->name, (long long)ax, x->ndim);
    if (ax < 0) ax += x->ndim;
    seen[ax] = true;
    CX_TRY(slice_axis(n, x, ax, starts[k], ends[k], nt >= 0 ? steps[k] : 1, p));
  }
  return CX_OK;
}

void cx_slice_view(const cx_shape *x, const cx_slice_plan *p, int64_t *st, int64_t *base) {
  int64_t xs[CX_MAX_DIMS];
  cx_contiguous_strides(x, xs);
  *base = 0;
  for (int d = 0; d < x->ndim; d++) {
    st[d] = xs[d] * p->step[d];
    *base += p->start[d] * xs[d];
  }
}

static cx_status check_slice_inputs(const cx_infer_ctx *c) {
  static const char *what[] = {NULL, "starts", "ends", "axes", "steps"};
  for (int k = 1; k < c->node->n_in; k++) CX_TRY(check_optional_ints(c, k, what[k]));
  return CX_OK;
}

static cx_status infer_slice(const cx_infer_ctx *c) {
  CX_TRY(check_slice_inputs(c));
  cx_slice_plan p;
  CX_TRY(cx_slice_plan_make(c->node, &c->in_shape[0], c->in_data, c->in_shape, &p));
  cx_shape out = {.ndim = c->in_shape[0].ndim};
  memcpy(out.d, p.len, sizeof(int64_t) * (size_t)out.ndim);
  set_out(c, 0, &out, c->in_dtype[0]);
  return CX_OK;
}

/* The shape attribute of SliceGrad and PadGrad: the forward input's shape. */
static cx_status grad_op_shape(const cx_infer_ctx *c, cx_shape *x) {
  const int64_t *v = NULL;
  int k = cx_node_ints(c->node, "shape", &v);
  if (k < 1 && !cx_node_attr(c->node, "shape"))
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): the shape attribute is missing", c->node->name,
                   c->node->op->name);
  if (k > CX_MAX_DIMS)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): shape has %d dimensions", c->node->name,
                   c->node->op->name, k);
  *x = cx_shape_make(k, v);
  return CX_OK;
}

static cx_status check_dy_shape(const cx_infer_ctx *c, const cx_shape *want) {
  if (cx_shape_equal(&c->in_shape[0], want)) return CX_OK;
  char sa[CX_SHAPE_STR], sb[CX_SHAPE_STR];
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): dY has shape %s, the forward output had %s",
                 c->node->name, c->node->op->name, cx_shape_str(&c->in_shape[0], sa),
                 cx_shape_str(want, sb));
}

static cx_status infer_slice_grad(const cx_infer_ctx *c) {
  cx_shape x;
  CX_TRY(grad_op_shape(c, &x));
  CX_TRY(check_slice_inputs(c));
  cx_slice_plan p;
  CX_TRY(cx_slice_plan_make(c->node, &x, c->in_data, c->in_shape, &p));
  cx_shape y = {.ndim = x.ndim};
  memcpy(y.d, p.len, sizeof(int64_t) * (size_t)x.ndim);
  CX_TRY(check_dy_shape(c, &y));
  set_out(c, 0, &x, CX_F32);
  return CX_OK;
}

/* Slice and Pad: a gradient op with the same operands, dY in place of X and X's shape as an
 * attribute. */
static cx_status grad_with_shape(const cx_grad_ctx *ctx, const char *op) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  cx_shape xs = ctx->shape[n->in[0]];
  int n_in = n->n_in, in[5] = {ctx->dy[0], -1, -1, -1, -1};
  for (int i = 1; i < n_in && i < 5; i++) in[i] = n->in[i];
  if (!ctx->need[0] || ctx->dy[0] < 0) return CX_OK;
  if (!strcmp(op, "PadGrad") && n_in > 2) in[2] = -1; /* the fill value has no say in dX */
  int node = cx_grad_node(ctx, op, in, n_in, 1);
  cx_grad_copy_attrs(ctx, node);
  cx_node_set_ints(ctx->g, node, "shape", xs.d, xs.ndim);
  ctx->dx[0] = cx_node_output(ctx->g, node, 0);
  return cx_graph_status(ctx->g);
}

static cx_status grad_slice(const cx_grad_ctx *ctx) { return grad_with_shape(ctx, "SliceGrad"); }

/* ---- Pad, PadGrad ---- */

static cx_status pad_mode(const cx_node *n, cx_pad_mode *mode) {
  const char *m = cx_node_string(n, "mode", "constant");
  if (!strcmp(m, "constant")) *mode = CX_PAD_CONSTANT;
  else if (!strcmp(m, "reflect")) *mode = CX_PAD_REFLECT;
  else if (!strcmp(m, "edge")) *mode = CX_PAD_EDGE;
  else
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): mode '%s' is not supported (constant, "
                   "reflect, edge)", n->name, n->op->name, m);
  return CX_OK;
}

static cx_status pad_axis(const cx_node *n, const cx_shape *x, int ax, int64_t b, int64_t a,
                          cx_pad_plan *p) {
  int64_t dim = x->d[ax];
  if (b < 0 || a < 0)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): negative pads (%lld, %lld) on axis %d crop; "
                   "cropping is not supported here, use Slice", n->name, n->op->name, (long long)b,
                   (long long)a, ax);
  if (p->mode == CX_PAD_REFLECT && (b || a) && (b >= dim || a >= dim))
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): reflect pads (%lld, %lld) on axis %d need the axis "
                   "to be longer than each pad, but it has %lld", n->name, n->op->name,
                   (long long)b, (long long)a, ax, (long long)dim);
  if (p->mode == CX_PAD_EDGE && (b || a) && dim == 0)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): edge padding of the empty axis %d", n->name,
                   n->op->name, ax);
  p->before[ax] = b;
  p->after[ax] = a;
  return CX_OK;
}

cx_status cx_pad_plan_make(const cx_node *n, const cx_shape *x, const void *const *in_data,
                           const cx_shape *in_shape, cx_pad_plan *p) {
  int r = x->ndim, np, na = r;
  const int64_t *pads = NULL, *axes = NULL;
  CX_TRY(pad_mode(n, &p->mode));
  if (n->n_in == 1) {
    np = cx_node_ints(n, "pads", &pads);
  } else {
    if (!in_data[1])
      return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): pads must be a constant", n->name,
                     n->op->name);
    pads = in_data[1];
    np = (int)cx_shape_numel(&in_shape[1]);
  }
  if (has_in(n, 3)) {
    if (!in_data[3])
      return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): axes must be a constant", n->name,
                     n->op->name);
    axes = in_data[3];
    na = (int)cx_shape_numel(&in_shape[3]);
  }
  if (np != 2 * na || na > r)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): %d pads for %d axes of an input of rank %d "
                   "(2 per axis expected)", n->name, n->op->name, np, na, r);
  for (int d = 0; d < r; d++) p->before[d] = p->after[d] = 0;
  for (int k = 0; k < na; k++) {
    int64_t ax = axes ? axes[k] : k;
    if (ax < -r || ax >= r)
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): axis %lld is out of range for rank %d", n->name,
                     n->op->name, (long long)ax, r);
    CX_TRY(pad_axis(n, x, (int)(ax < 0 ? ax + r : ax), pads[k], pads[k + na], p));
  }
  return CX_OK;
}

static cx_status check_pad_inputs(const cx_infer_ctx *c) {
  const cx_node *n = c->node;
  CX_TRY(check_optional_ints(c, 1, "pads"));
  CX_TRY(check_optional_ints(c, 3, "axes"));
  if (c->in_dtype[0] != CX_F32)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): data must be f32, got %s", n->name,
                   n->op->name, cx_dtype_name(c->in_dtype[0]));
  if (has_in(n, 2) && (c->in_dtype[2] != CX_F32 || cx_shape_numel(&c->in_shape[2]) != 1))
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): constant_value must be one f32 number", n->name,
                   n->op->name);
  return CX_OK;
}

static cx_shape padded(const cx_shape *x, const cx_pad_plan *p, int sign) {
  cx_shape y = *x;
  for (int d = 0; d < x->ndim; d++) y.d[d] += sign * (p->before[d] + p->after[d]);
  return y;
}

static cx_status infer_pad(const cx_infer_ctx *c) {
  CX_TRY(check_pad_inputs(c));
  cx_pad_plan p;
  CX_TRY(cx_pad_plan_make(c->node, &c->in_shape[0], c->in_data, c->in_shape, &p));
  cx_shape y = padded(&c->in_shape[0], &p, 1);
  set_out(c, 0, &y, CX_F32);
  return CX_OK;
}

static cx_status infer_pad_grad(const cx_infer_ctx *c) {
  cx_shape x;
  CX_TRY(grad_op_shape(c, &x));
  CX_TRY(check_pad_inputs(c));
  cx_pad_plan p;
  CX_TRY(cx_pad_plan_make(c->node, &x, c->in_data, c->in_shape, &p));
  cx_shape y = padded(&x, &p, 1);
  CX_TRY(check_dy_shape(c, &y));
  set_out(c, 0, &x, CX_F32);
  return CX_OK;
}

static cx_status grad_pad(const cx_grad_ctx *ctx) { return grad_with_shape(ctx, "PadGrad"); }

/* ---- Expand ---- */

static cx_status infer_expand(const cx_infer_ctx *c) {
  const int64_t *v = NULL;
  int k = 0;
  CX_TRY(const_ints(c, 1, "shape", &v, &k));
  if (k > CX_MAX_DIMS)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): shape has %d dimensions (at most %d)",
                   c->node->name, c->node->op->name, k, CX_MAX_DIMS);
  cx_shape want = cx_shape_make(k, v), out;
  /* ExpandBatch: the listed axes of the target are the batch, Ref's first dimension */
  const int64_t *axes = NULL;
  int na = c->node->n_in > 2 ? cx_node_ints(c->node, "batch_axes", &axes) : 0;
  for (int j = 0; j < na; j++) {
    if (axes[j] < 0 || axes[j] >= k || c->in_shape[2].ndim < 1)
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): batch axis %lld is outside the target shape, "
                     "or Ref has no batch dimension", c->node->name, c->node->op->name,
                     (long long)axes[j]);
    want.d[axes[j]] = c->in_shape[2].d[0];
  }
  for (int d = 0; d < k; d++)
    if (want.d[d] < 0)
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): shape has a negative dimension",
                     c->node->name, c->node->op->name);
  cx_status s = cx_shape_broadcast(&c->in_shape[0], &want, &out);
  if (s != CX_OK) {
    cx_error_prefix("node '%s' (%s)", c->node->name, c->node->op->name);
    return s;
  }
  set_out(c, 0, &out, c->in_dtype[0]);
  return CX_OK;
}

/* y's leading axes that X lacks, and X's axes of 1, repeat one element: stride 0. */
void cx_expand_view(const cx_shape *x, const cx_shape *y, int64_t *st) {
  int r = y->ndim, lead = r - x->ndim;
  int64_t xs[CX_MAX_DIMS];
  cx_contiguous_strides(x, xs);
  for (int d = 0; d < r; d++) st[d] = d < lead || x->d[d - lead] == 1 ? 0 : xs[d - lead];
}

static cx_status grad_expand(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  cx_shape xs = ctx->shape[n->in[0]], ys = ctx->shape[n->out[0]];
  if (!ctx->need[0] || ctx->dy[0] < 0) return CX_OK;
  ctx->dx[0] = cx_grad_reduce_to(ctx, ctx->dy[0], &ys, &xs);
  return cx_graph_status(ctx->g);
}

/* ---- Dropout, DropoutTrain, DropoutGrad ---- */

/* ratio: input i (opset 12+, a constant f32 scalar) or the attribute (older), default 0.5. */
static cx_status dropout_ratio(const cx_infer_ctx *c, int i) {
  const cx_node *n = c->node;
  float r = cx_node_float(n, "ratio", 0.5f);
  if (has_in(n, i)) {
    if (c->in_dtype[i] != CX_F32 || cx_shape_numel(&c->in_shape[i]) != 1 || !c->in_data[i])
      return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): ratio must be a constant f32 scalar",
                     n->name, n->op->name);
    r = *(const float *)c->in_data[i];
  }
  if (!(r >= 0.0f && r < 1.0f))
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): ratio %g is outside [0, 1)", n->name, n->op->name,
                   (double)r);
  return CX_OK;
}

static cx_status infer_dropout(const cx_infer_ctx *c) {
  CX_TRY(dropout_ratio(c, 1));
  set_out(c, 0, &c->in_shape[0], c->in_dtype[0]);
  if (c->node->n_out > 1) set_out(c, 1, &c->in_shape[0], CX_BOOL);
  return CX_OK;
}

static cx_status infer_dropout_train(const cx_infer_ctx *c) {
  CX_TRY(dropout_ratio(c, 1));
  if (c->in_dtype[0] != CX_F32)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (DropoutTrain): data must be f32, got %s",
                   c->node->name, cx_dtype_name(c->in_dtype[0]));
  set_out(c, 0, &c->in_shape[0], CX_F32);
  set_out(c, 1, &c->in_shape[0], CX_F32);
  return CX_OK;
}

static cx_status infer_dropout_grad(const cx_infer_ctx *c) {
  CX_TRY(dropout_ratio(c, 2));
  if (!cx_shape_equal(&c->in_shape[0], &c->in_shape[1])) {
    char sa[CX_SHAPE_STR], sb[CX_SHAPE_STR];
    return cx_fail(CX_ERR_SHAPE, "node '%s' (DropoutGrad): dY %s and mask %s differ", c->node->name,
                   cx_shape_str(&c->in_shape[0], sa), cx_shape_str(&c->in_shape[1], sb));
  }
  set_out(c, 0, &c->in_shape[0], CX_F32);
  return CX_OK;
}

/* dX = dY * mask / (1 - ratio), with the mask DropoutTrain saved. */
static cx_status grad_dropout_train(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  int in[3] = {ctx->dy[0], n->out[1], has_in(n, 1) ? n->in[1] : -1};
  if (!ctx->need[0] || ctx->dy[0] < 0) return CX_OK;
  int node = cx_grad_node(ctx, "DropoutGrad", in, in[2] >= 0 ? 3 : 2, 1);
  cx_grad_copy_attrs(ctx, node);
  ctx->dx[0] = cx_node_output(ctx->g, node, 0);
  return cx_graph_status(ctx->g);
}

/* ---- the records ---- */

static const cx_attr_schema flatten_attrs[] = {{"axis", CX_ATTR_INT, false}, {NULL}};
static const cx_attr_schema reshape_attrs[] = {{"allowzero", CX_ATTR_INT, false}, {NULL}};
static const cx_attr_schema transpose_attrs[] = {{"perm", CX_ATTR_INTS, false}, {NULL}};
static const cx_attr_schema concat_attrs[] = {{"axis", CX_ATTR_INT, true}, {NULL}};
static const cx_attr_schema split_attrs[] = {
    {"axis", CX_ATTR_INT, false}, {"split", CX_ATTR_INTS, false},
    {"num_outputs", CX_ATTR_INT, false}, {NULL}};
static const cx_attr_schema split_grad_attrs[] = {
    {"axis", CX_ATTR_INT, true}, {"split", CX_ATTR_INTS, true}, {NULL}};
static const cx_attr_schema slice_attrs[] = {
    {"starts", CX_ATTR_INTS, false}, {"ends", CX_ATTR_INTS, false}, {"axes", CX_ATTR_INTS, false},
    {NULL}};
static const cx_attr_schema slice_grad_attrs[] = {
    {"shape", CX_ATTR_INTS, true}, {"starts", CX_ATTR_INTS, false},
    {"ends", CX_ATTR_INTS, false}, {"axes", CX_ATTR_INTS, false}, {NULL}};
static const cx_attr_schema pad_attrs[] = {
    {"mode", CX_ATTR_STRING, false}, {"pads", CX_ATTR_INTS, false}, {"value", CX_ATTR_FLOAT, false},
    {NULL}};
static const cx_attr_schema pad_grad_attrs[] = {
    {"shape", CX_ATTR_INTS, true}, {"mode", CX_ATTR_STRING, false}, {"pads", CX_ATTR_INTS, false},
    {"value", CX_ATTR_FLOAT, false}, {NULL}};
static const cx_attr_schema no_attrs[] = {{NULL}};
static const cx_attr_schema expand_batch_attrs[] = {{"batch_axes", CX_ATTR_INTS, true}, {NULL}};
static const cx_attr_schema dropout_attrs[] = {
    {"seed", CX_ATTR_INT, false}, {"ratio", CX_ATTR_FLOAT, false}, {NULL}};

#define ONNX CX_DOMAIN_ONNX
#define OURS CX_DOMAIN_COMPRESS

static const cx_op_def op_flatten = {"Flatten", ONNX, 1, 1, 1, 1, flatten_attrs, infer_flatten,
                                     grad_reshape_back, NULL, 0};
static const cx_op_def op_reshape = {"Reshape", ONNX, 2, 2, 1, 1, reshape_attrs, infer_reshape,
                                     grad_reshape_back, NULL, 0};
static const cx_op_def op_transpose = {"Transpose", ONNX, 1, 1, 1, 1, transpose_attrs,
                                       infer_transpose, grad_transpose, NULL, 0};
static const cx_op_def op_concat = {"Concat", ONNX, 1, MAX_VARIADIC, 1, 1, concat_attrs,
                                    infer_concat, grad_concat, NULL, 0};
static const cx_op_def op_split = {"Split", ONNX, 1, 2, 1, MAX_VARIADIC, split_attrs, infer_split,
                                   grad_split, NULL, 0};
static const cx_op_def op_split_grad = {"SplitGrad", OURS, 1, MAX_VARIADIC, 1, 1, split_grad_attrs,
                                        infer_split_grad, NULL, NULL, 0};
static const cx_op_def op_slice = {"Slice", ONNX, 1, 5, 1, 1, slice_attrs, infer_slice, grad_slice,
                                   NULL, 0};
static const cx_op_def op_slice_grad = {"SliceGrad", OURS, 1, 5, 1, 1, slice_grad_attrs,
                                        infer_slice_grad, NULL, NULL, 0};
static const cx_op_def op_pad = {"Pad", ONNX, 1, 4, 1, 1, pad_attrs, infer_pad, grad_pad, NULL, 0};
static const cx_op_def op_pad_grad = {"PadGrad", OURS, 1, 4, 1, 1, pad_grad_attrs, infer_pad_grad,
                                      NULL, NULL, 0};
static const cx_op_def op_expand = {"Expand", ONNX, 2, 2, 1, 1, no_attrs, infer_expand,
                                    grad_expand, NULL, 0};
/* ExpandBatch(X, shape, Ref): Expand whose target follows the batch on `batch_axes` (Ref's first
 * dimension there); the importer writes it for exporters' batch-sized Expand (ViT's class token,
 * expanded to [N, 1, D]), so the batch stays symbolic. Its kernels are Expand's. */
static const cx_op_def op_expand_batch = {"ExpandBatch", OURS, 3, 3, 1, 1, expand_batch_attrs,
                                          infer_expand, grad_expand, NULL, 0};
static const cx_op_def op_identity = {"Identity", ONNX, 1, 1, 1, 1, no_attrs, infer_identity,
                                      grad_identity, NULL, 0};
static const cx_op_def op_dropout = {"Dropout", ONNX, 1, 3, 1, 2, dropout_attrs, infer_dropout,
                                     grad_identity, "DropoutTrain", 0};
static const cx_op_def op_dropout_train = {"DropoutTrain", OURS, 1, 3, 2, 2, dropout_attrs,
                                           infer_dropout_train, grad_dropout_train, NULL,
                                           CX_OP_RANDOM};
static const cx_op_def op_dropout_grad = {"DropoutGrad", OURS, 2, 3, 1, 1, dropout_attrs,
                                          infer_dropout_grad, NULL, NULL, 0};

const cx_op_def *const cx_ops_shape[] = {
    &op_flatten, &op_reshape,   &op_transpose,  &op_concat, &op_split,
    &op_split_grad, &op_slice,  &op_slice_grad, &op_pad,    &op_pad_grad,
    &op_expand,  &op_expand_batch, &op_identity,  &op_dropout,    &op_dropout_train, &op_dropout_grad,
    NULL};
