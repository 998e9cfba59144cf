/* CPU kernels of the shape family. Data movement is dtype-agnostic (element size only), except
 * Pad and the gradient/dropout ops, which are f32. Most ops are one strided gather: the output is
 * walked row by row (rows in parallel) and each row reads the input at a fixed stride. */
#include <string.h>

#include "../../core/ops/shape.h"
#include "../../core/rng.h"
#include "cpu.h"

static int64_t numel(const cx_tensor *t) { return cx_shape_numel(&t->shape); }

/* memcpy with a constant size compiles to one move and keeps strict aliasing intact. */
static void copy_row(char *dst, const char *src, int64_t n, int64_t stride, size_t es) {
  if (stride == 1) {
    memcpy(dst, src, (size_t)n * es);
    return;
  }
  switch (es) {
  case 1: for (int64_t i = 0; i < n; i++) dst[i] = src[i * stride]; break;
  case 2: for (int64_t i = 0; i < n; i++) memcpy(dst + 2 * i, src + 2 * i * stride, 2); break;
  case 4: for (int64_t i = 0; i < n; i++) memcpy(dst + 4 * i, src + 4 * i * stride, 4); break;
  case 8: for (int64_t i = 0; i < n; i++) memcpy(dst + 8 * i, src + 8 * i * stride, 8); break;
  default: for (int64_t i = 0; i < n; i++) memcpy(dst + es * i, src + es * i * stride, es);
  }
}

/* out (contiguous, `shape`) [i0..ir] = in[base + sum i_d * stride_d] (element units). */
static void gather(void *out, const void *in, size_t es, const cx_shape *shape,
                   const int64_t *stride, int64_t base) {
  int r = shape->ndim;
  int64_t inner = r ? shape->d[r - 1] : 1, istride = r ? stride[r - 1] : 1;
  int64_t total = cx_shape_numel(shape);
  if (total == 0) return;
  int64_t rows = total / inner;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; row++) {
    int64_t off = base, rem = row;
    for (int d = r - 2; d >= 0; d--) {
      off += rem % shape->d[d] * stride[d];
      rem /= shape->d[d];
    }
    copy_row((char *)out + (size_t)(row * inner) * es, (const char *)in + (size_t)off * es, inner,
             istride, es);
  }
}

static size_t elem_size(const cx_tensor *t) { return cx_dtype_size(t->dtype); }

/* ---- Flatten, Reshape, Identity, Dropout (inference) ---- */

static cx_status run_copy(const cx_kernel_args *a) {
  if (a->out[0].data != a->in[0].data)
    memcpy(a->out[0].data, a->in[0].data, cx_tensor_nbytes(&a->out[0]));
  return CX_OK;
}

static cx_status run_dropout(const cx_kernel_args *a) {
  CX_TRY(run_copy(a));
  if (a->n_out > 1) memset(a->out[1].data, 1, cx_tensor_nbytes(&a->out[1])); /* bool: all kept */
  return CX_OK;
}

/* ---- Transpose ---- */

static cx_status run_transpose(const cx_kernel_args *a) {
  const cx_tensor *x = &a->in[0];
  int64_t st[CX_MAX_DIMS];
  cx_transpose_view(a->node, &x->shape, st);
  gather(a->out[0].data, x->data, elem_size(x), &a->out[0].shape, st, 0);
  return CX_OK;
}

/* ---- Slice, SliceGrad ---- */

static cx_status slice_plan(const cx_kernel_args *a, const cx_shape *x, cx_slice_plan *p) {
  const void *data[5] = {NULL};
  cx_shape shapes[5] = {{0}};
  for (int i = 0; i < a->n_in && i < 5; i++) {
    data[i] = a->in[i].data;
    shapes[i] = a->in[i].shape;
  }
  return cx_slice_plan_make(a->node, x, data, shapes, p);
}

static cx_status run_slice(const cx_kernel_args *a) {
  const cx_tensor *x = &a->in[0];
  cx_slice_plan p;
  CX_TRY(slice_plan(a, &x->shape, &p));
  int64_t st[CX_MAX_DIMS], base;
  cx_slice_view(&x->shape, &p, st, &base);
  gather(a->out[0].data, x->data, elem_size(x), &a->out[0].shape, st, base);
  return CX_OK;
}

/* dX is zero except where the slice read, where it is dY (each X element is read at most once). */
static cx_status run_slice_grad(const cx_kernel_args *a) {
  const cx_tensor *dy = &a->in[0], *dx = &a->out[0];
  cx_slice_plan p;
  CX_TRY(slice_plan(a, &dx->shape, &p));
  int64_t st[CX_MAX_DIMS], base;
  cx_slice_view(&dx->shape, &p, st, &base);
  float *o = cx_f32(dx);
  const float *g = cx_f32(dy);
  memset(o, 0, cx_tensor_nbytes(dx));
  int r = dy->shape.ndim;
  int64_t inner = r ? dy->shape.d[r - 1] : 1, total = numel(dy);
  if (total == 0) return CX_OK;
  int64_t rows = total / inner, is = r ? st[r - 1] : 1;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; row++) {
    int64_t off = base, rem = row;
    for (int d = r - 2; d >= 0; d--) {
      off += rem % dy->shape.d[d] * st[d];
      rem /= dy->shape.d[d];
    }
    for (int64_t j = 0; j < inner; j++) o[off + j * is] = g[row * inner + j];
  }
  return CX_OK;
}

