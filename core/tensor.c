#include "tensor.h"

#include <stdio.h>
#include <string.h>

cx_shape cx_shape_make(int ndim, const int64_t *dims) {
  cx_shape s = {.ndim = ndim};
  for (int i = 0; i < ndim && i < CX_MAX_DIMS; i++) s.d[i] = dims[i];
  return s;
}

int64_t cx_shape_numel(const cx_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) n *= s->d[i];
  return n;
}

bool cx_shape_equal(const cx_shape *a, const cx_shape *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->d[i] != b->d[i]) return false;
  return true;
}

cx_status cx_shape_broadcast(const cx_shape *a, const cx_shape *b, cx_shape *out) {
  int n = a->ndim > b->ndim ? a->ndim : b->ndim;
  cx_shape r = {.ndim = n};
  for (int i = 0; i < n; i++) {
    int ia = i - (n - a->ndim), ib = i - (n - b->ndim);
    int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      char sa[CX_SHAPE_STR], sb[CX_SHAPE_STR];
      return cx_fail(CX_ERR_SHAPE, "shapes %s and %s do not broadcast (axis %d: %lld vs %lld)",
                     cx_shape_str(a, sa), cx_shape_str(b, sb), i, (long long)da, (long long)db);
    }
    r.d[i] = da == 1 ? db : da;
  }
  *out = r;
  return CX_OK;
}

const char *cx_shape_str(const cx_shape *s, char *buf) {
  size_t at = 0;
  buf[at++] = '[';
  for (int i = 0; i < s->ndim && at < CX_SHAPE_STR - 24; i++)
    at += (size_t)snprintf(buf + at, CX_SHAPE_STR - at, i ? ",%lld" : "%lld", (long long)s->d[i]);
  snprintf(buf + at, CX_SHAPE_STR - at, "]");
  return buf;
}

cx_tensor cx_tensor_view(cx_dtype dtype, const cx_shape *shape, void *data) {
  cx_tensor t = {.dtype = dtype, .shape = *shape, .data = data};
  int64_t stride = (int64_t)cx_dtype_size(dtype);
  for (int i = shape->ndim - 1; i >= 0; i--) {
    t.strides[i] = stride;
    stride *= shape->d[i];
  }
  return t;
}

int64_t cx_tensor_numel(const cx_tensor *t) { return cx_shape_numel(&t->shape); }

size_t cx_tensor_nbytes(const cx_tensor *t) {
  return (size_t)cx_tensor_numel(t) * cx_dtype_size(t->dtype);
}

bool cx_tensor_is_contiguous(const cx_tensor *t) {
  int64_t stride = (int64_t)cx_dtype_size(t->dtype);
  for (int i = t->shape.ndim - 1; i >= 0; i--) {
    if (t->shape.d[i] != 1 && t->strides[i] != stride) return false;
    stride *= t->shape.d[i];
  }
  return true;
}

static void channels_last_strides(const cx_tensor *t, int64_t st[4]) {
  const int64_t *d = t->shape.d, e = (int64_t)cx_dtype_size(t->dtype);
  st[1] = e;
  st[3] = d[1] * e;
  st[2] = d[3] * st[3];
  st[0] = d[2] * st[2];
}

bool cx_tensor_is_channels_last(const cx_tensor *t) {
  if (t->shape.ndim != 4) return false;
  int64_t st[4];
  channels_last_strides(t, st);
  for (int i = 0; i < 4; i++)
    if (t->shape.d[i] != 1 && t->strides[i] != st[i]) return false;
  return true;
}

cx_tensor cx_tensor_channels_last_view(const cx_tensor *t) {
  cx_tensor r = *t;
  if (t->shape.ndim == 4) channels_last_strides(t, r.strides);
  return r;
}

bool cx_tensor_nhwc(const cx_tensor *t) {
  return cx_tensor_is_channels_last(t) && !cx_tensor_is_contiguous(t);
}
