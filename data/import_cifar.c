/* CIFAR-10 / CIFAR-100 binary batches: records of label byte(s) then 3x32x32 planar RGB. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

enum { SIDE = 32, PIXELS = SIDE * SIDE * 3, MAX_CLASSES = 100, NAME_LEN = 128 };

typedef struct cifar {
  int classes, label_bytes, record;
  char names[MAX_CLASSES][NAME_LEN];
  const char *names_ptr[MAX_CLASSES];
  int num_names;
} cifar;

static cx_status file_records(const cifar *c, const char *path, int64_t *n) {
  struct stat st;
  if (stat(path, &st) != 0) return cx_fail(CX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  if (st.st_size == 0 || st.st_size % c->record != 0)
    return cx_fail(CX_ERR_FORMAT, "%s: not a CIFAR-%d binary batch: its size %lld is not a "
                   "multiple of the %d-byte record", path, c->classes, (long long)st.st_size,
                   c->record);
  *n = st.st_size / c->record;
  return CX_OK;
}

/* batches.meta.txt (CIFAR-10) or fine_label_names.txt (CIFAR-100) beside the first batch. */
static cx_status read_names(cifar *c, const char *first) {
  char path[4096];
  const char *slash = strrchr(first, '/');
  int dir = slash ? (int)(slash - first + 1) : 0;
  snprintf(path, sizeof path, "%.*s%s", dir, first,
           c->classes == 10 ? "batches.meta.txt" : "fine_label_names.txt");
  FILE *f = fopen(path, "r");
  if (!f) return CX_OK;
  char line[NAME_LEN];
  c->num_names = 0;
  while (fgets(line, sizeof line, f)) {
    size_t len = strcspn(line, "\r\n");
    line[len] = '\0';
    if (!len) continue;
    if (c->num_names == c->classes) {
      fclose(f);
      return cx_fail(CX_ERR_FORMAT, "%s: more than %d class names", path, c->classes);
    }
    memcpy(c->names[c->num_names], line, len + 1);
    c->names_ptr[c->num_names] = c->names[c->num_names];
    c->num_names++;
  }
  fclose(f);
  if (c->num_names != c->classes)
    return cx_fail(CX_ERR_FORMAT, "%s: %d class names; expected %d", path, c->num_names,
                   c->classes);
  return CX_OK;
}

/* Reads one batch file and adds its records as samples at..at+n-1. */
static cx_status add_file(const cifar *c, const char *path, int64_t n, cx_import_sink *sink,
                          int64_t at) {
  uint8_t *rec = malloc((size_t)c->record), *img = malloc((size_t)n * PIXELS);
  int64_t *labels = malloc((size_t)n * sizeof *labels);
  FILE *f = fopen(path, "rb");
  cx_status s = CX_OK;
  if (!rec || !img || !labels) s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  else if (!f) s = cx_fail(CX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  for (int64_t i = 0; s == CX_OK && i < n; i++) {
    if (fread(rec, 1, (size_t)c->record, f) != (size_t)c->record) {
      s = cx_fail(CX_ERR_IO, "%s: reading record %lld failed", path, (long long)i);
      break;
    }
    labels[i] = rec[c->label_bytes - 1];
    if (labels[i] >= c->classes || (c->label_bytes == 2 && rec[0] >= 20)) {
      s = cx_fail(CX_ERR_FORMAT, "%s: record %lld has label %d; CIFAR-%d labels are below %d",
                  path, (long long)i, rec[c->label_bytes - 1], c->classes, c->classes);
      break;
    }
    const uint8_t *planes = rec + c->label_bytes;
    uint8_t *dst = img + i * PIXELS;
    for (int p = 0; p < SIDE * SIDE; p++)
      for (int ch = 0; ch < 3; ch++) dst[p * 3 + ch] = planes[ch * SIDE * SIDE + p];
  }
  if (s == CX_OK) s = cx_import_sink_add(sink, at, img, labels, n);
  if (f) fclose(f);
  free(rec);
  free(img);
  free(labels);
  return s;
}

static cx_status import_all(cifar *c, const char *const *files, int nfiles, const char *out,
                            const cx_import_opts *o, int64_t *counts) {
  int64_t n = 0;
  for (int i = 0; i < nfiles; i++) {
    CX_TRY(file_records(c, files[i], &counts[i]));
    n += counts[i];
  }
  CX_TRY(read_names(c, files[0]));
  char source[1024];
  snprintf(source, sizeof source, "CIFAR-%d binary: %s%s", c->classes, files[0],
           nfiles > 1 ? " and more" : "");
  bool given = o->class_names && o->num_class_names > 0;
  if (given && o->num_class_names != c->classes)
    return cx_fail(CX_ERR_ARG, "%s: %lld class names given; CIFAR-%d has %d classes", out,
                   (long long)o->num_class_names, c->classes, c->classes);
  cx_dataset_meta m = {.h = SIDE, .w = SIDE, .c = 3, .num_classes = c->classes,
                       .class_names = given ? o->class_names : c->num_names ? c->names_ptr : NULL,
                       .source = source, .tool = o->tool};
  cx_import_sink sink;
  CX_TRY(cx_import_sink_open(&sink, out, &m, n, o));
  int64_t at = 0;
  for (int i = 0; i < nfiles; i++) {
    cx_status s = add_file(c, files[i], counts[i], &sink, at);
    if (s != CX_OK) {
      cx_import_sink_abort(&sink);
      return s;
    }
    at += counts[i];
  }
  return cx_import_sink_finish(&sink);
}

cx_status cx_import_cifar(int classes, const char *const *files, int nfiles, const char *out,
                          const cx_import_opts *o) {
  if (classes != 10 && classes != 100)
    return cx_fail(CX_ERR_ARG, "CIFAR has 10 or 100 classes, not %d", classes);
  if (nfiles < 1) return cx_fail(CX_ERR_ARG, "%s: no CIFAR batch files given", out);
  cifar *c = calloc(1, sizeof *c);
  int64_t *counts = calloc((size_t)nfiles, sizeof *counts);
  cx_status s;
  if (!c || !counts) s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", out);
  else {
    c->classes = classes;
    c->label_bytes = classes == 10 ? 1 : 2;
    c->record = c->label_bytes + PIXELS;
    s = import_all(c, files, nfiles, out, o, counts);
  }
  free(c);
  free(counts);
  return s;
}