/* ---- Concat, Split, SplitGrad ---- */

/* Copies part k (extent n along axis, at offset `at`) between the whole and one piece. */
static void move_part(char *whole, char *piece, const cx_shape *ws, int axis, int64_t at,
                      int64_t n, size_t es, bool to_whole) {
  cx_part_rows p = cx_part_rows_of(ws, axis, at, n, es);
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < p.rows; o++) {
    char *w = whole + (size_t)o * p.pitch + p.offset;
    if (!piece) memset(w, 0, p.chunk);
    else if (to_whole) memcpy(w, piece + (size_t)o * p.chunk, p.chunk);
    else memcpy(piece + (size_t)o * p.chunk, w, p.chunk);
  }
}

static int node_axis(const cx_kernel_args *a, int rank) {
  int64_t axis = cx_node_int(a->node, "axis", 0); /* range checked in infer */
  return (int)(axis < 0 ? axis + rank : axis);
}

/* Concat, and SplitGrad where a missing piece (no gradient) is zeros. */
static cx_status run_concat(const cx_kernel_args *a) {
  const cx_tensor *y = &a->out[0];
  int axis = node_axis(a, y->shape.ndim);
  const int64_t *sizes = NULL;
  cx_node_ints(a->node, "split", &sizes);
  int64_t at = 0;
  for (int k = 0; k < a->n_in; k++) {
    int64_t n = a->in[k].data ? a->in[k].shape.d[axis] : sizes[k];
    move_part(y->data, a->in[k].data, &y->shape, axis, at, n, elem_size(y), true);
    at += n;
  }
  return CX_OK;
}

static cx_status run_split(const cx_kernel_args *a) {
  const cx_tensor *x = &a->in[0];
  int axis = node_axis(a, x->shape.ndim);
  int64_t at = 0;
  for (int k = 0; k < a->n_out; k++) {
    int64_t n = a->out[k].shape.d[axis];
    move_part(x->data, a->out[k].data, &x->shape, axis, at, n, elem_size(x), false);
    at += n;
  }
  return CX_OK;
}

/* ---- Expand ---- */

static cx_status run_expand(const cx_kernel_args *a) {
  const cx_tensor *x = &a->in[0], *y = &a->out[0];
  int64_t st[CX_MAX_DIMS];
  cx_expand_view(&x->shape, &y->shape, st);
  gather(y->data, x->data, elem_size(x), &y->shape, st, 0);
  return CX_OK;
}

/* ---- Pad, PadGrad ---- */

static cx_status pad_plan(const cx_kernel_args *a, const cx_shape *x, cx_pad_plan *p) {
  const void *data[4] = {NULL};
  cx_shape shapes[4] = {{0}};
  for (int i = 0; i < a->n_in && i < 4; i++) {
    data[i] = a->in[i].data;
    shapes[i] = a->in[i].shape;
  }
  return cx_pad_plan_make(a->node, x, data, shapes, p);
}

/* Offset in X of the row an output row reads, or -1 when the row lies in constant padding. */
static int64_t pad_row_source(const cx_pad_plan *p, const cx_shape *x, const cx_shape *y,
                              const int64_t *xs, int64_t row) {
  int64_t off = 0;
  for (int d = y->ndim - 2; d >= 0; d--) {
    int64_t s = cx_pad_source(p->mode, row % y->d[d], p->before[d], x->d[d]);
    if (s < 0) return -1;
    off += s * xs[d];
    row /= y->d[d];
  }
  return off;
}

static cx_status run_pad(const cx_kernel_args *a) {
  const cx_tensor *x = &a->in[0], *y = &a->out[0];
  cx_pad_plan p;
  CX_TRY(pad_plan(a, &x->shape, &p));
  float fill = a->n_in > 2 && a->in[2].data ? *cx_f32(&a->in[2])
               : a->n_in == 1             ? cx_node_float(a->node, "value", 0.0f)
                                          : 0.0f;
  int r = y->shape.ndim;
  if (r == 0) return run_copy(a);
  int64_t xs[CX_MAX_DIMS], inner = y->shape.d[r - 1], xin = x->shape.d[r - 1];
  cx_contiguous_strides(&x->shape, xs);
  int64_t rows = inner ? numel(y) / inner : 0;
  const float *in = cx_f32(x);
  float *out = cx_f32(y);
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; row++) {
    int64_t off = pad_row_source(&p, &x->shape, &y->shape, xs, row);
    float *o = out + row * inner;
    for (int64_t j = 0; j < inner; j++) {
      int64_t s = off < 0 ? -1 : cx_pad_source(p.mode, j, p.before[r - 1], xin);
      o[j] = s < 0 ? fill : in[off + s];
    }
  }
  return CX_OK;
}

