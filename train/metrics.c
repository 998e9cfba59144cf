/* JSON lines metrics: each line is built in memory and written with one fwrite and a flush, so a
 * reader never sees half a line unless the disk fills (which the next write then reports). */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct cx_metrics {
  char *path;
  FILE *f;
  char *line;
  size_t len, cap;
};

/* ---- the line buffer ---- */

static bool line_reserve(cx_metrics *m, size_t more) {
  if (m->len + more + 1 <= m->cap) return true;
  size_t cap = m->cap ? m->cap : 256;
  while (cap < m->len + more + 1) cap *= 2;
  char *p = realloc(m->line, cap);
  if (!p) return false;
  m->line = p, m->cap = cap;
  return true;
}

static bool put(cx_metrics *m, const char *s, size_t n) {
  if (!line_reserve(m, n)) return false;
  memcpy(m->line + m->len, s, n);
  m->len += n;
  m->line[m->len] = '\0';
  return true;
}

static bool puts_(cx_metrics *m, const char *s) { return put(m, s, strlen(s)); }

/* A JSON string: quotes, backslashes and control characters escaped; other bytes (UTF-8) as is. */
static bool put_string(cx_metrics *m, const char *s) {
  bool ok = put(m, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; ok && *p; p++) {
    char esc[8];
    if (*p == '"' || *p == '\\') snprintf(esc, sizeof esc, "\\%c", *p);
    else if (*p < 0x20) snprintf(esc, sizeof esc, "\\u%04x", *p);
    else esc[0] = (char)*p, esc[1] = '\0';
    ok = puts_(m, esc);
  }
  return ok && put(m, "\"", 1);
}

/* ---- text ---- */

/* Length of the UTF-8 sequence led by c (0: not a lead byte), and the least code point it may
 * encode, so that overlong forms are refused. */
static int utf8_len(unsigned char c, uint32_t *min) {
  if (c < 0x80) return *min = 0, 1;
  if ((c & 0xe0) == 0xc0) return *min = 0x80, 2;
  if ((c & 0xf0) == 0xe0) return *min = 0x800, 3;
  if ((c & 0xf8) == 0xf0) return *min = 0x10000, 4;
  return 0;
}

bool cx_utf8_valid(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    uint32_t min, cp;
    int n = utf8_len(*p, &min);
    if (!n) return false;
    cp = n == 1 ? *p : *p & (0x7f >> n);
    for (int i = 1; i < n; i++) {
      if ((p[i] & 0xc0) != 0x80) return false;
      cp = cp << 6 | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    p += n;
  }
  return true;
}

/* ---- numbers ---- */

char *cx_json_number(double v, char *buf) {
  if (!isfinite(v)) return strcpy(buf, "null");
  /* The shortest %.*g that reads back as v: 0.1 stays "0.1", not "0.10000000000000001". */
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(buf, 32, "%.*g", digits, v);
    if (strtod(buf, NULL) == v) break;
  }
  return buf;
}

