#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx_internal.h"

bool cx_onnx_dtype(int32_t t, cx_dtype *out) {
  switch (t) {
  case 1: *out = CX_F32; return true;
  case 2: *out = CX_U8; return true;
  case 3: *out = CX_S8; return true;
  case 6: *out = CX_S32; return true;
  case 7: *out = CX_S64; return true;
  case 9: *out = CX_BOOL; return true;
  case 10: *out = CX_F16; return true;
  case 11: *out = CX_F64; return true;
  case 16: *out = CX_BF16; return true;
  default: return false;
  }
}

const char *cx_onnx_dtype_name(int32_t t) {
  static const char *names[] = {"UNDEFINED", "FLOAT",     "UINT8",      "INT8",   "UINT16",
                                "INT16",     "INT32",     "INT64",      "STRING", "BOOL",
                                "FLOAT16",   "DOUBLE",    "UINT32",     "UINT64", "COMPLEX64",
                                "COMPLEX128", "BFLOAT16"};
  return t >= 0 && t < (int32_t)(sizeof names / sizeof *names) ? names[t] : "unknown";
}

bool cx_onnx_dtype_is_float(cx_dtype t) {
  return t == CX_F32 || t == CX_F16 || t == CX_BF16 || t == CX_F64;
}

void cx_onnx_const_free(cx_onnx_const *c) {
  free(c->i);
  free(c->f);
  c->i = NULL;
  c->f = NULL;
}

/* External data: a path relative to the model's folder that must stay inside it (as ONNX
 * Runtime requires), an offset and a length; the file must hold them before anything is
 * allocated. A model read from memory has no folder, so it cannot have external data. */
static cx_status read_external(const Onnx__TensorProto *t, const char *base_dir, const char *what,
                               size_t bytes, void **dst) {
  const char *loc = NULL;
  long long offset = 0, length = -1;
  for (size_t k = 0; k < t->n_external_data; k++) {
    const Onnx__StringStringEntryProto *e = t->external_data[k];
    if (!e->key || !e->value) continue;
    if (!strcmp(e->key, "location")) loc = e->value;
    else if (!strcmp(e->key, "offset")) offset = strtoll(e->value, NULL, 10);
    else if (!strcmp(e->key, "length")) length = strtoll(e->value, NULL, 10);
  }
  if (!base_dir || !*base_dir)
    return cx_fail(CX_ERR_FORMAT, "%s: external data, but the model was not read from a file",
                   what);
  if (!loc || !*loc)
    return cx_fail(CX_ERR_FORMAT, "%s: external data without a location", what);
  if (loc[0] == '/' || strstr(loc, ".."))
    return cx_fail(CX_ERR_FORMAT, "%s: external data location '%s' must be a relative path inside "
                   "the model's folder", what, cx_printable(loc));
  if (offset < 0 || (length >= 0 && (size_t)length != bytes))
    return cx_fail(CX_ERR_FORMAT, "%s: external data length %lld does not match the %zu bytes "
                   "its shape needs", what, length, bytes);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", base_dir, loc);
  FILE *f = fopen(path, "rb");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot open external data file %s: %s", what,
                         cx_printable(path), strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < offset ||
      (size_t)(st.st_size - offset) < bytes) {
    fclose(f);
    return cx_fail(CX_ERR_FORMAT, "%s: external data file %s is not a regular file holding %zu "
                   "bytes at offset %lld", what, cx_printable(path), bytes, offset);
  }
  *dst = malloc(bytes ? bytes : 1);
  size_t got = !*dst ? 0 : fseek(f, offset, SEEK_SET) == 0 ? fread(*dst, 1, bytes, f) : 0;
  fclose(f);
  if (got != bytes)
    return cx_fail(CX_ERR_IO, "%s: external data file %s: read %zu of %zu bytes at offset %lld",
                   what, cx_printable(path), got, bytes, offset);
  return CX_OK;
}

/* The typed fields: float_data, int32_data (narrow ints, bool, f16/bf16 bits), int64_data,
 * double_data. */
