/* References of the shape family, in double, written from the ONNX spec: every output element is
 * found by mapping its index back to the input index it comes from. */
#include <string.h>

#include "../../core/rng.h"
#include "ref.h"

static void unravel(int64_t i, const cx_shape *s, int64_t *idx) {
  for (int d = s->ndim - 1; d >= 0; d--) {
    idx[d] = i % s->d[d];
    i /= s->d[d];
  }
}

static int64_t ravel(const int64_t *idx, const cx_shape *s) {
  int64_t i = 0;
  for (int d = 0; d < s->ndim; d++) i = i * s->d[d] + idx[d];
  return i;
}

static int64_t count(const cx_ref_tensor *t) { return cx_shape_numel(&t->shape); }

static bool present(const cx_ref_args *a, int i) { return i < a->n_in && a->in[i].data; }

/* An integer operand that arrived as double (INT64_MAX and friends included). */
static int64_t as_int(double v) {
  if (v > 4e18) return INT64_C(4000000000000000000);
  if (v < -4e18) return -INT64_C(4000000000000000000);
  return (int64_t)v;
}

static int64_t norm_axis(int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

/* ---- copies ---- */

static cx_status ref_copy(const cx_ref_args *a) {
  memcpy(a->out[0].data, a->in[0].data, sizeof(double) * (size_t)count(&a->out[0]));
  return CX_OK;
}

static cx_status ref_dropout(const cx_ref_args *a) {
  ref_copy(a);
  for (int64_t i = 0; a->n_out > 1 && i < count(&a->out[1]); i++) a->out[1].data[i] = 1.0;
  return CX_OK;
}

/* ---- Transpose: Y[i_0, ..., i_r] = X[j] with j[perm[d]] = i[d] ---- */

static cx_status ref_transpose(const cx_ref_args *a) {
  const cx_ref_tensor *x = &a->in[0];
  cx_ref_tensor *y = &a->out[0];
  const int64_t *perm;
  int r = x->shape.ndim, k = cx_node_ints(a->node, "perm", &perm);
  int64_t yi[CX_MAX_DIMS], xi[CX_MAX_DIMS];
  for (int64_t i = 0; i < count(y); i++) {
    unravel(i, &y->shape, yi);
    for (int d = 0; d < r; d++) xi[k ? perm[d] : r - 1 - d] = yi[d];
    y->data[i] = x->data[ravel(xi, &x->shape)];
  }
  return CX_OK;
}

/* ---- Concat, SplitGrad (absent inputs are zeros), Split ---- */

static cx_status ref_concat(const cx_ref_args *a) {
  cx_ref_tensor *y = &a->out[0];
  int64_t axis = norm_axis(cx_node_int(a->node, "axis", 0), y->shape.ndim), at = 0, idx[CX_MAX_DIMS];
  const int64_t *sizes = NULL;
  cx_node_ints(a->node, "split", &sizes);
  for (int k = 0; k < a->n_in; k++) {
    const cx_ref_tensor *x = &a->in[k];
    if (!x->data) {
      at += sizes[k];
      continue;
    }
    for (int64_t i = 0; i < count(x); i++) {
      unravel(i, &x->shape, idx);
      idx[axis] += at;
      y->data[ravel(idx, &y->shape)] = x->data[i];
    }
    at += x->shape.d[axis];
  }
  return CX_OK;
}

static cx_status ref_split(const cx_ref_args *a) {
  const cx_ref_tensor *x = &a->in[0];
  int64_t axis = norm_axis(cx_node_int(a->node, "axis", 0), x->shape.ndim), at = 0, idx[CX_MAX_DIMS];
  for (int k = 0; k < a->n_out; k++) {
    cx_ref_tensor *y = &a->out[k];
    for (int64_t i = 0; i < count(y); i++) {
      unravel(i, &y->shape, idx);
      idx[axis] += at;
      y->data[i] = x->data[ravel(idx, &x->shape)];
    }
    at += y->shape.d[axis];
  }
  return CX_OK;
}

/* ---- Slice, SliceGrad ---- */

/* Operand k of Slice (1 starts, 2 ends, 3 axes, 4 steps): input or, before opset 10, attribute. */
static int slice_operand(const cx_ref_args *a, int k, int64_t *v) {
  static const char *attr[] = {NULL, "starts", "ends", "axes", NULL};
  if (a->n_in == 1) {
    const int64_t *p;
    if (!attr[k] || !cx_node_attr(a->node, attr[k])) return -1;
    int n = cx_node_ints(a->node, attr[k], &p);
    memcpy(v, p, sizeof(int64_t) * (size_t)n);
    return n;
  }
  if (!present(a, k)) return -1;
  int n = (int)count(&a->in[k]);
  for (int i = 0; i < n; i++) v[i] = as_int(a->in[k].data[i]);
  return n;
}

/* Per axis of X: the first index read and the step, from the spec's clamping rules. */
static void slice_starts(const cx_ref_args *a, const cx_shape *x, int64_t *first, int64_t *step) {
  int64_t starts[CX_MAX_DIMS], ends[CX_MAX_DIMS], axes[CX_MAX_DIMS], steps[CX_MAX_DIMS];
  int n = slice_operand(a, 1, starts);
  slice_operand(a, 2, ends);
  bool has_axes = slice_operand(a, 3, axes) >= 0, has_steps = slice_operand(a, 4, steps) >= 0;
  for (int d = 0; d < x->ndim; d++) {
    first[d] = 0;
    step[d] = 1;
  }
  for (int k = 0; k < n; k++) {
    int64_t ax = norm_axis(has_axes ? axes[k] : k, x->ndim), dim = x->d[ax];
    int64_t s = starts[k], st = has_steps ? steps[k] : 1;
    if (s < 0) s += dim;
    if (st > 0) s = s < 0 ? 0 : s > dim ? dim : s;
    else s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
    first[ax] = s;
    step[ax] = st;
  }
}

static cx_status ref_slice(const cx_ref_args *a) {
  const cx_ref_tensor *x = &a->in[0];
  cx_ref_tensor *y = &a->out[0];
  int64_t first[CX_MAX_DIMS], step[CX_MAX_DIMS], yi[CX_MAX_DIMS], xi[CX_MAX_DIMS];
  slice_starts(a, &x->shape, first, step);
  for (int64_t i = 0; i < count(y); i++) {
    unravel(i, &y->shape, yi);
    for (int d = 0; d < y->shape.ndim; d++) xi[d] = first[d] + yi[d] * step[d];
    y->data[i] = x->data[ravel(xi, &x->shape)];
  }
  return CX_OK;
}

static cx_status ref_slice_grad(const cx_ref_args *a) {
  const cx_ref_tensor *dy = &a->in[0];
  cx_ref_tensor *dx = &a->out[0];
  int64_t first[CX_MAX_DIMS], step[CX_MAX_DIMS], yi[CX_MAX_DIMS], xi[CX_MAX_DIMS];
  slice_starts(a, &dx->shape, first, step);
  for (int64_t i = 0; i < count(dy); i++) {
    unravel(i, &dy->shape, yi);
    for (int d = 0; d < dy->shape.ndim; d++) xi[d] = first[d] + yi[d] * step[d];
    dx->data[ravel(xi, &dx->shape)] += dy->data[i];
  }
  return CX_OK;
}

/* ---- Pad, PadGrad ---- */

/* Pads before each axis of X (the after-pads follow from the output shape). */
static void pad_befores(const cx_ref_args *a, int rank, int64_t *before) {
  int64_t pads[2 * CX_MAX_DIMS], axes[CX_MAX_DIMS];
  int np, na = rank;
  if (a->n_in == 1) {
    const int64_t *p;
    np = cx_node_ints(a->node, "pads", &p);
    memcpy(pads, p, sizeof(int64_t) * (size_t)np);
  } else {
    np = (int)count(&a->in[1]);
    for (int i = 0; i < np; i++) pads[i] = as_int(a->in[1].data[i]);
  }
  if (present(a, 3)) {
    na = (int)count(&a->in[3]);
    for (int i = 0; i < na; i++) axes[i] = norm_axis(as_int(a->in[3].data[i]), rank);
  } else {
    for (int i = 0; i < na; i++) axes[i] = i;
  }
  for (int d = 0; d < rank; d++) before[d] = 0;
  for (int k = 0; k < na && k < np; k++) before[axes[k]] = pads[k];
}

/* Index along an axis of length n that padded position p reads; -1 for the constant. */
static int64_t pad_read(const char *mode, int64_t p, int64_t before, int64_t n) {
  int64_t i = p - before;
  if (i >= 0 && i < n) return i;
  if (!strcmp(mode, "constant")) return -1;
  if (!strcmp(mode, "edge")) return i < 0 ? 0 : n - 1;
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i; /* reflect, without the edge */
  return i;
}

/* X index that Y index yi reads, or false for the constant fill. */
static bool pad_map(const char *mode, const int64_t *before, const cx_shape *x, const int64_t *yi,
                    int64_t *xi) {
  for (int d = 0; d < x->ndim; d++) {
    xi[d] = pad_read(mode, yi[d], before[d], x->d[d]);
    if (xi[d] < 0) return false;
  }
  return true;
}

static cx_status ref_pad(const cx_ref_args *a) {
  const cx_ref_tensor *x = &a->in[0];
  cx_ref_tensor *y = &a->out[0];
  const char *mode = cx_node_string(a->node, "mode", "constant");
  double fill = present(a, 2) ? a->in[2].data[0] : cx_node_float(a->node, "value", 0.0f);
  int64_t before[CX_MAX_DIMS], yi[CX_MAX_DIMS], xi[CX_MAX_DIMS];
  pad_befores(a, x->shape.ndim, before);
  for (int64_t i = 0; i < count(y); i++) {
    unravel(i, &y->shape, yi);
    y->data[i] = pad_map(mode, before, &x->shape, yi, xi) ? x->data[ravel(xi, &x->shape)] : fill;
  }
  return CX_OK;
}

static cx_status ref_pad_grad(const cx_ref_args *a) {
  const cx_ref_tensor *dy = &a->in[0];
  cx_ref_tensor *dx = &a->out[0];
  const char *mode = cx_node_string(a->node, "mode", "constant");
  int64_t before[CX_MAX_DIMS], yi[CX_MAX_DIMS], xi[CX_MAX_DIMS];
  pad_befores(a, dx->shape.ndim, before);
  for (int64_t i = 0; i < count(dy); i++) {
    unravel(i, &dy->shape, yi);
    if (pad_map(mode, before, &dx->shape, yi, xi)) dx->data[ravel(xi, &dx->shape)] += dy->data[i];
  }
  return CX_OK;
}

/* ---- Expand: numpy broadcasting, dimensions aligned on the right ---- */

static cx_status ref_expand(const cx_ref_args *a) {
  const cx_ref_tensor *x = &a->in[0];
  cx_ref_tensor *y = &a->out[0];
  int lead = y->shape.ndim - x->shape.ndim;
  int64_t yi[CX_MAX_DIMS], xi[CX_MAX_DIMS];
  for (int64_t i = 0; i < count(y); i++) {
    unravel(i, &y->shape, yi);
    for (int d = 0; d < x->shape.ndim; d++) xi[d] = x->shape.d[d] == 1 ? 0 : yi[d + lead];
    y->data[i] = x->data[ravel(xi, &x->shape)];
  }
  return CX_OK;
}

/* ---- DropoutTrain, DropoutGrad ---- */

static float ratio_of(const cx_ref_args *a, int i) {
  return present(a, i) ? (float)a->in[i].data[0] : cx_node_float(a->node, "ratio", 0.5f);
}

static cx_status ref_dropout_train(const cx_ref_args *a) {
  float ratio = ratio_of(a, 1);
  uint64_t key = cx_rng_key(a->seed, a->step, (uint64_t)a->node_index);
  const cx_shape *s = &a->in[0].shape;
  int64_t n = count(&a->in[0]), row = s->ndim && n ? n / s->d[0] : 1;
  for (int64_t i = 0; i < n; i++) {
    double keep = cx_rng_uniform(key, cx_batch_rows_index(a->rows, row, i)) >= ratio ? 1.0 : 0.0;
    a->out[1].data[i] = keep;
    a->out[0].data[i] = a->in[0].data[i] * keep / (1.0 - ratio);
  }
  return CX_OK;
}

static cx_status ref_dropout_grad(const cx_ref_args *a) {
  double ratio = ratio_of(a, 2);
  for (int64_t i = 0; i < count(&a->in[0]); i++)
    a->out[0].data[i] = a->in[0].data[i] * a->in[1].data[i] / (1.0 - ratio);
  return CX_OK;
}

const cx_ref_entry cx_ref_shape[] = {
    {"Flatten", ref_copy},
    {"Reshape", ref_copy},
    {"Identity", ref_copy},
    {"Dropout", ref_dropout},
    {"Transpose", ref_transpose},
    {"Concat", ref_concat},
    {"SplitGrad", ref_concat},
    {"Split", ref_split},
    {"Slice", ref_slice},
    {"SliceGrad", ref_slice_grad},
    {"Pad", ref_pad},
    {"PadGrad", ref_pad_grad},
    {"Expand", ref_expand},
    {"ExpandBatch", ref_expand},
    {"DropoutTrain", ref_dropout_train},
    {"DropoutGrad", ref_dropout_grad},
    {NULL, NULL},
};
