/* The teacher-output cache: per epoch, every sample's top-k logits in memory (indexed by the
 * sample's id in the data set part), loaded from and written to one file per epoch
 * (cache_file.c). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache_file.h"
#include "internal.h"

struct cx_kd_cache {
  char *dir, *key, *description, *path;
  int64_t samples, classes, epoch;
  int k;
  bool quiet, dirty;
  uint8_t *present;             /* [samples] */
  uint16_t *cls, *val, *fill;   /* [samples*k], [samples*k], [samples] */
  int64_t count;
};

/* ---- the top-k encoding ---- */

enum { F16_LOWEST = 0xfbff }; /* -65504: the most negative finite half */

static uint16_t to_f16(double v) {
  if (!(v > -65504.0)) return F16_LOWEST; /* also NaN: never -inf, which KL would turn to NaN */
  return cx_f32_to_f16((float)v);
}

static bool above(const float *z, int64_t a, int64_t b) {
  return z[a] > z[b] || (z[a] == z[b] && a < b);
}

/* the k largest (ties: the lower class first), largest first, by insertion */
static void top_k(const float *z, int64_t classes, int k, int64_t *idx) {
  int n = 0;
  for (int64_t c = 0; c < classes; c++) {
    if (n == k && !above(z, c, idx[k - 1])) continue;
    int j = n < k ? n++ : k - 1;
    while (j > 0 && above(z, c, idx[j - 1])) idx[j] = idx[j - 1], j--;
    idx[j] = c;
  }
}

static bool among(const int64_t *idx, int k, int64_t c) {
  for (int j = 0; j < k; j++)
    if (idx[j] == c) return true;
  return false;
}

void cx_kd_topk_encode(const float *z, int64_t classes, int k, uint16_t *cls, uint16_t *val,
                       uint16_t *fill) {
  int64_t idx[256] = {0};
  if (k > 256) k = 256;
  top_k(z, classes, k, idx);
  double max = z[idx[0]];
  for (int j = 0; j < k; j++) {
    cls[j] = (uint16_t)idx[j];
    val[j] = to_f16(z[idx[j]] - max);
  }
  /* the others: their total probability mass (at T = 1) spread evenly, i.e. the log of the mean
   * of exp(z - max) over them, which lies between their mean and their largest logit */
  double rest = 0;
  for (int64_t c = 0; classes > k && c < classes; c++)
    if (!among(idx, k, c)) rest += exp((double)z[c] - max);
  if (classes <= k) *fill = val[k - 1]; /* unused */
  else *fill = rest > 0 ? to_f16(log(rest / (double)(classes - k))) : F16_LOWEST;
}

void cx_kd_topk_decode(const uint16_t *cls, const uint16_t *val, uint16_t fill, int64_t classes,
                       int k, float *logits) {
  float f = cx_f16_to_f32(fill);
  for (int64_t c = 0; c < classes; c++) logits[c] = f;
  for (int j = 0; j < k; j++) logits[cls[j]] = cx_f16_to_f32(val[j]);
}

/* ---- the cache ---- */

cx_status cx_kd_cache_open(const cx_kd_cache_opts *o, cx_kd_cache **out) {
  *out = NULL;
  if (!o->dir || !*o->dir || !o->key || strlen(o->key) != CX_KD_KEY_HEX)
    return cx_fail(CX_ERR_ARG, "teacher cache: a directory and a %d-digit key are needed",
                   CX_KD_KEY_HEX);
  if (o->samples <= 0 || o->classes <= 0 || o->classes > 65535)
    return cx_fail(CX_ERR_ARG, "teacher cache: %lld samples of %lld classes (1 to 65535)",
                   (long long)o->samples, (long long)o->classes);
  int k = o->k > 0 ? o->k : (o->classes < 10 ? (int)o->classes : 10);
  if (k > o->classes || k > 256)
    return cx_fail(CX_ERR_ARG, "teacher cache: k = %d must be at most the %lld classes and 256",
                   k, (long long)o->classes);
  cx_kd_cache *c = calloc(1, sizeof *c);
  if (!c) return cx_fail(CX_ERR_NOMEM, "out of memory");
  *c = (cx_kd_cache){.dir = strdup(o->dir), .key = strdup(o->key),
                     .description = strdup(o->description ? o->description : ""),
                     .samples = o->samples, .classes = o->classes, .epoch = -1, .k = k,
                     .quiet = o->quiet};
  size_t n = (size_t)o->samples, nk = n * (size_t)k;
  c->present = calloc(n, 1);
  c->cls = malloc(nk * 2);
  c->val = malloc(nk * 2);
  c->fill = malloc(n * 2);
  c->path = malloc(strlen(o->dir) + CX_KD_KEY_HEX + 40);
  if (!c->dir || !c->key || !c->description || !c->present || !c->cls || !c->val || !c->fill ||
      !c->path) {
    cx_kd_cache_close(c);
    return cx_fail(CX_ERR_NOMEM, "teacher cache: out of memory for %lld samples",
                   (long long)o->samples);
  }
  *out = c;
  return CX_OK;
}

void cx_kd_cache_close(cx_kd_cache *c) {
  if (!c) return;
  free(c->dir);
  free(c->key);
  free(c->description);
  free(c->path);
  free(c->present);
  free(c->cls);
  free(c->val);
  free(c->fill);
  free(c);
}

static cx_kd_cache_meta meta_of(const cx_kd_cache *c) {
  cx_kd_cache_meta m = {.description = c->description, .epoch = c->epoch, .classes = c->classes,
                        .k = c->k, .samples = c->samples};
  snprintf(m.key, sizeof m.key, "%s", c->key);
  return m;
}