static cx_status read_typed(const Onnx__TensorProto *t, const char *what, cx_dtype dt, void *dst,
                            int64_t n) {
  size_t have = dt == CX_F32 ? t->n_float_data
                : dt == CX_S64 ? t->n_int64_data
                : dt == CX_F64 ? t->n_double_data
                               : t->n_int32_data;
  if ((int64_t)have != n)
    return cx_fail(CX_ERR_FORMAT, "%s: holds %zu values, its shape needs %lld", what, have,
                   (long long)n);
  for (int64_t i = 0; i < n; i++) {
    switch (dt) {
    case CX_F32: ((float *)dst)[i] = t->float_data[i]; break;
    case CX_S64: ((int64_t *)dst)[i] = t->int64_data[i]; break;
    case CX_F64: ((double *)dst)[i] = t->double_data[i]; break;
    case CX_F16:
    case CX_BF16: ((uint16_t *)dst)[i] = (uint16_t)t->int32_data[i]; break;
    case CX_S32: ((int32_t *)dst)[i] = t->int32_data[i]; break;
    case CX_S8: ((int8_t *)dst)[i] = (int8_t)t->int32_data[i]; break;
    default: ((uint8_t *)dst)[i] = (uint8_t)t->int32_data[i]; break;
    }
  }
  return CX_OK;
}

cx_status cx_onnx_tensor_bytes(const Onnx__TensorProto *t, const char *base_dir, const char *what,
                               cx_dtype *dtype, cx_shape *shape, void **data) {
  *data = NULL;
  if (!cx_onnx_dtype(t->data_type, dtype))
    return cx_fail(CX_ERR_UNSUPPORTED, "%s: element type %s (%d) is not supported", what,
                   cx_onnx_dtype_name(t->data_type), t->data_type);
  if (t->n_dims > CX_MAX_DIMS)
    return cx_fail(CX_ERR_FORMAT, "%s: %zu dimensions (at most %d)", what, t->n_dims, CX_MAX_DIMS);
  shape->ndim = (int)t->n_dims;
  int64_t n;
  if (!cx_onnx_numel(t->dims, t->n_dims, CX_ONNX_MAX_ELEMENTS, &n))
    return cx_fail(CX_ERR_FORMAT, "%s: a dimension is negative or the tensor exceeds %d elements",
                   what, CX_ONNX_MAX_ELEMENTS);
  for (size_t k = 0; k < t->n_dims; k++) shape->d[k] = t->dims[k];
  size_t bytes = (size_t)n * cx_dtype_size(*dtype);
  if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
    void *p = NULL;
    cx_status s = read_external(t, base_dir, what, bytes, &p);
    if (s != CX_OK) free(p);
    else *data = p;
    return s;
  }
  void *p = malloc(bytes ? bytes : 1);
  if (!p) return cx_fail(CX_ERR_NOMEM, "%s: cannot allocate %zu bytes", what, bytes);
  cx_status s = CX_OK;
  if (t->has_raw_data && (t->raw_data.len > 0 || bytes == 0)) {
    if (t->raw_data.len != bytes)
      s = cx_fail(CX_ERR_FORMAT, "%s: raw_data has %zu bytes, its shape needs %zu", what,
                  t->raw_data.len, bytes);
    else if (bytes)
      memcpy(p, t->raw_data.data, bytes); /* little-endian, any alignment */
  } else
    s = read_typed(t, what, *dtype, p, n);
  if (s != CX_OK) {
    free(p);
    return s;
  }
  *data = p;
  return CX_OK;
}

cx_status cx_onnx_tensor_const(const Onnx__TensorProto *t, const char *base_dir, const char *what,
                               cx_onnx_const *out) {
  void *raw;
  *out = (cx_onnx_const){0};
  CX_TRY(cx_onnx_tensor_bytes(t, base_dir, what, &out->dtype, &out->shape, &raw));
  int64_t n = cx_shape_numel(&out->shape);
  bool fl = cx_onnx_dtype_is_float(out->dtype);
  if (fl) out->f = malloc(sizeof(double) * (size_t)(n ? n : 1));
  else out->i = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  for (int64_t k = 0; k < n; k++) {
    if (fl) out->f[k] = cx_dtype_load(out->dtype, raw, (size_t)k);
    else if (out->dtype == CX_S64) out->i[k] = ((int64_t *)raw)[k];
    else out->i[k] = (int64_t)cx_dtype_load(out->dtype, raw, (size_t)k);
  }
  free(raw);
  return CX_OK;
}
