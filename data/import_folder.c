/* Image folders: DIR/<class>/<image>.{png,jpg,jpeg}, classes and files in name order. Images are
 * decoded and resized by a few threads, a block at a time, and written in order. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

enum { BLOCK = 256, MAX_THREADS = 64 };

typedef struct name_list {
  char **v;
  int64_t n, cap;
} name_list;

static bool list_push(name_list *l, const char *s) {
  if (l->n == l->cap) {
    int64_t cap = l->cap ? l->cap * 2 : 64;
    char **v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return false;
    l->v = v, l->cap = cap;
  }
  return (l->v[l->n] = strdup(s)) ? (l->n++, true) : false;
}

static void list_free(name_list *l) {
  for (int64_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  *l = (name_list){0};
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_image_name(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

/* Entries of dir (not hidden) that are directories (want_dirs) or image files, sorted. */
static cx_status list_dir(const char *dir, bool want_dirs, name_list *out) {
  DIR *d = opendir(dir);
  if (!d) return cx_fail(CX_ERR_IO, "%s: cannot open folder: %s", dir, strerror(errno));
  cx_status s = CX_OK;
  char path[4096];
  for (struct dirent *e; s == CX_OK && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) {
      s = cx_fail(CX_ERR_ARG, "%s/%s: path too long", dir, e->d_name);
      break;
    }
    struct stat st;
    if (stat(path, &st) != 0) continue;
    bool keep = want_dirs ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode) && is_image_name(e->d_name);
    if (keep && !list_push(out, want_dirs ? e->d_name : path))
      s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", dir);
  }
  closedir(d);
  if (s == CX_OK) qsort(out->v, (size_t)out->n, sizeof *out->v, by_name);
  return s;
}

typedef struct folder_set {
  name_list classes, files;
  int64_t *labels;
} folder_set;

static cx_status scan(const char *dir, folder_set *fs) {
  CX_TRY(list_dir(dir, true, &fs->classes));
  if (!fs->classes.n) return cx_fail(CX_ERR_FORMAT, "%s: no class subfolders", dir);
  int64_t cap = 0;
  for (int64_t k = 0; k < fs->classes.n; k++) {
    char sub[4096];
    if (snprintf(sub, sizeof sub, "%s/%s", dir, fs->classes.v[k]) >= (int)sizeof sub)
      return cx_fail(CX_ERR_ARG, "%s/%s: path too long", dir, fs->classes.v[k]);
    int64_t before = fs->files.n;
    CX_TRY(list_dir(sub, false, &fs->files));
    if (fs->files.n > cap) {
      cap = fs->files.cap;
      int64_t *l = realloc(fs->labels, (size_t)cap * sizeof *l);
      if (!l) return cx_fail(CX_ERR_NOMEM, "%s: out of memory", dir);
      fs->labels = l;
    }
    for (int64_t i = before; i < fs->files.n; i++) fs->labels[i] = k;
  }
  if (!fs->files.n)
    return cx_fail(CX_ERR_FORMAT, "%s: no PNG or JPEG files in its subfolders", dir);
  return CX_OK;
}

/* ---- decoding a block in parallel ---- */

typedef struct block_job {
  const folder_set *fs;
  int64_t first, count, h, w;
  int channels;
  bool resize;              /* else every image must be h x w already */
  uint8_t *pixels;          /* [count, h, w, channels] */
  cx_status *status;        /* per image */
  char (*message)[512];     /* per image */
  atomic_llong next;
} block_job;

static cx_status load_one(const block_job *j, int64_t i) {
  const char *path = j->fs->files.v[j->first + i];
  uint8_t *pix;
  int64_t h, w;
  CX_TRY(cx_image_decode(path, j->channels, &pix, &h, &w));
  uint8_t *dst = j->pixels + i * j->h * j->w * j->channels;
  cx_status s = CX_OK;
  if (h == j->h && w == j->w) memcpy(dst, pix, (size_t)(h * w * j->channels));
  else if (j->resize) s = cx_image_resize(pix, h, w, j->channels, dst, j->h, j->w);
  else s = cx_fail(CX_ERR_FORMAT, "%s: %lldx%lld, but the first image is %lldx%lld (give an output "
                   "size to resize every image)", path, (long long)w, (long long)h,
                   (long long)j->w, (long long)j->h);
  if (s == CX_ERR_NOMEM) cx_error_prefix("%s", path);
  free(pix);
  return s;
}