static const char *nonfinite_name(double v) {
  return isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

/* ---- the file ---- */

cx_status cx_metrics_open(const char *path, bool append, cx_metrics **out) {
  *out = NULL;
  cx_metrics *m = calloc(1, sizeof *m);
  if (!m || !(m->path = strdup(path))) {
    free(m);
    return cx_fail(CX_ERR_NOMEM, "%s: out of memory", path);
  }
  m->f = fopen(path, append ? "a" : "w");
  if (!m->f) {
    int e = errno;
    free(m->path);
    free(m);
    return cx_fail(CX_ERR_IO, "%s: cannot open the metrics file: %s", path, strerror(e));
  }
  *out = m;
  return CX_OK;
}

const char *cx_metrics_path(const cx_metrics *m) { return m->path; }

static cx_status check_name(const cx_metrics *m, const char *name, int i) {
  static const char *const reserved[] = {"step", "epoch", "time", "nonfinite"};
  if (!name) return cx_fail(CX_ERR_ARG, "%s: metric %d has no name", m->path, i);
  if (!cx_utf8_valid(name))
    return cx_fail(CX_ERR_ARG, "%s: the name of metric %d is not valid UTF-8", m->path, i);
  for (size_t r = 0; r < sizeof reserved / sizeof *reserved; r++)
    if (strcmp(name, reserved[r]) == 0)
      return cx_fail(CX_ERR_ARG, "%s: '%s' is a reserved key and cannot name a metric", m->path,
                     name);
  return CX_OK;
}

/* Every key of the line (tags' first, then the metrics') valid and given once. */
static cx_status check_names(const cx_metrics *m, int n_tags, const cx_metrics_tag *tags, int n,
                             const char *const *names) {
  for (int i = 0; i < n_tags + n; i++) {
    const char *name = i < n_tags ? tags[i].key : names[i - n_tags];
    CX_TRY(check_name(m, name, i));
    if (i < n_tags && !(tags[i].value && cx_utf8_valid(tags[i].value)))
      return cx_fail(CX_ERR_ARG, "%s: the value of '%s' is not valid UTF-8", m->path, name);
    for (int j = 0; j < i; j++)
      if (strcmp(name, j < n_tags ? tags[j].key : names[j - n_tags]) == 0)
        return cx_fail(CX_ERR_ARG, "%s: metric '%s' is given twice", m->path, name);
  }
  return CX_OK;
}

static bool build_line(cx_metrics *m, int64_t step, int64_t epoch, int n_tags,
                       const cx_metrics_tag *tags, int n, const char *const *names,
                       const double *values) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  char head[128], num[32];
  snprintf(head, sizeof head, "{\"step\":%lld,\"epoch\":%lld,\"time\":%.3f", (long long)step,
           (long long)epoch, (double)ts.tv_sec + ts.tv_nsec * 1e-9);
  m->len = 0;
  bool ok = puts_(m, head);
  for (int i = 0; ok && i < n_tags; i++)
    ok = put(m, ",", 1) && put_string(m, tags[i].key) && put(m, ":", 1) &&
         put_string(m, tags[i].value);
  int bad = 0;
  for (int i = 0; ok && i < n; i++) {
    ok = put(m, ",", 1) && put_string(m, names[i]) && put(m, ":", 1) &&
         puts_(m, cx_json_number(values[i], num));
    bad += !isfinite(values[i]);
  }
  if (ok && bad) ok = puts_(m, ",\"nonfinite\":{");
  for (int i = 0, k = 0; ok && bad && i < n; i++) {
    if (isfinite(values[i])) continue;
    ok = (k++ == 0 || put(m, ",", 1)) && put_string(m, names[i]) && put(m, ":\"", 2) &&
         puts_(m, nonfinite_name(values[i])) && put(m, "\"", 1);
  }
  return ok && (!bad || put(m, "}", 1)) && put(m, "}\n", 2);
}

cx_status cx_metrics_write(cx_metrics *m, int64_t step, int64_t epoch, int n,
                           const char *const *names, const double *values) {
  return cx_metrics_write_tagged(m, step, epoch, 0, NULL, n, names, values);
}

cx_status cx_metrics_write_tagged(cx_metrics *m, int64_t step, int64_t epoch, int n_tags,
                                  const cx_metrics_tag *tags, int n, const char *const *names,
                                  const double *values) {
  if (n < 0 || (n > 0 && (!names || !values)) || n_tags < 0 || (n_tags > 0 && !tags))
    return cx_fail(CX_ERR_ARG, "%s: cx_metrics_write needs %d names and values, %d tags",
                   m->path, n, n_tags);
  CX_TRY(check_names(m, n_tags, tags, n, names));
  if (!build_line(m, step, epoch, n_tags, tags, n, names, values))
    return cx_fail(CX_ERR_NOMEM, "%s: out of memory building a metrics line", m->path);
  if (fwrite(m->line, 1, m->len, m->f) != m->len || fflush(m->f) != 0) {
    int e = errno;
    clearerr(m->f);
    return cx_fail(CX_ERR_IO, "%s: cannot write metrics: %s", m->path, strerror(e));
  }
  return CX_OK;
}

cx_status cx_metrics_close(cx_metrics *m) {
  if (!m) return CX_OK;
  cx_status s = CX_OK;
  if (fclose(m->f) != 0)
    s = cx_fail(CX_ERR_IO, "%s: cannot close the metrics file: %s", m->path, strerror(errno));
  free(m->line);
  free(m->path);
  free(m);
  return s;
}
