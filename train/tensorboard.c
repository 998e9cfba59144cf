/* TensorBoard event files: Event messages encoded in the protobuf wire format by hand and framed
 * as TFRecords. Field numbers (tensorboard/compat/proto/event.proto and summary.proto):
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 * Every scalar field is written, even when zero: proto3 readers accept explicit defaults, and
 * simple_value sits in a oneof, where only a written field says which member is set. */
#include "tensorboard.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "metrics.h"

struct cx_tb_writer {
  char *path;
  FILE *f;
  uint8_t *buf; /* one record: 12-byte header, the Event, 4-byte footer */
  size_t len, cap;
};

/* ---- protobuf wire format into w->buf ---- */

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_BYTES = 2, WIRE_FIXED32 = 5 };

static bool reserve(cx_tb_writer *w, size_t more) {
  if (w->len + more <= w->cap) return true;
  size_t cap = w->cap ? w->cap : 256;
  while (cap < w->len + more) cap *= 2;
  uint8_t *p = realloc(w->buf, cap);
  if (!p) return false;
  w->buf = p, w->cap = cap;
  return true;
}

static size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, n++;
  return n;
}

/* The caller has reserved room: every message size is known before it is written. */
static void put_varint(cx_tb_writer *w, uint64_t v) {
  while (v >= 0x80) w->buf[w->len++] = (uint8_t)(v | 0x80), v >>= 7;
  w->buf[w->len++] = (uint8_t)v;
}

static void put_le(cx_tb_writer *w, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) w->buf[w->len++] = (uint8_t)(v >> (8 * i));
}

static void put_tag(cx_tb_writer *w, int field, int wire) {
  put_varint(w, (uint64_t)(field << 3 | wire));
}

static void put_bytes(cx_tb_writer *w, int field, const void *p, size_t n) {
  put_tag(w, field, WIRE_BYTES);
  put_varint(w, n);
  memcpy(w->buf + w->len, p, n);
  w->len += n;
}

static void put_double(cx_tb_writer *w, int field, double v) {
  uint64_t bits;
  memcpy(&bits, &v, 8);
  put_tag(w, field, WIRE_FIXED64);
  put_le(w, bits, 8);
}

static void put_float(cx_tb_writer *w, int field, float v) {
  uint32_t bits;
  memcpy(&bits, &v, 4);
  put_tag(w, field, WIRE_FIXED32);
  put_le(w, bits, 4);
}

/* Value {1: tag, 2: simple_value}: all one-byte field tags. */
static size_t value_size(const char *tag) {
  size_t n = strlen(tag);
  return 1 + varint_size(n) + n + 1 + 4;
}

static size_t summary_size(int n, const char *const *tags) {
  size_t s = 0;
  for (int i = 0; i < n; i++) s += 1 + varint_size(value_size(tags[i])) + value_size(tags[i]);
  return s;
}

static void put_summary(cx_tb_writer *w, int n, const char *const *tags, const double *values) {
  put_tag(w, 5, WIRE_BYTES);
  put_varint(w, summary_size(n, tags));
  for (int i = 0; i < n; i++) {
    put_tag(w, 1, WIRE_BYTES);
    put_varint(w, value_size(tags[i]));
    put_bytes(w, 1, tags[i], strlen(tags[i]));
    put_float(w, 2, (float)values[i]);
  }
}

/* ---- records ---- */

static double wall_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* w->buf[12..len) holds the Event: adds the TFRecord header and footer and writes the record. */
static cx_status write_record(cx_tb_writer *w) {
  uint64_t n = w->len - 12;
  size_t at = w->len;
  w->len = 0;
  put_le(w, n, 8);
  put_le(w, cx_crc32c_masked(w->buf, 8), 4);
  w->len = at;
  put_le(w, cx_crc32c_masked(w->buf + 12, n), 4);
  if (fwrite(w->buf, 1, w->len, w->f) != w->len || fflush(w->f) != 0) {
    int e = errno;
    clearerr(w->f);
    return cx_fail(CX_ERR_IO, "%s: cannot write an event: %s", w->path, strerror(e));
  }
  return CX_OK;
}

