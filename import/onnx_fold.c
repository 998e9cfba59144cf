/* Constant folding of shape arithmetic at import (Shape → Gather → Unsqueeze → Concat → Reshape,
 * as exporters write "flatten" and friends), once per batch variant. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

enum { MAX_FOLD_ELEMENTS = 1 << 20 };

static const char *const fold_ops[] = {"Constant", "Shape", "Gather", "Unsqueeze", "Squeeze",
                                       "Concat", "Cast", "ConstantOfShape", "Range", "Reshape",
                                       "Add", "Sub", "Mul", "Div", "Slice", "Identity", "Neg",
                                       "Equal", "Where", "Floor", "Ceil", "Sqrt", "Transpose", "Mod", "Pow",
                                       "Not", "Expand", "ScatterND", NULL};

/* DequantizeLinear is deliberately not here: DequantizeLinear(int8 initializer) must stay a node,
 * not become an f32 weight, so that a QDQ model keeps its structure (the INT8 runtime matches
 * DequantizeLinear(int8 weight) → Conv, and export writes the int8 initializer back). */
static bool is_fold_op(const char *op) {
  for (int k = 0; fold_ops[k]; k++)
    if (!strcmp(fold_ops[k], op)) return true;
  return false;
}

const cx_onnx_folded *cx_onnx_find_folded(const cx_onnx_importer *im, const char *name) {
  for (int k = im->n_folded - 1; k >= 0; k--)
    if (!strcmp(im->folded[k].name, name)) return &im->folded[k];
  return NULL;
}

cx_status cx_onnx_add_folded(cx_onnx_importer *im, const char *name, cx_onnx_const v[2]) {
  if (im->n_folded == im->cap_folded) {
    im->cap_folded = im->cap_folded ? im->cap_folded * 2 : 32;
    im->folded = realloc(im->folded, sizeof *im->folded * (size_t)im->cap_folded);
  }
  cx_onnx_folded *f = &im->folded[im->n_folded++];
  f->name = strdup(name);
  for (int k = 0; k < CX_ONNX_VARIANTS; k++) f->v[k] = v[k];
  return CX_OK;
}

static cx_onnx_const make(cx_dtype dt, const cx_shape *s) {
  cx_onnx_const c = {.dtype = dt, .shape = *s};
  int64_t n = cx_shape_numel(s);
  if (cx_onnx_dtype_is_float(dt)) c.f = calloc((size_t)(n ? n : 1), sizeof(double));
  else c.i = calloc((size_t)(n ? n : 1), sizeof(int64_t));
  return c;
}

static cx_onnx_const copy_const(const cx_onnx_const *src) {
  cx_onnx_const c = make(src->dtype, &src->shape);
  int64_t n = cx_shape_numel(&src->shape);
  if (c.f) memcpy(c.f, src->f, sizeof(double) * (size_t)n);
  else memcpy(c.i, src->i, sizeof(int64_t) * (size_t)n);
  return c;
}

/* A double as int64, saturating (and NaN as 0): a malformed model's value must not be undefined
 * behaviour. */
static int64_t to_i64(double x) {
  if (!(x == x)) return 0;
  if (x >= 9.2e18) return INT64_MAX;
  if (x <= -9.2e18) return INT64_MIN;
  return (int64_t)x;
}
/* Integer arithmetic as ONNX Runtime's int64 does it: wrapping, never undefined. */
static int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static int64_t wrap_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

static double get_f(const cx_onnx_const *c, int64_t k) { return c->f ? c->f[k] : (double)c->i[k]; }
static int64_t get_i(const cx_onnx_const *c, int64_t k) { return c->i ? c->i[k] : to_i64(c->f[k]); }
static void set(cx_onnx_const *c, int64_t k, double f, int64_t i) {
  if (c->f) c->f[k] = f;
  else c->i[k] = i;
}

