/* A pair of .npy files: images uint8 [N,H,W] or [N,H,W,C], labels of any integer dtype [N]. */
#include <stdio.h>
#include <stdlib.h>

#include "../core/npy.h"
#include "internal.h"

static cx_status labels_to_s64(const char *path, cx_dtype t, const cx_shape *sh, void *data,
                               int64_t **out) {
  char sb[CX_SHAPE_STR];
  if (sh->ndim != 1)
    return cx_fail(CX_ERR_FORMAT, "%s: labels must have shape [N], found %s", path,
                   cx_shape_str(sh, sb));
  if (t != CX_U8 && t != CX_S8 && t != CX_S32 && t != CX_S64)
    return cx_fail(CX_ERR_FORMAT, "%s: labels must be integers, found dtype %s", path,
                   cx_dtype_name(t));
  int64_t n = sh->d[0];
  *out = malloc((size_t)(n ? n : 1) * sizeof **out);
  if (!*out) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  for (int64_t i = 0; i < n; i++) (*out)[i] = (int64_t)cx_dtype_load(t, data, (size_t)i);
  return CX_OK;
}

static cx_status check_images(const char *path, cx_dtype t, const cx_shape *sh) {
  char sb[CX_SHAPE_STR];
  if (t != CX_U8)
    return cx_fail(CX_ERR_FORMAT, "%s: images must be uint8 ('|u1'), found dtype %s", path,
                   cx_dtype_name(t));
  if (sh->ndim != 3 && sh->ndim != 4)
    return cx_fail(CX_ERR_FORMAT, "%s: images must have shape [N,H,W] or [N,H,W,C], found %s",
                   path, cx_shape_str(sh, sb));
  return CX_OK;
}

static cx_status write_out(const char *images, const char *labels_path, const char *out,
                           const cx_import_opts *o, const cx_shape *sh, const uint8_t *pix,
                           const int64_t *labels) {
  int64_t n = sh->d[0];
  char source[1024];
  snprintf(source, sizeof source, "npy: %s, %s", images, labels_path);
  cx_dataset_meta m = {.h = sh->d[1], .w = sh->d[2], .c = sh->ndim == 4 ? sh->d[3] : 1,
                       .num_classes = cx_import_num_classes(o, labels, n),
                       .class_names = o->num_class_names > 0 ? o->class_names : NULL,
                       .source = source, .tool = o->tool};
  if (m.c > 4)
    return cx_fail(CX_ERR_FORMAT, "%s: %lld channels; at most 4 are supported", images,
                   (long long)m.c);
  CX_TRY(cx_import_check_labels(labels_path, labels, n, m.num_classes));
  cx_import_sink sink;
  CX_TRY(cx_import_sink_open(&sink, out, &m, n, o));
  cx_status s = cx_import_sink_add(&sink, 0, pix, labels, n);
  if (s != CX_OK) {
    cx_import_sink_abort(&sink);
    return s;
  }
  return cx_import_sink_finish(&sink);
}

cx_status cx_import_npy(const char *images, const char *labels_path, const char *out,
                        const cx_import_opts *o) {
  cx_dtype it, lt;
  cx_shape is, ls;
  void *pix = NULL, *raw = NULL;
  int64_t *labels = NULL;
  cx_status s = cx_npy_read(labels_path, &lt, &ls, &raw);
  if (s == CX_OK) s = labels_to_s64(labels_path, lt, &ls, raw, &labels);
  free(raw);
  if (s == CX_OK) s = cx_npy_read(images, &it, &is, &pix);
  if (s == CX_OK) s = check_images(images, it, &is);
  if (s == CX_OK && is.d[0] != ls.d[0])
    s = cx_fail(CX_ERR_FORMAT, "%s has %lld images but %s has %lld labels", images,
                (long long)is.d[0], labels_path, (long long)ls.d[0]);
  if (s == CX_OK) s = write_out(images, labels_path, out, o, &is, pix, labels);
  free(pix);
  free(labels);
  return s;
}