static void *block_worker(void *arg) {
  block_job *j = arg;
  for (int64_t i; (i = atomic_fetch_add(&j->next, 1)) < j->count;) {
    j->status[i] = load_one(j, i);
    if (j->status[i] != CX_OK) snprintf(j->message[i], sizeof j->message[i], "%s", cx_last_error());
  }
  return NULL;
}

static cx_status run_block(block_job *j, int threads) {
  pthread_t t[MAX_THREADS];
  int started = 0;
  atomic_store(&j->next, 0);
  for (; started < threads - 1; started++)
    if (pthread_create(&t[started], NULL, block_worker, j) != 0) break;
  block_worker(j); /* the calling thread decodes too, so one thread is always enough */
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  for (int64_t i = 0; i < j->count; i++) /* the first failure in file order, every time */
    if (j->status[i] != CX_OK) return cx_fail(j->status[i], "%s", j->message[i]);
  return CX_OK;
}

/* The first image fixes the size when none is asked for; then every image must match it. */
static cx_status first_size(const folder_set *fs, int channels, int64_t *h, int64_t *w) {
  uint8_t *pix;
  CX_TRY(cx_image_decode(fs->files.v[0], channels, &pix, h, w));
  free(pix);
  return CX_OK;
}

static cx_status import_blocks(const folder_set *fs, cx_import_sink *sink, block_job *j,
                               int threads) {
  for (int64_t at = 0; at < fs->files.n; at += BLOCK) {
    j->first = at;
    j->count = fs->files.n - at < BLOCK ? fs->files.n - at : BLOCK;
    CX_TRY(run_block(j, threads));
    CX_TRY(cx_import_sink_add(sink, at, j->pixels, fs->labels + at, j->count));
  }
  return CX_OK;
}

static int default_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

static cx_status import_set(const char *dir, const char *out, const cx_import_opts *o,
                            folder_set *fs) {
  CX_TRY(scan(dir, fs));
  int channels = o->channels ? o->channels : 3;
  if (channels != 1 && channels != 3)
    return cx_fail(CX_ERR_ARG, "%s: channels must be 1 or 3, not %d", dir, channels);
  block_job j = {.fs = fs, .channels = channels, .h = o->out_h, .w = o->out_w,
                 .resize = o->out_h > 0 && o->out_w > 0};
  if (!j.resize) CX_TRY(first_size(fs, channels, &j.h, &j.w));
  bool given = o->class_names && o->num_class_names > 0;
  if (given && o->num_class_names != fs->classes.n)
    return cx_fail(CX_ERR_ARG, "%s: %lld class names given for %lld class subfolders", dir,
                   (long long)o->num_class_names, (long long)fs->classes.n);
  char source[4200];
  snprintf(source, sizeof source, "image folder: %s", dir);
  cx_dataset_meta m = {.h = j.h, .w = j.w, .c = channels, .num_classes = fs->classes.n,
                       .class_names = given ? o->class_names : (const char *const *)fs->classes.v,
                       .source = source, .tool = o->tool};
  j.pixels = malloc((size_t)(BLOCK * j.h * j.w * channels));
  j.status = calloc(BLOCK, sizeof *j.status);
  j.message = calloc(BLOCK, sizeof *j.message);
  cx_status s = CX_OK;
  cx_import_sink sink = {0};
  if (!j.pixels || !j.status || !j.message) s = cx_fail(CX_ERR_NOMEM, "%s: out of memory", dir);
  else s = cx_import_sink_open(&sink, out, &m, fs->files.n, o);
  if (s == CX_OK) {
    int threads = o->threads > 0 ? o->threads : default_threads();
    s = import_blocks(fs, &sink, &j, threads > MAX_THREADS ? MAX_THREADS : threads);
    if (s == CX_OK) s = cx_import_sink_finish(&sink);
    else cx_import_sink_abort(&sink);
  }
  free(j.pixels);
  free(j.status);
  free(j.message);
  return s;
}

cx_status cx_import_folder(const char *dir, const char *out, const cx_import_opts *o) {
  folder_set fs;
  memset(&fs, 0, sizeof fs);
  cx_status s = import_set(dir, out, o, &fs);
  list_free(&fs.classes);
  list_free(&fs.files);
  free(fs.labels);
  return s;
}