bool cx_onnx_input_const(cx_onnx_importer *im, const char *name, int variant, cx_onnx_const *out) {
  name = cx_onnx_resolve_alias(im, name);
  const cx_onnx_folded *f = cx_onnx_find_folded(im, name);
  if (f) {
    *out = copy_const(&f->v[variant]);
    return true;
  }
  int v = cx_graph_find_value(im->g, name);
  if (v >= 0) {
    const cx_value *x = &im->g->values[v];
    if (x->kind != CX_VALUE_CONST || !x->init) return false;
    *out = make(x->dtype, &x->shape);
    for (int64_t k = 0; k < cx_shape_numel(&x->shape); k++)
      set(out, k, cx_dtype_load(x->dtype, x->init, (size_t)k),
          x->dtype == CX_S64 ? ((int64_t *)x->init)[k] : (int64_t)cx_dtype_load(x->dtype, x->init, (size_t)k));
    return true;
  }
  const Onnx__TensorProto *t = cx_onnx_find_initializer(im, name);
  return t && cx_onnx_tensor_const(t, im->base_dir, name, out) == CX_OK;
}

/* The shape of any known value in one variant (graph values, folded constants, initializers). */
static bool known_shape(cx_onnx_importer *im, const char *name, int variant, cx_shape *s) {
  name = cx_onnx_resolve_alias(im, name);
  const cx_onnx_folded *f = cx_onnx_find_folded(im, name);
  if (f) return *s = f->v[variant].shape, true;
  int v = cx_graph_find_value(im->g, name);
  if (v >= 0) {
    if (im->g->values[v].kind == CX_VALUE_ACT) {
      if (v >= im->cap_shape) return false;
      *s = im->shape[variant][v];
    } else {
      *s = im->g->values[v].shape;
      for (int d = 0; d < s->ndim; d++)
        if (s->d[d] < 0) s->d[d] = variant + 1;
    }
    return true;
  }
  const Onnx__TensorProto *t = cx_onnx_find_initializer(im, name);
  if (!t || t->n_dims > CX_MAX_DIMS) return false;
  s->ndim = (int)t->n_dims;
  for (size_t d = 0; d < t->n_dims; d++) s->d[d] = t->dims[d];
  return true;
}

bool cx_onnx_can_fold(cx_onnx_importer *im, const Onnx__NodeProto *n) {
  if (!n->op_type || !is_fold_op(n->op_type)) return false;
  if (!strcmp(n->op_type, "Shape")) {
    cx_shape s;
    return n->n_input == 1 && known_shape(im, n->input[0], 0, &s);
  }
  /* A transposed or expanded float initializer is a weight (MatMul's in a transformer export,
   * ViT's class token): it stays a node so that it stays a parameter. Computed tables (F.pad's
   * pads, Swin's window mask) are shape arithmetic and fold. */
  bool weights_stay = !strcmp(n->op_type, "Transpose") || !strcmp(n->op_type, "Expand");
  for (size_t k = 0; k < n->n_input; k++) {
    if (!*n->input[k]) continue;
    cx_onnx_const c;
    if (!cx_onnx_input_const(im, n->input[k], 0, &c)) return false;
    bool small = cx_shape_numel(&c.shape) <= MAX_FOLD_ELEMENTS;
    bool weight = cx_onnx_dtype_is_float(c.dtype) &&
                  !cx_onnx_find_folded(im, cx_onnx_resolve_alias(im, n->input[k]));
    cx_onnx_const_free(&c);
    if (!small || (weights_stay && weight)) return false;
  }
  return true;
}

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t k = 0; k < n->n_attribute; k++)
    if (n->attribute[k]->name && !strcmp(n->attribute[k]->name, name)) return n->attribute[k];
  return NULL;
}

static int64_t attr_int(const Onnx__NodeProto *n, const char *name, int64_t fallback) {
  const Onnx__AttributeProto *a = attr(n, name);
  return a && a->has_i ? a->i : fallback;
}

/* Axes from the attribute (older opsets) or the second input (newer ones). */
static int get_axes(const Onnx__NodeProto *n, const cx_onnx_const *in, int n_in, int64_t *axes) {
  const Onnx__AttributeProto *a = attr(n, "axes");
  if (a) {
    if (a->n_ints > CX_MAX_DIMS) return -1;
    for (size_t k = 0; k < a->n_ints; k++) axes[k] = a->ints[k];
    return (int)a->n_ints;
  }
  if (n_in < 2 || (!in[1].i && !in[1].f)) return 0;
  int64_t count = cx_shape_numel(&in[1].shape);
  if (count > CX_MAX_DIMS) return -1;
  for (int k = 0; k < count; k++) axes[k] = get_i(&in[1], k);
  return (int)count;
}

