/* Shared by compress train and compress pipeline: see train_common.h. */
#include "train_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/file_replace.h"
#include "../data/data.h"
#include "../export/onnx_export.h"
#include "../import/onnx.h"
#include "../models/zoo.h"
#include "commands.h"
#include "onnx_common.h"

/* ---- the model ---- */

int cx_cli_rename_input(struct cx_graph *g, char **old) {
  *old = NULL;
  if (cx_graph_find_value(g, "input") >= 0) return 0;
  int ids[8], n = cx_cli_graph_inputs(g, ids, 8);
  if (n != 1) return n;
  *old = g->values[ids[0]].name;
  g->values[ids[0]].name = strdup("input");
  if (!g->values[ids[0]].name) g->values[ids[0]].name = *old, *old = NULL;
  return 1;
}

void cx_cli_train_restore_input(cx_graph *g, char *old) {
  if (!old) return;
  int v = cx_graph_find_value(g, "input");
  free(g->values[v].name);
  g->values[v].name = old;
}

cx_status cx_cli_train_load_model(const cx_train_config *c, cx_graph **g, char **old_input) {
  cx_status s = c->model_spec ? cx_model_build(c->model_spec, g, NULL)
                              : cx_onnx_import(c->model_onnx, g, NULL);
  char where[400];
  cx_train_config_where(c->model_node, where, sizeof where);
  if (s != CX_OK) return cx_error_prefix("%s", where), s;
  int n = cx_cli_rename_input(*g, old_input);
  if (n != 1 && cx_graph_find_value(*g, "input") < 0)
    return cx_fail(CX_ERR_ARG, "%s: the model has %d inputs; training takes one, the images", where,
                   n);
  return CX_OK;
}

/* ---- the output folder ---- */

cx_status cx_cli_make_dirs(const char *path) {
  char buf[CX_CLI_PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1;; p++) {
    bool end = !*p;
    if (*p != '/' && !end) continue;
    *p = 0;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return cx_fail(CX_ERR_IO, "%s: cannot create: %s", buf, strerror(errno));
    if (end) return CX_OK;
    *p = '/';
  }
}