static void load(cx_kd_cache *c) {
  struct stat st;
  if (stat(c->path, &st) != 0) return;
  cx_kd_cache_meta m = meta_of(c);
  cx_kd_cache_rows r;
  if (cx_kd_cache_file_read(c->path, &m, &r) != CX_OK) {
    if (!c->quiet)
      fprintf(stderr, "warning: teacher cache ignored and rewritten: %s\n", cx_last_error());
    cx_error_clear();
    return;
  }
  size_t k = (size_t)c->k;
  for (int64_t i = 0; i < r.m; i++) {
    int64_t id = r.ids[i];
    c->count += !c->present[id];
    c->present[id] = 1;
    memcpy(c->cls + (size_t)id * k, r.cls + (size_t)i * k, 2 * k);
    memcpy(c->val + (size_t)id * k, r.val + (size_t)i * k, 2 * k);
    c->fill[id] = r.fill[i];
  }
  cx_kd_cache_rows_free(&r);
}

cx_status cx_kd_cache_epoch(cx_kd_cache *c, int64_t epoch) {
  if (epoch == c->epoch) return CX_OK;
  if (epoch < 0) return cx_fail(CX_ERR_ARG, "teacher cache: epoch %lld", (long long)epoch);
  c->epoch = epoch;
  c->count = 0;
  c->dirty = false;
  memset(c->present, 0, (size_t)c->samples);
  sprintf(c->path, "%s/%s/epoch-%04lld.h5", c->dir, c->key, (long long)epoch);
  load(c);
  return CX_OK;
}

bool cx_kd_cache_get(const cx_kd_cache *c, const int64_t *ids, int64_t n, float *logits) {
  if (c->epoch < 0) return false;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= c->samples || !c->present[ids[i]]) return false;
  size_t k = (size_t)c->k;
  for (int64_t i = 0; i < n; i++) {
    size_t at = (size_t)ids[i];
    cx_kd_topk_decode(c->cls + at * k, c->val + at * k, c->fill[at], c->classes, c->k,
                      logits + i * c->classes);
  }
  return true;
}

cx_status cx_kd_cache_put(cx_kd_cache *c, const int64_t *ids, int64_t n, const float *logits) {
  if (c->epoch < 0) return cx_fail(CX_ERR_ARG, "teacher cache: no epoch begun");
  size_t k = (size_t)c->k;
  for (int64_t i = 0; i < n; i++) {
    int64_t id = ids[i];
    if (id < 0 || id >= c->samples)
      return cx_fail(CX_ERR_ARG, "teacher cache: sample id %lld outside [0, %lld)", (long long)id,
                     (long long)c->samples);
    cx_kd_topk_encode(logits + i * c->classes, c->classes, c->k, c->cls + (size_t)id * k,
                      c->val + (size_t)id * k, &c->fill[id]);
    c->count += !c->present[id];
    c->present[id] = 1;
  }
  c->dirty = c->dirty || n > 0;
  return CX_OK;
}

static cx_status make_dir(const char *path) {
  if (mkdir(path, 0777) == 0 || errno == EEXIST) return CX_OK;
  return cx_fail(CX_ERR_IO, "%s: cannot create the cache directory: %s", path, strerror(errno));
}

/* the directory and every missing parent */
static cx_status make_dirs(const char *path) {
  char *p = strdup(path);
  if (!p) return cx_fail(CX_ERR_NOMEM, "out of memory");
  cx_status s = CX_OK;
  for (char *q = p + 1; s == CX_OK && *q; q++)
    if (*q == '/') {
      *q = '\0';
      s = make_dir(p);
      *q = '/';
    }
  if (s == CX_OK) s = make_dir(p);
  free(p);
  return s;
}

static cx_status gather(const cx_kd_cache *c, cx_kd_cache_rows *r) {
  size_t k = (size_t)c->k, m = (size_t)c->count;
  r->m = c->count;
  r->ids = malloc(m * 8 + 8);
  r->cls = malloc(m * k * 2 + 2);
  r->val = malloc(m * k * 2 + 2);
  r->fill = malloc(m * 2 + 2);
  if (!r->ids || !r->cls || !r->val || !r->fill) return cx_fail(CX_ERR_NOMEM, "out of memory");
  size_t j = 0;
  for (int64_t id = 0; id < c->samples; id++) {
    if (!c->present[id]) continue;
    r->ids[j] = id;
    memcpy(r->cls + j * k, c->cls + (size_t)id * k, 2 * k);
    memcpy(r->val + j * k, c->val + (size_t)id * k, 2 * k);
    r->fill[j++] = c->fill[id];
  }
  return CX_OK;
}

cx_status cx_kd_cache_flush(cx_kd_cache *c) {
  if (!c->dirty) return CX_OK;
  char *dir = malloc(strlen(c->dir) + CX_KD_KEY_HEX + 2);
  if (!dir) return cx_fail(CX_ERR_NOMEM, "out of memory");
  sprintf(dir, "%s/%s", c->dir, c->key);
  cx_status s = make_dirs(dir);
  free(dir);
  cx_kd_cache_rows r = {0};
  if (s == CX_OK) s = gather(c, &r);
  cx_kd_cache_meta m = meta_of(c);
  if (s == CX_OK) s = cx_kd_cache_file_write(c->path, &m, &r);
  cx_kd_cache_rows_free(&r);
  if (s == CX_OK) c->dirty = false;
  return s;
}

int64_t cx_kd_cache_count(const cx_kd_cache *c) { return c->count; }
const char *cx_kd_cache_path(const cx_kd_cache *c) { return c->path; }
int cx_kd_cache_k(const cx_kd_cache *c) { return c->k; }