static cx_status bad(const Onnx__NodeProto *n, const char *why) {
  return cx_fail(CX_ERR_FORMAT, "node '%s' (%s): %s", n->name ? n->name : "", n->op_type, why);
}

/* Whether a folded result of shape s stays small (counted without overflow). */
static cx_status fits(const Onnx__NodeProto *n, const cx_shape *s) {
  int64_t count;
  if (!cx_onnx_numel(s->d, (size_t)s->ndim, MAX_FOLD_ELEMENTS, &count))
    return bad(n, "the folded value would be too large (or has a negative dimension)");
  return CX_OK;
}

static cx_status fold_broadcast(const Onnx__NodeProto *n, const cx_onnx_const *a,
                                const cx_onnx_const *b, const cx_onnx_const *c3, cx_onnx_const *out) {
  cx_shape s;
  CX_TRY(cx_shape_broadcast(&a->shape, &b->shape, &s));
  if (c3) CX_TRY(cx_shape_broadcast(&s, &c3->shape, &s));
  CX_TRY(fits(n, &s));
  const char *op = n->op_type;
  cx_dtype dt = !strcmp(op, "Equal") ? CX_BOOL : !strcmp(op, "Where") ? b->dtype : a->dtype;
  bool fmod_mode = attr_int(n, "fmod", 0) != 0;
  *out = make(dt, &s);
  int64_t total = cx_shape_numel(&s), idx[CX_MAX_DIMS] = {0};
  for (int64_t k = 0; k < total; k++) {
    int64_t rem = k, ia = 0, ib = 0, ic = 0, sa = 1, sb = 1, sc = 1;
    for (int d = s.ndim - 1; d >= 0; d--) {
      idx[d] = rem % s.d[d];
      rem /= s.d[d];
      int da = d - (s.ndim - a->shape.ndim), db = d - (s.ndim - b->shape.ndim);
      if (da >= 0) ia += (a->shape.d[da] == 1 ? 0 : idx[d]) * sa, sa *= a->shape.d[da];
      if (db >= 0) ib += (b->shape.d[db] == 1 ? 0 : idx[d]) * sb, sb *= b->shape.d[db];
      if (c3) {
        int dc = d - (s.ndim - c3->shape.ndim);
        if (dc >= 0) ic += (c3->shape.d[dc] == 1 ? 0 : idx[d]) * sc, sc *= c3->shape.d[dc];
      }
    }
    double x = get_f(a, ia), y = get_f(b, ib);
    int64_t xi = get_i(a, ia), yi = get_i(b, ib);
    if (!strcmp(op, "Add")) set(out, k, x + y, wrap_add(xi, yi));
    else if (!strcmp(op, "Sub")) set(out, k, x - y, wrap_sub(xi, yi));
    else if (!strcmp(op, "Mul")) set(out, k, x * y, wrap_mul(xi, yi));
    else if (!strcmp(op, "Equal")) set(out, k, 0, out->f ? 0 : (a->f ? x == y : xi == yi));
    else if (!strcmp(op, "Where")) set(out, k, get_i(a, ia) ? y : get_f(c3, ic), xi ? yi : get_i(c3, ic));
    else if (!strcmp(op, "Expand")) set(out, k, x, xi); /* b is the target shape's zeros */
    else if (!strcmp(op, "Pow")) set(out, k, pow(x, y), to_i64(pow((double)xi, (double)yi)));
    else if (!strcmp(op, "Mod")) {
      if (!out->f && yi == 0) return bad(n, "integer modulo by zero in constant folding");
      /* fmod = 0: the remainder takes the divisor's sign, as Python's %; 1: the dividend's */
      double r = out->f ? fmod(x, y) : 0;
      int64_t ri = out->f ? 0 : yi == -1 ? 0 : xi % yi;
      if (!fmod_mode && out->f && r != 0 && (r < 0) != (y < 0)) r += y;
      if (!fmod_mode && !out->f && ri != 0 && (ri < 0) != (yi < 0)) ri += yi;
      set(out, k, r, ri);
    }
    else { /* Div: integer division truncates, as ONNX Runtime's does */
      if (!out->f && yi == 0) return bad(n, "integer division by zero in constant folding");
      bool overflows = !out->f && xi == INT64_MIN && yi == -1;
      set(out, k, x / y, out->f ? 0 : overflows ? INT64_MIN : xi / yi);
    }
  }
  return CX_OK;
}