void cx_cli_remove_stale_tmp(const char *out, const char *sub) {
  char path[CX_CLI_PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", out, sub);
  cx_file_remove_stale_tmp(out);
  cx_file_remove_stale_tmp(path);
}

/* ---- metrics ---- */

static void keep_error(cx_cli_sinks *k, cx_status s) {
  if (s == CX_OK || k->status != CX_OK) return;
  k->status = s;
  snprintf(k->error, sizeof k->error, "%s", cx_last_error());
  fprintf(stderr, "%s: warning: %s (training goes on)\n", k->command ? k->command : "compress",
          k->error);
}

/* Writes n values under names (metrics, with a "stage" field) and tags (TensorBoard, prefixed
 * with the stage, since a TensorBoard scalar has a tag and nothing else). */
static void write_all(cx_cli_sinks *k, int64_t step, int64_t epoch, int n,
                      const char *const *names, const char *const *tags, const double *v) {
  enum { MAX = 16 };
  char tbuf[MAX][80];
  const char *tp[MAX];
  if (n > MAX) n = MAX;
  for (int i = 0; i < n; i++) {
    tp[i] = tags[i];
    if (!k->stage) continue;
    snprintf(tbuf[i], sizeof tbuf[i], "%s/%s", k->stage, tags[i]);
    tp[i] = tbuf[i];
  }
  cx_metrics_tag stage = {"stage", k->stage};
  keep_error(k, cx_metrics_write_tagged(k->metrics, step, epoch, k->stage ? 1 : 0, &stage, n,
                                        names, v));
  keep_error(k, cx_tb_add_scalars(k->tb, step, n, tp, v));
}

/* A logged step's line: what every run has, then the loss scale and skipped steps when the loss
 * is scaled, then the GPU's figures when the backend reports a device (the CPU's lines keep
 * their keys). */
static void on_step(void *user, const cx_train_step_info *s) {
  enum { N = 14 };
  const char *names[N] = {"loss", "lr", "grad_norm", "accuracy", "images_per_s", "data_wait",
                          "peak_memory_mb"};
  const char *tags[N] = {"train/loss", "train/lr", "train/grad_norm", "train/accuracy",
                         "train/images_per_s", "train/data_wait", "train/peak_memory_mb"};
  double v[N] = {s->loss, s->lr, s->grad_norm, s->accuracy, s->images_per_s, s->data_wait_s,
                 s->peak_memory_mb};
  int n = 7;
#define PUT(name, value) (names[n] = name, tags[n] = "train/" name, v[n++] = (value))
  if (s->loss_scale > 0) {
    PUT("loss_scale", s->loss_scale);
    PUT("skipped_steps", (double)s->skipped_steps);
  }
  if (s->device) {
    if (s->device_util >= 0) PUT("gpu_util", s->device_util);
    PUT("gpu_memory_used_mb", s->device_memory_used_mb);
    PUT("gpu_memory_total_mb", s->device_memory_total_mb);
    PUT("gpu_plan_mb", s->device_plan_mb);
  }
#undef PUT
  write_all(user, s->step, s->epoch, n, names, tags, v);
}

static void on_epoch(void *user, int64_t epoch, int64_t step, const cx_eval_result *val) {
  static const char *const names[] = {"val_top1", "val_top5", "val_loss"};
  static const char *const tags[] = {"val/top1", "val/top5", "val/loss"};
  double v[] = {val->top1, val->top5, val->loss};
  write_all(user, step, epoch, 3, names, tags, v);
}

cx_train_ext cx_cli_sinks_extension(cx_cli_sinks *k) {
  return (cx_train_ext){.name = "metrics", .self = k, .on_step = on_step, .on_epoch = on_epoch};
}

cx_status cx_cli_sinks_open(const char *out, bool append, cx_cli_sinks *k) {
  char path[CX_CLI_PATH_MAX];
  snprintf(path, sizeof path, "%s/metrics.jsonl", out);
  CX_TRY(cx_metrics_open(path, append, &k->metrics));
  snprintf(path, sizeof path, "%s/tensorboard", out);
  return cx_tb_open(path, &k->tb);
}

/* Whether a line (as cx_metrics writes them: {"step":N,"epoch":E,...}) goes on after a rewind. */
static bool line_kept(const char *line, const char *stage, int64_t step, int64_t epoch) {
  long long s, e;
  if (sscanf(line, "{\"step\":%lld,\"epoch\":%lld,", &s, &e) != 2) return true;
  char tag[300];
  snprintf(tag, sizeof tag, "\"stage\":\"%s\"", stage ? stage : "");
  bool tagged = strstr(line, "\"stage\":\"") != NULL;
  if (stage ? !strstr(line, tag) : tagged) return true; /* another stage's */
  if (strstr(line, "\"val_top1\":")) return e < epoch;
  return s <= step;
}

cx_status cx_cli_metrics_rewind(const char *out, const char *stage, int64_t step, int64_t epoch) {
  char path[CX_CLI_PATH_MAX];
  snprintf(path, sizeof path, "%s/metrics.jsonl", out);
  FILE *in = fopen(path, "rb");
  if (!in && errno == ENOENT) return CX_OK;
  if (!in) return cx_fail(CX_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  cx_file_out o;
  cx_status s = cx_file_out_open(path, &o);
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while (s == CX_OK && (n = getline(&line, &cap, in)) > 0)
    if (line[n - 1] == '\n' && line_kept(line, stage, step, epoch)) fputs(line, o.f);
  bool failed = ferror(in) != 0;
  free(line);
  fclose(in);
  if (s != CX_OK) return s;
  if (failed) {
    cx_file_out_abort(&o);
    return cx_fail(CX_ERR_IO, "%s: cannot read", path);
  }
  return cx_file_out_commit(&o);
}

cx_status cx_cli_sinks_close(cx_cli_sinks *k) {
  cx_status a = cx_metrics_close(k->metrics), b = cx_tb_close(k->tb);
  keep_error(k, a != CX_OK ? a : b);
  cx_status s = k->status;
  char error[512];
  snprintf(error, sizeof error, "%s", k->error);
  *k = (cx_cli_sinks){.stage = k->stage, .command = k->command};
  if (s != CX_OK) return cx_fail(s, "%s", error);
  return CX_OK;
}

/* ---- the trained model ---- */

/* "a,b,c" with the fewest digits that read back as the same float. */
static void format_values(const float *v, int n, char *buf, size_t size) {
  size_t at = 0;
  for (int i = 0; i < n && at < size; i++)
    at += (size_t)snprintf(buf + at, size - at, "%s%.9g", i ? "," : "", (double)v[i]);
}

/* The data set's class names as a JSON array, or NULL when it has none. Caller frees. */
static char *class_names_json(const char *path, const char *part) {
  cx_dataset *d = NULL;
  if (cx_dataset_open(path, part, &d) != CX_OK) return NULL;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = cx_dataset_class_name(d, 0) ? open_memstream(&buf, &len) : NULL;
  for (int64_t i = 0; f && i < cx_dataset_get_info(d)->num_classes; i++) {
    fputc(i ? ',' : '[', f);
    cx_json_string(f, cx_dataset_class_name(d, i));
  }
  if (f) fputc(']', f), fclose(f);
  cx_dataset_close(d);
  return buf;
}

cx_status cx_cli_export_trained(const cx_train_config *c, const cx_graph *g, const char *path,
                                const cx_cli_export *e) {
  int input = 0;
  cx_cli_graph_inputs(g, &input, 1);
  int ch = (int)g->values[input].shape.d[1];
  char mean[200], std[200];
  format_values(c->opts.val_aug.mean, ch, mean, sizeof mean);
  format_values(c->opts.val_aug.std, ch, std, sizeof std);
  char *classes = class_names_json(c->train_path, c->opts.train_part);
  cx_onnx_metadata meta[] = {
      {CX_META_LAYOUT, "NCHW"}, {CX_META_SCALE, "1/255"}, {CX_META_MEAN, mean},
      {CX_META_STD, std}, {CX_META_CONFIG, c->path}, {CX_META_HASH, c->hash},
      {CX_META_CLASSES, classes}};
  cx_onnx_export_opts eo = {.opset = e && e->opset ? e->opset : 13, .fold_bn = e && e->fold_bn,
                            .producer_version = CX_VERSION, .metadata = meta,
                            .n_metadata = classes ? 7 : 6};
  cx_status s = cx_onnx_export(g, path, &eo);
  free(classes);
  return s;
}