static cx_status write_event(cx_tb_writer *w, int64_t step, const char *version, int n,
                             const char *const *tags, const double *values) {
  size_t body = 9 + 1 + varint_size((uint64_t)step);
  if (version) body += 1 + varint_size(strlen(version)) + strlen(version);
  else body += 1 + varint_size(summary_size(n, tags)) + summary_size(n, tags);
  w->len = 0;
  if (!reserve(w, 12 + body + 4))
    return cx_fail(CX_ERR_NOMEM, "%s: out of memory encoding an event", w->path);
  w->len = 12;
  put_double(w, 1, wall_time());
  put_tag(w, 2, WIRE_VARINT);
  put_varint(w, (uint64_t)step); /* a negative int64 is its 10-byte two's complement varint */
  if (version) put_bytes(w, 3, version, strlen(version));
  else put_summary(w, n, tags, values);
  return write_record(w);
}

cx_status cx_tb_add_scalars(cx_tb_writer *w, int64_t step, int n, const char *const *tags,
                            const double *values) {
  if (n < 0 || (n > 0 && (!tags || !values)))
    return cx_fail(CX_ERR_ARG, "%s: cx_tb_add_scalars needs %d tags and values", w->path, n);
  for (int i = 0; i < n; i++)
    if (!tags[i] || !cx_utf8_valid(tags[i]))
      return cx_fail(CX_ERR_ARG, "%s: the tag of scalar %d is missing or not valid UTF-8",
                     w->path, i);
  return write_event(w, step, NULL, n, tags, values);
}

/* ---- the file ---- */

/* mkdir -p: each prefix of dir that does not exist yet is created. */
static cx_status make_dirs(const char *dir) {
  char *p = strdup(dir);
  if (!p) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", dir);
  cx_status s = CX_OK;
  for (char *c = p + 1;; c++) {
    if (*c != '/' && *c != '\0') continue;
    char keep = *c;
    *c = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      s = cx_fail(CX_ERR_IO, "%s: cannot create the folder %s: %s", dir, p, strerror(errno));
      break;
    }
    *c = keep;
    if (!keep) break;
  }
  free(p);
  return s;
}

/* Opens a file name nobody else has (two writers in one folder within a second get ".1"...). */
static cx_status create_file(cx_tb_writer *w, const char *dir) {
  char host[256] = "localhost";
  if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  size_t len = strlen(dir) + strlen(host) + 64;
  if (!(w->path = malloc(len))) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", dir);
  long long now = (long long)time(NULL);
  for (int k = 0; k < 1000; k++) {
    int at = snprintf(w->path, len, "%s/events.out.tfevents.%010lld.%s", dir, now, host);
    if (k) snprintf(w->path + at, len - (size_t)at, ".%d", k);
    if ((w->f = fopen(w->path, "wbx"))) return CX_OK;
    if (errno != EEXIST)
      return cx_fail(CX_ERR_IO, "%s: cannot create the event file: %s", w->path, strerror(errno));
  }
  return cx_fail(CX_ERR_IO, "%s: cannot find a free event file name", dir);
}

cx_status cx_tb_open(const char *dir, cx_tb_writer **out) {
  *out = NULL;
  cx_tb_writer *w = calloc(1, sizeof *w);
  if (!w) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", dir);
  cx_status s = make_dirs(dir);
  if (s == CX_OK) s = create_file(w, dir);
  if (s == CX_OK) s = write_event(w, 0, "brain.Event:2", 0, NULL, NULL);
  if (s != CX_OK) {
    cx_tb_close(w);
    return s;
  }
  *out = w;
  return CX_OK;
}

const char *cx_tb_path(const cx_tb_writer *w) { return w->path; }

cx_status cx_tb_close(cx_tb_writer *w) {
  if (!w) return CX_OK;
  cx_status s = CX_OK;
  if (w->f && fclose(w->f) != 0)
    s = cx_fail(CX_ERR_IO, "%s: cannot close the event file: %s", w->path, strerror(errno));
  free(w->buf);
  free(w->path);
  free(w);
  return s;
}