static cx_status fold_gather(const Onnx__NodeProto *n, const cx_onnx_const *data,
                             const cx_onnx_const *ind, cx_onnx_const *out) {
  int rank = data->shape.ndim;
  int64_t axis = attr_int(n, "axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return bad(n, "axis out of range");
  if (rank - 1 + ind->shape.ndim > CX_MAX_DIMS) return bad(n, "too many dimensions");
  cx_shape s = {0};
  for (int d = 0; d < axis; d++) s.d[s.ndim++] = data->shape.d[d];
  for (int d = 0; d < ind->shape.ndim; d++) s.d[s.ndim++] = ind->shape.d[d];
  for (int d = (int)axis + 1; d < rank; d++) s.d[s.ndim++] = data->shape.d[d];
  CX_TRY(fits(n, &s));
  *out = make(data->dtype, &s);
  int64_t outer = 1, inner = 1, dim = data->shape.d[axis], ni = cx_shape_numel(&ind->shape);
  for (int d = 0; d < axis; d++) outer *= data->shape.d[d];
  for (int d = (int)axis + 1; d < rank; d++) inner *= data->shape.d[d];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < ni; j++) {
      int64_t at = get_i(ind, j);
      if (at < 0) at += dim;
      if (at < 0 || at >= dim) return bad(n, "index out of range");
      for (int64_t r = 0; r < inner; r++) {
        int64_t src = (o * dim + at) * inner + r, dst = (o * ni + j) * inner + r;
        set(out, dst, get_f(data, src), get_i(data, src));
      }
    }
  return CX_OK;
}

static cx_status fold_squeeze(const Onnx__NodeProto *n, const cx_onnx_const *in, int n_in,
                              bool unsqueeze, cx_onnx_const *out) {
  int64_t axes[CX_MAX_DIMS];
  int na = get_axes(n, in, n_in, axes);
  if (na < 0) return bad(n, "more axes than dimensions");
  const cx_shape *x = &in[0].shape;
  int rank = unsqueeze ? x->ndim + na : x->ndim;
  if (rank > CX_MAX_DIMS) return bad(n, "too many dimensions");
  bool listed[CX_MAX_DIMS] = {false};
  for (int k = 0; k < na; k++) {
    int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k];
    if (a < 0 || a >= rank || listed[a]) return bad(n, "an axis is out of range or repeated");
    if (!unsqueeze && x->d[a] != 1) return bad(n, "squeezes a dimension that is not 1");
    listed[a] = true;
  }
  cx_shape s = {0};
  for (int d = 0, src = 0; d < rank; d++) {
    if (unsqueeze) s.d[s.ndim++] = listed[d] ? 1 : x->d[src++];
    else if (!(listed[d] || (na == 0 && x->d[d] == 1))) s.d[s.ndim++] = x->d[d];
  }
  *out = copy_const(&in[0]);
  out->shape = s;
  return CX_OK;
}

static cx_status fold_concat(const Onnx__NodeProto *n, const cx_onnx_const *in, int n_in,
                             cx_onnx_const *out) {
  int rank = in[0].shape.ndim;
  int64_t axis = attr_int(n, "axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return bad(n, "axis out of range");
  cx_shape s = in[0].shape;
  s.d[axis] = 0;
  for (int k = 0; k < n_in; k++) {
    bool same = in[k].shape.ndim == rank && (in[k].i || in[k].f);
    for (int d = 0; same && d < rank; d++) same = d == axis || in[k].shape.d[d] == s.d[d];
    if (!same) return bad(n, "inputs differ in rank or in a dimension other than the axis");
    s.d[axis] += in[k].shape.d[axis];
  }
  CX_TRY(fits(n, &s));
  *out = make(in[0].dtype, &s);
  int64_t outer = 1, inner = 1, at = 0;
  for (int d = 0; d < axis; d++) outer *= s.d[d];
  for (int d = (int)axis + 1; d < rank; d++) inner *= s.d[d];
  for (int k = 0; k < n_in; k++) {
    int64_t w = in[k].shape.d[axis] * inner;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < w; j++)
        set(out, o * s.d[axis] * inner + at + j, get_f(&in[k], o * w + j), get_i(&in[k], o * w + j));
    at += w;
  }
  return CX_OK;
}

