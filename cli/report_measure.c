/* What the report measures: a model's file, cost and latency on our CPU runtime and in ONNX
 * Runtime, and curves read back from metrics.jsonl. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/graph_cost.h"
#include "../core/program_input.h"
#include "../import/onnx.h"
#include "device.h"
#include "report.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, by_value);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Every graph input filled with 0.5 (f32) or 0 (anything else). */
static cx_status fill_inputs(cx_program *p) {
  const cx_graph *g = cx_program_graph(p);
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != CX_VALUE_INPUT) continue;
    const cx_tensor *t = cx_program_value_tensor(p, v);
    int64_t n = cx_tensor_numel(t);
    void *host = calloc(cx_tensor_nbytes(t) + 1, 1);
    if (!host) return cx_fail(CX_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; t->dtype == CX_F32 && i < n; i++) ((float *)host)[i] = 0.5f;
    cx_status s = cx_program_write_input(p, g->values[v].name, host, cx_tensor_nbytes(t));
    free(host);
    CX_TRY(s);
  }
  return CX_OK;
}

static cx_status time_program(cx_program *p, int runs, double *ms) {
  CX_TRY(fill_inputs(p));
  double *t = malloc(sizeof(double) * (size_t)runs);
  cx_status s = t ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = -2; s == CX_OK && i < runs; i++) {
    double t0 = now();
    s = cx_program_forward(p);
    if (i >= 0) t[i] = (now() - t0) * 1e3;
  }
  if (s == CX_OK) *ms = median(t, runs);
  free(t);
  return s;
}

cx_status cx_report_cpu_latency(const cx_graph *model, int64_t batch, int runs, int threads,
                                double *ms) {
  *ms = NAN;
  if (runs < 1) return cx_fail(CX_ERR_ARG, "latency: %d runs", runs);
  int keep = omp_get_max_threads();
  if (threads > 0) omp_set_num_threads(threads);
  cx_program *p = NULL;
  /* the report's column is the CPU runtime's latency, whatever device trained the model */
  cx_compile_opts co = {.batch = batch};
  cx_status s = cx_cli_backend("cpu", &co.backend);
  if (s == CX_OK) s = cx_program_compile(model, &co, &p);
  if (s == CX_OK) s = time_program(p, runs, ms);
  cx_program_free(p);
  omp_set_num_threads(keep);
  return s;
}

/* ---- ONNX Runtime ----
 * Scripts kept in the binary, so an installed `compress` needs no file beside them. Each prints
 * "ok <version> <number>" as its last line, or exits 3 when what it imports is missing. */
static const char ort_latency_script[] =
    "import sys, time, statistics\n"
    "try:\n"
    "    import numpy as np, onnxruntime as ort\n"
    "except Exception as e:\n"
    "    print('missing', e); sys.exit(3)\n"
    "path, batch, runs, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])\n"
    "so = ort.SessionOptions()\n"
    "if threads > 0:\n"
    "    so.intra_op_num_threads = threads\n"
    "    so.inter_op_num_threads = 1\n"
    "s = ort.InferenceSession(path, so, providers=['CPUExecutionProvider'])\n"
    "feed = {}\n"
    "for i in s.get_inputs():\n"
    "    shape = [d if isinstance(d, int) else batch for d in i.shape]\n"
    "    shape[0] = batch\n"
    "    feed[i.name] = np.full(shape, 0.5, dtype=np.float32)\n"
    "for _ in range(2): s.run(None, feed)\n"
    "t = []\n"
    "for _ in range(runs):\n"
    "    a = time.perf_counter(); s.run(None, feed); t.append((time.perf_counter() - a) * 1e3)\n"
    "print('ok', ort.__version__, statistics.median(t))\n";

/* Top-1 of the file on a data set (HDF5 "images" [n,H,W,C] uint8 and "labels", in the group
 * `part` or at the root), fed as the file's own metadata says (compress.input_*), so that the
 * figure comes from another runtime and another reader of the data. */
