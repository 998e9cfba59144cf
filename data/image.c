/* PNG (libpng's simplified API) and JPEG (libjpeg-turbo) decoding, and resizing. A decoder that
 * finds anything wrong, warnings included, fails with a message naming the file: a silently
 * half-grey sample is worse than a stopped import. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h> /* after stdio.h: it uses FILE and size_t without including them */
#include <png.h>

#include "internal.h"

static cx_status decode_png(const char *path, int channels, uint8_t **pixels, int64_t *h,
                            int64_t *w) {
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&img, path))
    return cx_fail(CX_ERR_FORMAT, "%s: unreadable PNG: %s", path, img.message);
  img.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  uint8_t *buf = malloc(PNG_IMAGE_SIZE(img));
  if (!buf) {
    png_image_free(&img);
    return cx_fail(CX_ERR_NOMEM, "%s: out of memory for a %ux%u image", path, img.width,
                   img.height);
  }
  if (!png_image_finish_read(&img, NULL, buf, 0, NULL)) {
    free(buf);
    return cx_fail(CX_ERR_FORMAT, "%s: unreadable PNG: %s", path, img.message);
  }
  *pixels = buf, *h = img.height, *w = img.width;
  return CX_OK;
}

typedef struct jpeg_err {
  struct jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_on_error(j_common_ptr c) {
  jpeg_err *e = (jpeg_err *)c->err;
  c->err->format_message(c, e->message);
  longjmp(e->jump, 1);
}

/* Warnings (a truncated file decodes as grey, with a warning) count as errors. */
static void jpeg_on_message(j_common_ptr c, int level) {
  if (level < 0) jpeg_on_error(c);
}

typedef struct jpeg_job {
  struct jpeg_decompress_struct d;
  jpeg_err err;
  FILE *f;
  uint8_t *buf;
} jpeg_job;

static cx_status decode_jpeg(const char *path, int channels, uint8_t **pixels, int64_t *h,
                             int64_t *w) {
  jpeg_job *j = calloc(1, sizeof *j);
  if (!j) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  if (!(j->f = fopen(path, "rb"))) {
    free(j);
    return cx_fail(CX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  }
  j->d.err = jpeg_std_error(&j->err.mgr);
  j->err.mgr.error_exit = jpeg_on_error;
  j->err.mgr.emit_message = jpeg_on_message;
  cx_status s = CX_OK;
  if (setjmp(j->err.jump)) {
    s = cx_fail(CX_ERR_FORMAT, "%s: unreadable JPEG: %s", path, j->err.message);
    free(j->buf);
    j->buf = NULL;
  } else {
    jpeg_create_decompress(&j->d);
    jpeg_stdio_src(&j->d, j->f);
    jpeg_read_header(&j->d, TRUE);
    j->d.out_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_start_decompress(&j->d);
    size_t row = (size_t)j->d.output_width * (size_t)channels;
    if (!(j->buf = malloc(row * j->d.output_height))) {
      s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
    } else {
      while (j->d.output_scanline < j->d.output_height) {
        JSAMPROW r = j->buf + row * j->d.output_scanline;
        jpeg_read_scanlines(&j->d, &r, 1);
      }
      jpeg_finish_decompress(&j->d);
      *pixels = j->buf, *h = j->d.output_height, *w = j->d.output_width;
    }
  }
  jpeg_destroy_decompress(&j->d);
  fclose(j->f);
  free(j);
  return s;
}

cx_status cx_image_decode(const char *path, int channels, uint8_t **pixels, int64_t *h,
                          int64_t *w) {
  *pixels = NULL;
  unsigned char sig[8] = {0};
  FILE *f = fopen(path, "rb");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  size_t got = fread(sig, 1, sizeof sig, f);
  fclose(f);
  if (got >= 8 && png_sig_cmp(sig, 0, 8) == 0) return decode_png(path, channels, pixels, h, w);
  if (got >= 3 && sig[0] == 0xFF && sig[1] == 0xD8 && sig[2] == 0xFF)
    return decode_jpeg(path, channels, pixels, h, w);
  return cx_fail(CX_ERR_FORMAT, "%s: not a PNG or JPEG file", path);
}

/* ---- resizing: separable filters, box (area) when shrinking, triangle (bilinear) when growing */

typedef struct taps {
  int64_t *start;
  int *count;
  float *weight; /* [dst][width] */
  int width;
} taps;

static bool taps_make(taps *t, int64_t src, int64_t dst) {
  double scale = (double)src / (double)dst, support = scale > 1 ? scale / 2 : 1;
  t->width = (int)ceil(support) * 2 + 1;
  t->start = malloc((size_t)dst * sizeof *t->start);
  t->count = malloc((size_t)dst * sizeof *t->count);
  t->weight = malloc((size_t)dst * (size_t)t->width * sizeof *t->weight);
  if (!t->start || !t->count || !t->weight) return false;
  for (int64_t i = 0; i < dst; i++) {
    double centre = ((double)i + 0.5) * scale;
    int64_t lo = (int64_t)floor(centre - support), hi = (int64_t)ceil(centre + support);
    if (lo < 0) lo = 0;
    if (hi > src) hi = src;
    if (hi - lo > t->width) hi = lo + t->width;
    float *wt = t->weight + i * t->width, sum = 0;
    for (int64_t k = lo; k < hi; k++) {
      double a = (double)k, b = a + 1; /* source pixel k covers [a, b) */
      double v = scale > 1 ? fmin(b, centre + support) - fmax(a, centre - support)
                           : 1 - fabs(a + 0.5 - centre);
      wt[k - lo] = (float)fmax(v, 0.0);
      sum += wt[k - lo];
    }
    for (int64_t k = lo; k < hi; k++) wt[k - lo] = sum > 0 ? wt[k - lo] / sum : 0;
    t->start[i] = lo;
    t->count[i] = (int)(hi - lo);
  }
  return true;
}

static void taps_free(taps *t) {
  free(t->start);
  free(t->count);
  free(t->weight);
}

cx_status cx_image_resize(const uint8_t *src, int64_t sh, int64_t sw, int64_t c, uint8_t *dst,
                          int64_t dh, int64_t dw) {
  taps tx = {0}, ty = {0};
  float *mid = malloc((size_t)(sh * dw * c) * sizeof *mid);
  cx_status s = CX_OK;
  if (!mid || !taps_make(&tx, sw, dw) || !taps_make(&ty, sh, dh)) {
    s = cx_fail(CX_ERR_NOMEM, "out of memory resizing a %lldx%lld image", (long long)sw,
                (long long)sh);
  } else {
    for (int64_t y = 0; y < sh; y++)
      for (int64_t x = 0; x < dw; x++)
        for (int64_t ch = 0; ch < c; ch++) {
          float acc = 0;
          const uint8_t *row = src + (y * sw + tx.start[x]) * c + ch;
          for (int k = 0; k < tx.count[x]; k++) acc += tx.weight[x * tx.width + k] * row[k * c];
          mid[(y * dw + x) * c + ch] = acc;
        }
    for (int64_t y = 0; y < dh; y++)
      for (int64_t i = 0; i < dw * c; i++) {
        float acc = 0;
        for (int k = 0; k < ty.count[y]; k++)
          acc += ty.weight[y * ty.width + k] * mid[(ty.start[y] + k) * dw * c + i];
        long v = lroundf(acc);
        dst[y * dw * c + i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
  }
  taps_free(&tx);
  taps_free(&ty);
  free(mid);
  return s;
}