/* One axis of a folded Slice, clamped as the ONNX spec says (the same rule as the op's own,
 * core/ops/shape.c); the count of elements it keeps. */
static int64_t fold_slice_axis(int64_t dim, int64_t *start, int64_t end, int64_t step) {
  if (*start < 0) *start = *start < -dim ? -1 : *start + dim;
  if (end < 0) end = end < -dim ? -1 : end + dim;
  int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? dim : dim - 1;
  *start = *start < lo ? lo : *start > hi ? hi : *start;
  end = end < lo ? lo : end > hi ? hi : end;
  int64_t count = step > 0 ? (end - *start) / step + ((end - *start) % step != 0)
                           : (*start - end) / -step + ((*start - end) % -step != 0);
  return count < 0 ? 0 : count;
}

/* Slice of a constant over any of its axes, with steps (exporters reverse F.pad's pads with a
 * step -1 Slice of a [k, 2] table). */
static cx_status fold_slice(const Onnx__NodeProto *n, const cx_onnx_const *in, int n_in,
                            cx_onnx_const *out) {
  const cx_shape *x = &in[0].shape;
  if (n_in < 3) return bad(n, "only slices with input starts/ends fold");
  int64_t na = cx_shape_numel(&in[1].shape);
  for (int k = 2; k < n_in && k < 5; k++)
    if ((in[k].i || in[k].f) && cx_shape_numel(&in[k].shape) != na)
      return bad(n, "starts, ends, axes and steps need one value per sliced axis");
  if (na > x->ndim) return bad(n, "more sliced axes than the input has");
  int64_t start[CX_MAX_DIMS], step[CX_MAX_DIMS];
  cx_shape s = *x;
  bool seen[CX_MAX_DIMS] = {false};
  for (int d = 0; d < x->ndim; d++) start[d] = 0, step[d] = 1;
  for (int64_t k = 0; k < na; k++) {
    int64_t ax = n_in > 3 && (in[3].i || in[3].f) ? get_i(&in[3], k) : k;
    if (ax < 0) ax += x->ndim;
    if (ax < 0 || ax >= x->ndim || seen[ax]) return bad(n, "an axis is out of range or repeated");
    seen[ax] = true;
    step[ax] = n_in > 4 && (in[4].i || in[4].f) ? get_i(&in[4], k) : 1;
    if (step[ax] == 0 || step[ax] == INT64_MIN) return bad(n, "step 0 (or out of range)");
    start[ax] = get_i(&in[1], k);
    s.d[ax] = fold_slice_axis(x->d[ax], &start[ax], get_i(&in[2], k), step[ax]);
  }
  *out = make(in[0].dtype, &s);
  int64_t total = cx_shape_numel(&s);
  for (int64_t k = 0; k < total; k++) {
    int64_t rem = k, src = 0, stride = 1;
    for (int d = s.ndim - 1; d >= 0; d--) {
      src += (start[d] + rem % s.d[d] * step[d]) * stride;
      rem /= s.d[d];
      stride *= x->d[d];
    }
    set(out, k, get_f(&in[0], src), get_i(&in[0], src));
  }
  return CX_OK;
}

/* Transpose of a constant (the same pads table, rows and columns swapped). */
static cx_status fold_transpose(const Onnx__NodeProto *n, const cx_onnx_const *x,
                                cx_onnx_const *out) {
  int r = x->shape.ndim;
  int64_t perm[CX_MAX_DIMS];
  const Onnx__AttributeProto *a = attr(n, "perm");
  if (a && (int)a->n_ints != r) return bad(n, "perm needs one entry per dimension");
  bool seen[CX_MAX_DIMS] = {false};
  for (int d = 0; d < r; d++) {
    perm[d] = a ? a->ints[d] : r - 1 - d;
    if (perm[d] < 0) perm[d] += r;
    if (perm[d] < 0 || perm[d] >= r || seen[perm[d]]) return bad(n, "perm is not a permutation");
    seen[perm[d]] = true;
  }
  cx_shape s = {.ndim = r};
  int64_t stride[CX_MAX_DIMS], st = 1;
  for (int d = r - 1; d >= 0; d--) stride[d] = st, st *= x->shape.d[d];
  for (int d = 0; d < r; d++) s.d[d] = x->shape.d[perm[d]];
  *out = make(x->dtype, &s);
  for (int64_t k = 0; k < cx_shape_numel(&s); k++) {
    int64_t rem = k, src = 0;
    for (int d = r - 1; d >= 0; d--) {
      src += rem % s.d[d] * stride[perm[d]];
      rem /= s.d[d];
    }
    set(out, k, get_f(x, src), get_i(x, src));
  }
  return CX_OK;
}