static const char ort_top1_script[] =
    "import sys\n"
    "try:\n"
    "    import numpy as np, onnxruntime as ort, h5py\n"
    "except Exception as e:\n"
    "    print('missing', e); sys.exit(3)\n"
    "path, data, part, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])\n"
    "so = ort.SessionOptions()\n"
    "if threads > 0:\n"
    "    so.intra_op_num_threads = threads\n"
    "    so.inter_op_num_threads = 1\n"
    "s = ort.InferenceSession(path, so, providers=['CPUExecutionProvider'])\n"
    "meta = s.get_modelmeta().custom_metadata_map\n"
    "need = ['compress.input_layout', 'compress.input_scale', 'compress.input_mean', 'compress.input_std']\n"
    "if any(k not in meta for k in need) or meta['compress.input_layout'] != 'NCHW':\n"
    "    print('no compress.input_* metadata in the file'); sys.exit(1)\n"
    "a, _, b = meta['compress.input_scale'].partition('/')\n"
    "scale = np.float32(float(a) / float(b) if b else float(a))\n"
    "mean = np.asarray([float(v) for v in meta['compress.input_mean'].split(',')], np.float32).reshape(1, -1, 1, 1)\n"
    "std = np.asarray([float(v) for v in meta['compress.input_std'].split(',')], np.float32).reshape(1, -1, 1, 1)\n"
    "with h5py.File(data, 'r') as f:\n"
    "    g = f[part] if part else f\n"
    "    images, labels = g['images'][()], g['labels'][()]\n"
    "name = s.get_inputs()[0].name\n"
    "correct = 0\n"
    "for at in range(0, len(labels), 500):\n"
    "    x = (images[at:at + 500].astype(np.float32) * scale).transpose(0, 3, 1, 2)\n"
    "    x = np.ascontiguousarray((x - mean) / std, np.float32)\n"
    "    y = s.run(None, {name: x})[0]\n"
    "    correct += int((y.argmax(axis=1) == labels[at:at + 500]).sum())\n"
    "print('ok', ort.__version__, 100.0 * correct / max(len(labels), 1))\n";

/* 'text' for the shell, with embedded quotes closed and reopened */
static void shell_quote(char *out, size_t size, const char *s) {
  size_t o = 0;
  out[o++] = '\'';
  for (; *s && o + 6 < size; s++) {
    if (*s == '\'') {
      memcpy(out + o, "'\\''", 4);
      o += 4;
    } else {
      out[o++] = *s;
    }
  }
  out[o++] = '\'';
  out[o] = '\0';
}