/* Adjoint of Pad: each dY element adds to the X element it was read from. Constant padding reads
 * each X element once, so its rows run in parallel; reflect and edge read some several times. */
static cx_status run_pad_grad(const cx_kernel_args *a) {
  const cx_tensor *dy = &a->in[0], *dx = &a->out[0];
  cx_pad_plan p;
  CX_TRY(pad_plan(a, &dx->shape, &p));
  float *o = cx_f32(dx);
  const float *g = cx_f32(dy);
  memset(o, 0, cx_tensor_nbytes(dx));
  int r = dy->shape.ndim;
  if (r == 0) {
    o[0] = g[0];
    return CX_OK;
  }
  int64_t xs[CX_MAX_DIMS], inner = dy->shape.d[r - 1], xin = dx->shape.d[r - 1];
  cx_contiguous_strides(&dx->shape, xs);
  int64_t rows = inner ? numel(dy) / inner : 0;
#pragma omp parallel for schedule(static) if (p.mode == CX_PAD_CONSTANT)
  for (int64_t row = 0; row < rows; row++) {
    int64_t off = pad_row_source(&p, &dx->shape, &dy->shape, xs, row);
    if (off < 0) continue;
    for (int64_t j = 0; j < inner; j++) {
      int64_t s = cx_pad_source(p.mode, j, p.before[r - 1], xin);
      if (s >= 0) o[off + s] += g[row * inner + j];
    }
  }
  return CX_OK;
}

/* ---- DropoutTrain, DropoutGrad ---- */

static float dropout_ratio(const cx_kernel_args *a, int i) {
  return a->n_in > i && a->in[i].data ? *cx_f32(&a->in[i]) : cx_node_float(a->node, "ratio", 0.5f);
}

/* Element i is kept when its uniform number is at least ratio; the reference draws the same.
 * The number is the sample's (a->rows), not the local row's, so ranks draw different masks. */
static cx_status run_dropout_train(const cx_kernel_args *a) {
  float ratio = dropout_ratio(a, 1), scale = 1.0f / (1.0f - ratio);
  uint64_t key = cx_rng_key(a->seed, a->step, (uint64_t)a->node_index);
  const float *x = cx_f32(&a->in[0]);
  float *y = cx_f32(&a->out[0]), *mask = cx_f32(&a->out[1]);
  int64_t n = numel(&a->in[0]), row = a->in[0].shape.ndim && n ? n / a->in[0].shape.d[0] : 1;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float m = cx_rng_uniform(key, cx_batch_rows_index(a->rows, row, i)) >= ratio ? 1.0f : 0.0f;
    mask[i] = m;
    y[i] = x[i] * m * scale;
  }
  return CX_OK;
}

static cx_status run_dropout_grad(const cx_kernel_args *a) {
  float scale = 1.0f / (1.0f - dropout_ratio(a, 2));
  const float *dy = cx_f32(&a->in[0]), *mask = cx_f32(&a->in[1]);
  float *dx = cx_f32(&a->out[0]);
  int64_t n = numel(&a->in[0]);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * mask[i] * scale;
  return CX_OK;
}

const cx_kernel cx_cpu_shape[] = {
    {"Flatten", NULL, run_copy, NULL, 0, NULL, 0},
    {"Reshape", NULL, run_copy, NULL, 0, NULL, 0},
    {"Identity", NULL, run_copy, NULL, 0, NULL, 0},
    {"Dropout", NULL, run_dropout, NULL, 0, NULL, 0},
    {"Transpose", NULL, run_transpose, NULL, 0, NULL, 0},
    {"Slice", NULL, run_slice, NULL, 0, NULL, 0},
    {"SliceGrad", NULL, run_slice_grad, NULL, 0, NULL, 0},
    {"Concat", NULL, run_concat, NULL, 0, NULL, 0},
    {"SplitGrad", NULL, run_concat, NULL, 0, NULL, 0},
    {"Split", NULL, run_split, NULL, 0, NULL, 0},
    {"Expand", NULL, run_expand, NULL, 0, NULL, 0},
    {"ExpandBatch", NULL, run_expand, NULL, 0, NULL, 0},
    {"Pad", NULL, run_pad, NULL, 0, NULL, 0},
    {"PadGrad", NULL, run_pad_grad, NULL, 0, NULL, 0},
    {"DropoutTrain", NULL, run_dropout_train, NULL, 0, NULL, 0},
    {"DropoutGrad", NULL, run_dropout_grad, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