/* Expand of a constant: numpy broadcasting of in[0] against the shape in[1]. */
static cx_status fold_expand(const Onnx__NodeProto *n, const cx_onnx_const *in, cx_onnx_const *out) {
  int64_t k = cx_shape_numel(&in[1].shape);
  if (k > CX_MAX_DIMS) return bad(n, "the shape has too many dimensions");
  cx_shape t = {.ndim = (int)k};
  for (int d = 0; d < t.ndim; d++) {
    t.d[d] = get_i(&in[1], d);
    if (t.d[d] < 0) return bad(n, "the shape has a negative dimension");
  }
  CX_TRY(fits(n, &t));
  cx_onnx_const zeros = make(CX_S64, &t);
  cx_status s = fold_broadcast(n, &in[0], &zeros, NULL, out);
  cx_onnx_const_free(&zeros);
  return s;
}

/* ScatterND of constants (reduction "none"): a copy of data with updates written at the index
 * tuples (the last axis of indices), in order. Swin's shifted-window mask is built so. */
static cx_status fold_scatter_nd(const Onnx__NodeProto *n, const cx_onnx_const *in, int n_in,
                                 cx_onnx_const *out) {
  const Onnx__AttributeProto *r = attr(n, "reduction");
  if (r && r->s.len && !(r->s.len == 4 && !memcmp(r->s.data, "none", 4)))
    return bad(n, "only reduction \"none\" folds");
  if (n_in < 3) return bad(n, "data, indices and updates are needed");
  const cx_shape *x = &in[0].shape, *ix = &in[1].shape, *u = &in[2].shape;
  int q = ix->ndim;
  int64_t k = q ? ix->d[q - 1] : 0;
  if (q < 1 || k < 1 || k > x->ndim || u->ndim != q - 1 + x->ndim - k)
    return bad(n, "indices and updates do not fit data (ONNX ScatterND's shapes)");
  int64_t tuples = 1, slice = 1;
  for (int d = 0; d < q - 1; d++) {
    if (u->d[d] != ix->d[d]) return bad(n, "updates do not match indices");
    tuples *= ix->d[d];
  }
  for (int d = (int)k; d < x->ndim; d++) {
    if (u->d[q - 1 + d - k] != x->d[d]) return bad(n, "updates do not match data");
    slice *= x->d[d];
  }
  *out = copy_const(&in[0]);
  for (int64_t t = 0; t < tuples; t++) {
    int64_t at = 0;
    for (int64_t j = 0; j < k; j++) {
      int64_t v = get_i(&in[1], t * k + j), dim = x->d[j];
      if (v < 0) v += dim;
      if (v < 0 || v >= dim) return bad(n, "an index is out of range");
      at = at * dim + v;
    }
    for (int64_t e = 0; e < slice; e++)
      set(out, at * slice + e, get_f(&in[2], t * slice + e), get_i(&in[2], t * slice + e));
  }
  return CX_OK;
}

static cx_status fold_const_node(const cx_onnx_importer *im, const Onnx__NodeProto *n,
                                 cx_onnx_const *out) {
  const Onnx__AttributeProto *a;
  if ((a = attr(n, "value")) && a->t)
    return cx_onnx_tensor_const(a->t, im->base_dir, n->output[0], out);
  cx_shape scalar = {0}, vec = {1, {0}};
  if ((a = attr(n, "value_float"))) *out = make(CX_F32, &scalar), out->f[0] = a->f;
  else if ((a = attr(n, "value_int"))) *out = make(CX_S64, &scalar), out->i[0] = a->i;
  else if ((a = attr(n, "value_floats"))) {
    vec.d[0] = (int64_t)a->n_floats;
    *out = make(CX_F32, &vec);
    for (size_t k = 0; k < a->n_floats; k++) out->f[k] = a->floats[k];
  } else if ((a = attr(n, "value_ints"))) {
    vec.d[0] = (int64_t)a->n_ints;
    *out = make(CX_S64, &vec);
    for (size_t k = 0; k < a->n_ints; k++) out->i[k] = a->ints[k];
  } else
    return bad(n, "a Constant needs value, value_float(s) or value_int(s) (sparse and string "
                  "constants are not supported)");
  return CX_OK;
}

