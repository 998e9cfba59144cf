/* IDX files (MNIST, Fashion-MNIST): a big-endian header (0, 0, type, rank, then rank u32 sizes)
 * and the bytes. zlib reads gzipped and raw files alike. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "internal.h"

enum { IDX_UBYTE = 0x08, IDX_MAX_RANK = 4 };

typedef struct idx_file {
  const char *path;
  gzFile f;
  int rank;
  int64_t dims[IDX_MAX_RANK];
} idx_file;

/* Reads exactly n bytes; anything short is a truncated file. */
static cx_status read_exact(idx_file *x, void *dst, int64_t n, const char *what) {
  int64_t got = 0;
  while (got < n) {
    int64_t want = n - got > (1 << 30) ? (1 << 30) : n - got;
    int r = gzread(x->f, (char *)dst + got, (unsigned)want);
    if (r < 0) {
      int zerr;
      const char *msg = gzerror(x->f, &zerr);
      return cx_fail(CX_ERR_IO, "%s: reading %s failed: %s", x->path, what,
                     zerr == Z_ERRNO ? strerror(errno) : msg);
    }
    if (r == 0) break;
    got += r;
  }
  if (got < n)
    return cx_fail(CX_ERR_FORMAT, "%s: truncated: %s needs %lld bytes, the file has %lld",
                   x->path, what, (long long)n, (long long)got);
  return CX_OK;
}

static cx_status idx_open(idx_file *x, const char *path, int min_rank, int max_rank) {
  *x = (idx_file){.path = path};
  x->f = gzopen(path, "rb");
  if (!x->f) return cx_fail(CX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  unsigned char head[4];
  CX_TRY(read_exact(x, head, 4, "the header"));
  if (head[0] || head[1] || head[3] < 1 || head[3] > IDX_MAX_RANK)
    return cx_fail(CX_ERR_FORMAT, "%s: not an IDX file (magic %02x %02x %02x %02x)", path,
                   head[0], head[1], head[2], head[3]);
  if (head[2] != IDX_UBYTE)
    return cx_fail(CX_ERR_UNSUPPORTED, "%s: IDX element type 0x%02x; only unsigned bytes (0x08) "
                   "are supported", path, head[2]);
  x->rank = head[3];
  if (x->rank < min_rank || x->rank > max_rank)
    return cx_fail(CX_ERR_FORMAT, "%s: IDX rank %d; expected %d to %d", path, x->rank, min_rank,
                   max_rank);
  for (int i = 0; i < x->rank; i++) {
    unsigned char b[4];
    CX_TRY(read_exact(x, b, 4, "the header"));
    x->dims[i] = (int64_t)b[0] << 24 | (int64_t)b[1] << 16 | (int64_t)b[2] << 8 | b[3];
  }
  return CX_OK;
}

static cx_status idx_expect_end(idx_file *x) {
  char extra;
  if (gzread(x->f, &extra, 1) != 0)
    return cx_fail(CX_ERR_FORMAT, "%s: bytes after the last element (not an IDX file of the "
                   "size its header gives)", x->path);
  return CX_OK;
}

static void idx_close(idx_file *x) {
  if (x->f) gzclose(x->f);
  x->f = NULL;
}

static cx_status read_labels(const char *path, int64_t **labels, int64_t *n) {
  idx_file x;
  uint8_t *raw = NULL;
  cx_status s = idx_open(&x, path, 1, 1);
  if (s == CX_OK) {
    *n = x.dims[0];
    raw = malloc((size_t)(*n ? *n : 1));
    *labels = malloc((size_t)(*n ? *n : 1) * sizeof **labels);
    if (!raw || !*labels) s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  }
  if (s == CX_OK) s = read_exact(&x, raw, *n, "the labels");
  if (s == CX_OK) s = idx_expect_end(&x);
  for (int64_t i = 0; s == CX_OK && i < *n; i++) (*labels)[i] = raw[i];
  free(raw);
  idx_close(&x);
  return s;
}

static cx_status write_out(const char *images, const char *labels_path, const char *out,
                           const cx_import_opts *o, const idx_file *x, const uint8_t *pix,
                           const int64_t *labels) {
  int64_t n = x->dims[0];
  char source[1024];
  snprintf(source, sizeof source, "IDX: %s, %s", images, labels_path);
  cx_dataset_meta m = {.h = x->dims[1], .w = x->dims[2], .c = x->rank == 4 ? x->dims[3] : 1,
                       .num_classes = cx_import_num_classes(o, labels, n),
                       .class_names = o->num_class_names > 0 ? o->class_names : NULL,
                       .source = source, .tool = o->tool};
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

cx_status cx_import_idx(const char *images, const char *labels_path, const char *out,
                        const cx_import_opts *o) {
  int64_t *labels = NULL, nl = 0;
  uint8_t *pix = NULL;
  idx_file x = {0};
  cx_status s = read_labels(labels_path, &labels, &nl);
  if (s == CX_OK) s = idx_open(&x, images, 3, 4);
  if (s == CX_OK && x.dims[0] != nl)
    s = cx_fail(CX_ERR_FORMAT, "%s has %lld images but %s has %lld labels", images,
                (long long)x.dims[0], labels_path, (long long)nl);
  int64_t bytes = x.dims[0] * x.dims[1] * x.dims[2] * (x.rank == 4 ? x.dims[3] : 1);
  if (s == CX_OK && !(pix = malloc((size_t)(bytes ? bytes : 1))))
    s = cx_fail(CX_ERR_NOMEM, "%s: out of memory for %lld bytes of pixels", images,
                (long long)bytes);
  if (s == CX_OK) s = read_exact(&x, pix, bytes, "the pixels");
  if (s == CX_OK) s = idx_expect_end(&x);
  idx_close(&x);
  if (s == CX_OK) s = write_out(images, labels_path, out, o, &x, pix, labels);
  free(pix);
  free(labels);
  return s;
}
