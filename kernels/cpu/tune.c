#include "tune.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <oneapi/dnnl/dnnl.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "../../core/dtype.h"

enum { KEY_MAX = 512, MACHINE_MAX = 96 };

typedef struct entry {
  char *key;
  int choice;
} entry;

static entry *entries;
static int n_entries, cap_entries;

/* CPU vendor, family, model and stepping (Zen 4 and Zen 5 both say "AMD EPYC" in /proc/cpuinfo
 * on some hosts, and differ here) and oneDNN's version: a cache shared by several machines, or
 * kept across an upgrade, then holds separate choices. */
static const char *machine(void) {
  static char id[MACHINE_MAX];
  if (id[0]) return id;
  unsigned a = 0, b = 0, c = 0, d = 0;
  char vendor[13] = "unknown";
#if defined(__x86_64__) || defined(__i386__)
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
    vendor[12] = 0;
  }
  a = 0;
  __get_cpuid(1, &a, &b, &c, &d);
#endif
  unsigned family = (a >> 8 & 0xf) + (a >> 20 & 0xff), model = (a >> 4 & 0xf) | (a >> 12 & 0xf0);
  const dnnl_version_t *v = dnnl_version();
  snprintf(id, sizeof id, "%s-%u-%u-%u/dnnl%d.%d.%d", vendor, family, model, a & 0xf, v->major,
           v->minor, v->patch);
  return id;
}

/* NULL: in memory only */
static const char *cache_path(void) {
  static char path[4096];
  const char *env = getenv("CX_TIMING_CACHE"), *xdg = getenv("XDG_CACHE_HOME"),
             *home = getenv("HOME");
  if (env) return *env && strcmp(env, "off") != 0 ? env : NULL;
  if (xdg && *xdg) snprintf(path, sizeof path, "%s/compress/timing-cache.txt", xdg);
  else if (home && *home) snprintf(path, sizeof path, "%s/.cache/compress/timing-cache.txt", home);
  else return NULL;
  return path;
}

static bool find(const char *key, int *choice) {
  for (int i = 0; i < n_entries; i++)
    if (strcmp(entries[i].key, key) == 0) {
      *choice = entries[i].choice;
      return true;
    }
  return false;
}

static void remember(const char *key, int choice) {
  int dummy;
  if (find(key, &dummy)) return;
  if (n_entries == cap_entries) {
    int cap = cap_entries ? 2 * cap_entries : 64;
    entry *e = realloc(entries, sizeof *e * (size_t)cap);
    if (!e) return;
    entries = e, cap_entries = cap;
  }
  char *k = strdup(key);
  if (k) entries[n_entries++] = (entry){k, choice};
}

/* The file's first line for key ("MACHINE/KEY CHOICE"). */
static bool file_lookup(const char *full, int *choice) {
  const char *path = cache_path();
  FILE *f = path ? fopen(path, "r") : NULL;
  if (!f) return false;
  char line[KEY_MAX + MACHINE_MAX + 32], k[KEY_MAX + MACHINE_MAX + 2];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    int c;
    if (sscanf(line, "%609s %d", k, &c) == 2 && strcmp(k, full) == 0) found = true, *choice = c;
  }
  fclose(f);
  return found;
}

/* One write of one whole line to a file opened for appending: lines from processes writing at
 * once do not interleave. */
static void file_append(const char *full, int choice) {
  const char *path = cache_path();
  if (!path) return;
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(dir, 0755) != 0 && errno != EEXIST) return;
      *p = '/';
    }
  FILE *f = fopen(path, "a");
  if (!f) return;
  setvbuf(f, NULL, _IOFBF, 4096);
  fprintf(f, "%s %d\n", full, choice);
  fclose(f);
}

static void full_key(char *full, size_t n, const char *key) {
  snprintf(full, n, "%s/%s", machine(), key);
}

bool cx_tune_lookup(const char *key, int *choice) {
  char full[KEY_MAX + MACHINE_MAX + 2];
  bool found;
#pragma omp critical(cx_tune)
  {
    full_key(full, sizeof full, key);
    found = find(full, choice);
    if (!found && file_lookup(full, choice)) found = true, remember(full, *choice);
  }
  return found;
}

int cx_tune_record(const char *key, int choice) {
  char full[KEY_MAX + MACHINE_MAX + 2];
#pragma omp critical(cx_tune)
  {
    full_key(full, sizeof full, key);
    int first;
    if (!find(full, &first)) {
      file_append(full, choice);
      if (file_lookup(full, &first)) choice = first;
      remember(full, choice);
    }
    else choice = first;
  }
  return choice;
}

/* Bytes from a tensor's first element to one past its last. */
static size_t extent(const cx_tensor *t) {
  size_t bytes = cx_dtype_size(t->dtype);
  for (int k = 0; k < t->shape.ndim; k++) {
    if (t->shape.d[k] == 0) return 0;
    bytes += (size_t)((t->shape.d[k] - 1) * t->strides[k]);
  }
  return bytes;
}

/* Zeroed, and 64-byte aligned as the program's buffers are: oneDNN's kernels use aligned loads. */
static void *zeroed(size_t bytes) {
  bytes = (bytes + 127) / 64 * 64;
  void *p = aligned_alloc(64, bytes);
  if (p) memset(p, 0, bytes);
  return p;
}

static void free_standins(cx_tensor *t, int n) {
  for (int k = 0; k < n; k++) free(t[k].data);
  free(t);
}

/* Zeroed copies of n tensors (absent ones stay absent); NULL when out of memory. */
static cx_tensor *standins(const cx_tensor *src, int n) {
  cx_tensor *t = calloc((size_t)n + 1, sizeof *t);
  for (int k = 0; t && k < n; k++) {
    t[k] = src[k];
    if (!src[k].data) continue;
    t[k].data = zeroed(extent(&src[k]));
    if (!t[k].data) {
      free_standins(t, k);
      return NULL;
    }
  }
  return t;
}

cx_status cx_tune_time(const cx_kernel_args *a, cx_status (*run)(const cx_kernel_args *),
                       void *state, size_t scratch_bytes, double *ms) {
  cx_kernel_args b = *a;
  cx_tensor *in = standins(a->in, a->n_in), *out = standins(a->out, a->n_out);
  void *scratch = zeroed(scratch_bytes);
  cx_status st = in && out && scratch ? CX_OK : cx_fail(CX_ERR_NOMEM, "node '%s': out of memory "
                                                        "while timing", a->node->name);
  b.in = in, b.out = out, b.state = state, b.scratch = scratch;
  *ms = 1e300;
  /* a warm-up run, then up to three timed ones, fewer where one takes long */
  double spent = 0;
  for (int rep = 0; st == CX_OK && rep < 4 && spent < 500; rep++) {
    double t0 = omp_get_wtime();
    st = run(&b);
    double t = 1e3 * (omp_get_wtime() - t0);
    if (rep > 0 && t < *ms) *ms = t;
    if (rep > 0) spent += t;
    else if (t > 250) spent = 500 - t; /* a slow shape: one timed run */
  }
  if (in) free_standins(in, a->n_in);
  if (out) free_standins(out, a->n_out);
  free(scratch);
  return st;
}
