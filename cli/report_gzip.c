/* How small a model's file compresses (gzip at level 9), for the report. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "report.h"

/* Deflates the whole stream, counting the output and keeping none of it. */
static cx_status deflate_count(const char *path, FILE *f, z_stream *z, int64_t *bytes) {
  unsigned char in[1 << 16], out[1 << 16];
  int flush = Z_NO_FLUSH, rc = Z_OK;
  *bytes = 0;
  while (rc != Z_STREAM_END) {
    if (z->avail_in == 0 && flush == Z_NO_FLUSH) {
      size_t n = fread(in, 1, sizeof in, f);
      if (ferror(f)) return cx_fail(CX_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
      if (n < sizeof in) flush = Z_FINISH;
      z->next_in = in, z->avail_in = (uInt)n;
    }
    z->next_out = out, z->avail_out = sizeof out;
    rc = deflate(z, flush);
    if (rc == Z_STREAM_ERROR) return cx_fail(CX_ERR_BACKEND, "%s: zlib deflate failed", path);
    *bytes += (int64_t)(sizeof out - z->avail_out);
  }
  return CX_OK;
}

cx_status cx_report_gzip_size(const char *path, int64_t *bytes) {
  *bytes = -1;
  FILE *f = fopen(path, "rb");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  z_stream z = {0};
  /* window bits 15 + 16: a gzip header and trailer around the deflate stream */
  if (deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    fclose(f);
    return cx_fail(CX_ERR_NOMEM, "%s: zlib could not start (out of memory)", path);
  }
  int64_t n = 0;
  cx_status s = deflate_count(path, f, &z, &n);
  deflateEnd(&z);
  fclose(f);
  if (s == CX_OK) *bytes = n;
  return s;
}