static cx_status write_script(const char *text, char *path) {
  strcpy(path, "/tmp/cx_ort_XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0) return cx_fail(CX_ERR_IO, "cannot create a temporary script: %s", strerror(errno));
  size_t n = strlen(text);
  bool ok = write(fd, text, n) == (ssize_t)n;
  close(fd);
  if (!ok) {
    unlink(path);
    return cx_fail(CX_ERR_IO, "cannot write the temporary script %s", path);
  }
  return CX_OK;
}

/* Runs script with the arguments (each quoted here) through $CX_PYTHON, else the venv
 * scripts/install-deps.sh makes (where it installs onnxruntime), else /usr/bin/python3; *v is
 * the number of its "ok <version> <number>" line. CX_ERR_UNSUPPORTED: python or what the
 * script imports is missing. what names the measurement in messages. */
static cx_status run_ort_script(const char *script_text, const char *what, const char *onnx_path,
                                const char *const *args, int n_args, double *v, char *version,
                                size_t version_size) {
  *v = NAN;
  const char *py = getenv("CX_PYTHON");
  if (!py || !*py)
    py = access("/opt/compress-venv/bin/python3", X_OK) == 0 ? "/opt/compress-venv/bin/python3"
                                                             : "/usr/bin/python3";
  if (access(py, X_OK) != 0)
    return cx_fail(CX_ERR_UNSUPPORTED, "ONNX Runtime %s: %s is not there", what, py);
  char script[64], q[4200], cmd[16384], line[512] = "";
  CX_TRY(write_script(script_text, script));
  size_t at = 0;
  shell_quote(q, sizeof q, py);
  at += (size_t)snprintf(cmd + at, sizeof cmd - at, "%s %s", q, script);
  for (int i = 0; i < n_args && at < sizeof cmd; i++) {
    shell_quote(q, sizeof q, args[i]);
    at += (size_t)snprintf(cmd + at, sizeof cmd - at, " %s", q);
  }
  if (at < sizeof cmd) snprintf(cmd + at, sizeof cmd - at, " 2>&1");
  FILE *p = popen(cmd, "r");
  cx_status s = CX_OK;
  if (!p) s = cx_fail(CX_ERR_IO, "cannot run %s: %s", py, strerror(errno));
  char last[512] = "";
  while (p && fgets(line, sizeof line, p)) snprintf(last, sizeof last, "%s", line);
  int rc = p ? pclose(p) : -1;
  unlink(script);
  if (s != CX_OK) return s;
  last[strcspn(last, "\n")] = '\0';
  char ver[64];
  double x = NAN;
  if (rc != 0 || sscanf(last, "ok %63s %lf", ver, &x) != 2) {
    if (strncmp(last, "missing", 7) == 0)
      return cx_fail(CX_ERR_UNSUPPORTED, "ONNX Runtime %s: not installed for %s (%s)", what, py,
                     last);
    return cx_fail(CX_ERR_BACKEND, "ONNX Runtime could not run %s (%s): %s", onnx_path, what,
                   last);
  }
  *v = x;
  if (version) snprintf(version, version_size, "%s", ver);
  return CX_OK;
}

cx_status cx_report_ort_latency(const char *onnx_path, int64_t batch, int runs, int threads,
                                double *ms, char *version, size_t version_size) {
  char b[32], r[32], t[32];
  snprintf(b, sizeof b, "%lld", (long long)batch);
  snprintf(r, sizeof r, "%d", runs);
  snprintf(t, sizeof t, "%d", threads);
  const char *args[] = {onnx_path, b, r, t};
  return run_ort_script(ort_latency_script, "latency", onnx_path, args, 4, ms, version,
                        version_size);
}

cx_status cx_report_ort_top1(const char *onnx_path, const char *data, const char *part,
                             int threads, double *top1) {
  char t[32];
  snprintf(t, sizeof t, "%d", threads);
  const char *args[] = {onnx_path, data, part ? part : "", t};
  return run_ort_script(ort_top1_script, "top-1", onnx_path, args, 4, top1, NULL, 0);
}

/* ---- one model's file ---- */

/* Latency at batch 1 and 32 in one runtime; a failure at batch 1 is not tried again at 32. */
static void cpu_latency(cx_report_measurer *ms, const cx_graph *g, cx_report_model *m) {
  for (int i = 0; i < 2; i++)
    if (cx_report_cpu_latency(g, i ? 32 : 1, ms->runs, ms->threads, &m->cpu_ms[i]) != CX_OK) {
      cx_report_model_fail(m, i ? "cpu_ms_batch32" : "cpu_ms_batch1 cpu_ms_batch32", "not run",
                           cx_last_error());
      return;
    }
}

static void ort_latency(cx_report_measurer *ms, const char *path, cx_report_model *m) {
  for (int i = 0; i < 2 && !ms->ort_missing; i++) {
    cx_status s = cx_report_ort_latency(path, i ? 32 : 1, ms->runs, ms->threads, &m->ort_ms[i],
                                        ms->ort_version, sizeof ms->ort_version);
    /* not installed: the report says so once, for every row */
    if (s == CX_ERR_UNSUPPORTED) ms->ort_missing = true;
    else if (s != CX_OK) {
      cx_report_model_fail(m, i ? "ort_ms_batch32" : "ort_ms_batch1 ort_ms_batch32", "refused",
                           cx_last_error());
      return;
    }
  }
}

static void ort_top1(cx_report_measurer *ms, const char *path, cx_report_model *m) {
  if (ms->ort_missing || !ms->val_data) return;
  cx_status s = cx_report_ort_top1(path, ms->val_data, ms->val_part, ms->threads, &m->ort_top1);
  if (s == CX_ERR_UNSUPPORTED) ms->ort_missing = true;
  else if (s != CX_OK) cx_report_model_fail(m, "ort_top1", "refused", cx_last_error());
}

cx_status cx_report_measure_onnx(cx_report_measurer *ms, const char *path, cx_report_model *m) {
  if (!ms || !path || !m || ms->runs < 1)
    return cx_fail(CX_ERR_ARG, "report: measuring %s: no model, path or runs", path ? path : "?");
  struct stat st;
  if (stat(path, &st) != 0)
    cx_report_model_fail(m, "onnx_bytes onnx_gzip_bytes", "no file", strerror(errno));
  else m->onnx_bytes = st.st_size;
  if (m->onnx_bytes >= 0 && cx_report_gzip_size(path, &m->onnx_gzip_bytes) != CX_OK)
    cx_report_model_fail(m, "onnx_gzip_bytes", "unreadable", cx_last_error());
  cx_graph *g = NULL;
  static const char ours[] = "params params_nonzero macs macs_effective cpu_ms_batch1 "
                             "cpu_ms_batch32";
  if (cx_onnx_import(path, &g, NULL) != CX_OK) {
    cx_report_model_fail(m, ours, "not imported", cx_last_error());
  } else {
    cx_graph_cost c;
    if (cx_graph_measure_cost(g, &c) != CX_OK)
      cx_report_model_fail(m, "params params_nonzero macs macs_effective", "no shapes",
                           cx_last_error());
    m->params = c.params, m->params_nonzero = c.params_nonzero;
    m->macs = c.macs, m->macs_effective = c.macs_effective;
    cpu_latency(ms, g, m);
  }
  cx_graph_free(g);
  ort_latency(ms, path, m);
  ort_top1(ms, path, m);
  cx_error_clear();
  return CX_OK;
}

/* ---- curves from metrics.jsonl ---- */

/* The number after "key": in a JSON line; false when absent or null. */
static bool json_field(const char *line, const char *key, double *v) {
  char pat[160];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  if (!p) return false;
  p += strlen(pat);
  while (*p == ' ') p++;
  char *end;
  *v = strtod(p, &end);
  return end != p;
}

static bool grow(cx_report_series *s, int *cap) {
  if (s->n < *cap) return true;
  int nc = *cap ? 2 * *cap : 64;
  double *x = realloc((double *)s->x, sizeof(double) * (size_t)nc);
  if (x) s->x = x;
  double *y = x ? realloc((double *)s->y, sizeof(double) * (size_t)nc) : NULL;
  if (y) s->y = y;
  if (!x || !y) return false;
  *cap = nc;
  return true;
}

cx_status cx_report_metrics_series(const char *path, const char *filter, const char *x_key,
                                   const char *y_key, cx_report_series *out) {
  *out = (cx_report_series){.name = y_key};
  FILE *f = fopen(path, "r");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot read the metrics: %s", path, strerror(errno));
  char *line = NULL;
  size_t len = 0;
  int cap = 0;
  cx_status s = CX_OK;
  while (s == CX_OK && getline(&line, &len, f) > 0) {
    double x, y;
    if ((filter && !strstr(line, filter)) || !json_field(line, x_key, &x) ||
        !json_field(line, y_key, &y))
      continue;
    /* a run again from an earlier x (a rerun, or a resume from an earlier checkpoint) replaces
     * what the file held from there on */
    while (out->n > 0 && out->x[out->n - 1] >= x) out->n--;
    if (!grow(out, &cap)) s = cx_fail(CX_ERR_NOMEM, "out of memory");
    else ((double *)out->x)[out->n] = x, ((double *)out->y)[out->n++] = y;
  }
  free(line);
  fclose(f);
  if (s != CX_OK) cx_report_series_free(out);
  return s;
}

void cx_report_series_free(cx_report_series *s) {
  free((double *)s->x);
  free((double *)s->y);
  s->x = s->y = NULL;
  s->n = 0;
}