static cx_status fold_one(cx_onnx_importer *im, const Onnx__NodeProto *n, int variant,
                          cx_onnx_const *in, int n_in, cx_onnx_const *out) {
  const char *op = n->op_type;
  if (!strcmp(op, "Constant")) return fold_const_node(im, n, out);
  if (!strcmp(op, "Shape")) {
    cx_shape s, v = {1, {0}};
    known_shape(im, n->input[0], variant, &s);
    int64_t start = attr_int(n, "start", 0), end = attr_int(n, "end", s.ndim);
    if (start < 0) start += s.ndim;
    if (end < 0) end += s.ndim;
    start = start < 0 ? 0 : start > s.ndim ? s.ndim : start;
    end = end < start ? start : end > s.ndim ? s.ndim : end;
    v.d[0] = end - start;
    *out = make(CX_S64, &v);
    for (int64_t k = start; k < end; k++) out->i[k - start] = s.d[k];
    return CX_OK;
  }
  if (!strcmp(op, "Identity")) return *out = copy_const(&in[0]), CX_OK;
  if (!strcmp(op, "Gather")) return fold_gather(n, &in[0], &in[1], out);
  if (!strcmp(op, "Unsqueeze")) return fold_squeeze(n, in, n_in, true, out);
  if (!strcmp(op, "Squeeze")) return fold_squeeze(n, in, n_in, false, out);
  if (!strcmp(op, "Concat")) return fold_concat(n, in, n_in, out);
  if (!strcmp(op, "Slice")) return fold_slice(n, in, n_in, out);
  if (!strcmp(op, "Transpose")) return fold_transpose(n, &in[0], out);
  if (!strcmp(op, "Where")) return fold_broadcast(n, &in[0], &in[1], &in[2], out);
  if (!strcmp(op, "Cast")) {
    cx_dtype to;
    if (!cx_onnx_dtype((int32_t)attr_int(n, "to", 1), &to)) return bad(n, "unsupported 'to' type");
    *out = make(to, &in[0].shape);
    for (int64_t k = 0; k < cx_shape_numel(&in[0].shape); k++)
      set(out, k, get_f(&in[0], k), get_i(&in[0], k));
    return CX_OK;
  }
  if (!strcmp(op, "Not")) {
    *out = make(CX_BOOL, &in[0].shape);
    for (int64_t k = 0; k < cx_shape_numel(&in[0].shape); k++) set(out, k, 0, !get_i(&in[0], k));
    return CX_OK;
  }
  if (!strcmp(op, "Expand")) return fold_expand(n, in, out);
  if (!strcmp(op, "ScatterND")) return fold_scatter_nd(n, in, n_in, out);
  if (!strcmp(op, "Neg") || !strcmp(op, "Floor") || !strcmp(op, "Ceil") || !strcmp(op, "Sqrt")) {
    *out = copy_const(&in[0]);
    for (int64_t k = 0; k < cx_shape_numel(&in[0].shape); k++) {
      double x = get_f(&in[0], k);
      double y = op[0] == 'N' ? -x : op[0] == 'F' ? floor(x) : op[0] == 'C' ? ceil(x) : sqrt(x);
      set(out, k, y, op[0] == 'N' ? wrap_sub(0, get_i(&in[0], k)) : to_i64(y));
    }
    return CX_OK;
  }
  if (!strcmp(op, "ConstantOfShape")) {
    cx_shape s = {.ndim = (int)cx_shape_numel(&in[0].shape)};
    if (s.ndim > CX_MAX_DIMS) return bad(n, "too many dimensions");
    for (int d = 0; d < s.ndim; d++) s.d[d] = get_i(&in[0], d);
    CX_TRY(fits(n, &s));
    cx_onnx_const v = {0};
    const Onnx__AttributeProto *a = attr(n, "value");
    if (a && a->t) CX_TRY(cx_onnx_tensor_const(a->t, im->base_dir, "ConstantOfShape value", &v));
    if (a && a->t && cx_shape_numel(&v.shape) != 1) {
      cx_onnx_const_free(&v);
      return bad(n, "the value attribute must hold one element");
    }
    *out = make(a && a->t ? v.dtype : CX_F32, &s);
    for (int64_t k = 0; k < cx_shape_numel(&s); k++)
      set(out, k, v.f ? v.f[0] : 0, v.i ? v.i[0] : 0);
    cx_onnx_const_free(&v);
    return CX_OK;
  }
  if (!strcmp(op, "Range")) {
    for (int k = 0; k < 3; k++)
      if (cx_shape_numel(&in[k].shape) != 1) return bad(n, "start, limit and delta must be scalars");
    double s0 = get_f(&in[0], 0), lim = get_f(&in[1], 0), d = get_f(&in[2], 0);
    if (d == 0) return bad(n, "delta 0");
    double span = fmax(ceil((lim - s0) / d), 0);
    if (!(span <= MAX_FOLD_ELEMENTS)) return bad(n, "the range is too large to fold");
    int64_t count = (int64_t)span;
    cx_shape s = {1, {count}};
    *out = make(in[0].dtype, &s);
    for (int64_t k = 0; k < count; k++)
      set(out, k, s0 + (double)k * d, wrap_add(get_i(&in[0], 0), wrap_mul(k, get_i(&in[2], 0))));
    return CX_OK;
  }
  if (!strcmp(op, "Reshape")) {
    if (cx_shape_numel(&in[1].shape) > CX_MAX_DIMS) return bad(n, "too many dimensions");
    cx_shape s = {.ndim = (int)cx_shape_numel(&in[1].shape)};
    int64_t known = 1, infer_at = -1;
    for (int d = 0; d < s.ndim; d++) {
      s.d[d] = get_i(&in[1], d);
      if (s.d[d] == 0 && !attr_int(n, "allowzero", 0)) {
        if (d >= in[0].shape.ndim) return bad(n, "a 0 in the shape has no input dimension to copy");
        s.d[d] = in[0].shape.d[d];
      }
      if (s.d[d] == -1 && infer_at < 0) infer_at = d;
      else if (s.d[d] < 0) return bad(n, "the shape has a negative dimension or more than one -1");
      else if (s.d[d] > 0 && known > MAX_FOLD_ELEMENTS / s.d[d]) return bad(n, "element count changes");
      else known *= s.d[d];
    }
    if (infer_at >= 0) s.d[infer_at] = known ? cx_shape_numel(&in[0].shape) / known : 0;
    if (cx_shape_numel(&s) != cx_shape_numel(&in[0].shape)) return bad(n, "element count changes");
    *out = copy_const(&in[0]);
    out->shape = s;
    return CX_OK;
  }
  return fold_broadcast(n, &in[0], &in[1], NULL, out);
}

cx_status cx_onnx_fold(cx_onnx_importer *im, const Onnx__NodeProto *n) {
  if (n->n_output < 1) return bad(n, "no outputs");
  int n_in = (int)n->n_input;
  if (n_in > 32) return bad(n, "too many inputs to fold");
  cx_onnx_const res[CX_ONNX_VARIANTS] = {{0}};
  cx_status s = CX_OK;
  bool shape = !strcmp(n->op_type, "Shape");
  int need = shape ? 0 : cx_onnx_required_inputs(n->op_type, im->opset);
  if (n_in < need) return bad(n, "an input it requires is missing");
  for (int v = 0; v < CX_ONNX_VARIANTS && s == CX_OK; v++) {
    cx_onnx_const in[32] = {{0}};
    for (int k = 0; k < n_in && s == CX_OK; k++) {
      bool loaded = *n->input[k] && !shape && cx_onnx_input_const(im, n->input[k], v, &in[k]);
      if (*n->input[k] && !shape && !loaded) s = bad(n, "an input is not known at import");
      if (!*n->input[k] && k < need) s = bad(n, "an input it requires is empty");
    }
    if (s == CX_OK) s = fold_one(im, n, v, in, n_in, &res[v]);
    for (int k = 0; k < n_in; k++) cx_onnx_const_free(&in[k]);
  }
  if (s != CX_OK) {
    for (int v = 0; v < CX_ONNX_VARIANTS; v++) cx_onnx_const_free(&res[v]);
    return s;
  }
  return cx_onnx_add_folded(im, n->output[0], res);
}
