/* compress train CONFIG.toml: one model trained from a config (docs/training.md, docs/cli.md). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../data/data.h"
#include "../export/onnx_export.h"
#include "../import/onnx.h"
#include "../models/zoo.h"
#include "../train/metrics.h"
#include "../train/tensorboard.h"
#include "../train/train_config.h"
#include "commands.h"
#include "onnx_common.h"

enum { PATH_MAX_ = 4200 };

typedef struct train_args {
  const char *config, *out;
  bool resume, json;
  int64_t stop_after;
} train_args;

/* Metrics writers behind the trainer's callbacks; the first write error is kept. */
typedef struct sinks {
  cx_metrics *metrics;
  cx_tb_writer *tb;
  cx_status status;
  char error[512];
} sinks;

static volatile sig_atomic_t interrupted;

static void on_signal(int sig) {
  (void)sig;
  interrupted = 1;
}

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

static void restore_input(cx_graph *g, char *old) {
  if (!old) return;
  int v = cx_graph_find_value(g, "input");
  free(g->values[v].name);
  g->values[v].name = old;
}

static cx_status load_model(const cx_train_config *c, cx_graph **g, char **old_input) {
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

static cx_status make_dirs(const char *path) {
  char buf[PATH_MAX_];
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

/* A fresh run refuses a folder with checkpoints; --resume needs one. */
static cx_status prepare_out(const train_args *a, const char *out, char *resume, size_t size) {
  char ckdir[PATH_MAX_];
  snprintf(ckdir, sizeof ckdir, "%s/checkpoints", out);
  struct stat st;
  if (a->resume) return cx_checkpoint_find_last(ckdir, resume, size);
  CX_TRY(make_dirs(out));
  if (stat(ckdir, &st) == 0 && cx_checkpoint_find_last(ckdir, resume, size) == CX_OK)
    return cx_fail(CX_ERR_ARG, "%s already holds a run (%s): pass --resume to continue it, or "
                   "choose another output folder (--out)", out, resume);
  resume[0] = 0;
  return CX_OK;
}

/* A copy of the config beside the outputs, written under a temporary name and renamed. Its
 * first line says where relative paths in it point (comments do not change the config hash). */
static cx_status copy_config(const char *config, const char *out) {
  char path[PATH_MAX_], tmp[PATH_MAX_ + 32], abs[PATH_MAX_], cwd[PATH_MAX_ - 200] = "";
  if (config[0] != '/' && !getcwd(cwd, sizeof cwd)) cwd[0] = 0;
  snprintf(abs, sizeof abs, "%s%s%s", cwd, *cwd ? "/" : "", config);
  snprintf(path, sizeof path, "%s/config.toml", out);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *in = fopen(config, "rb"), *o = in ? fopen(tmp, "wb") : NULL;
  char buf[8192];
  size_t n;
  bool ok = in && o;
  if (ok)
    ok = fprintf(o, "# copied by compress train from %s; relative paths below are relative to "
                 "that file's folder\n", abs) > 0;
  while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, o) == n;
  ok = ok && !ferror(in);
  if (in) fclose(in);
  if (o && fclose(o) != 0) ok = false;
  if (ok && rename(tmp, path) == 0) return CX_OK;
  int e = errno;
  remove(tmp);
  return cx_fail(CX_ERR_IO, "%s: cannot write: %s", path, strerror(e));
}

/* ---- metrics ---- */

static void keep_error(sinks *k, cx_status s) {
  if (s == CX_OK || k->status != CX_OK) return;
  k->status = s;
  snprintf(k->error, sizeof k->error, "%s", cx_last_error());
  fprintf(stderr, "compress train: warning: %s (training goes on)\n", k->error);
}

static void on_step(void *user, const cx_train_step_info *s) {
  sinks *k = user;
  static const char *const names[] = {"loss", "lr", "grad_norm", "accuracy", "images_per_s",
                                      "data_wait", "peak_memory_mb"};
  static const char *const tags[] = {"train/loss", "train/lr", "train/grad_norm",
                                     "train/accuracy", "train/images_per_s", "train/data_wait",
                                     "train/peak_memory_mb"};
  double v[] = {s->loss, s->lr, s->grad_norm, s->accuracy, s->images_per_s, s->data_wait_s,
                s->peak_memory_mb};
  keep_error(k, cx_metrics_write(k->metrics, s->step, s->epoch, 7, names, v));
  keep_error(k, cx_tb_add_scalars(k->tb, s->step, 7, tags, v));
}

static void on_epoch(void *user, int64_t epoch, int64_t step, const cx_eval_result *val) {
  sinks *k = user;
  static const char *const names[] = {"val_top1", "val_top5", "val_loss"};
  static const char *const tags[] = {"val/top1", "val/top5", "val/loss"};
  double v[] = {val->top1, val->top5, val->loss};
  keep_error(k, cx_metrics_write(k->metrics, step, epoch, 3, names, v));
  keep_error(k, cx_tb_add_scalars(k->tb, step, 3, tags, v));
}

static cx_status open_sinks(const char *out, bool resume, sinks *k) {
  char path[PATH_MAX_];
  snprintf(path, sizeof path, "%s/metrics.jsonl", out);
  CX_TRY(cx_metrics_open(path, resume, &k->metrics));
  snprintf(path, sizeof path, "%s/tensorboard", out);
  return cx_tb_open(path, &k->tb);
}

static cx_status close_sinks(sinks *k) {
  cx_status a = cx_metrics_close(k->metrics), b = cx_tb_close(k->tb);
  keep_error(k, a != CX_OK ? a : b);
  if (k->status != CX_OK) return cx_fail(k->status, "%s", k->error);
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

static cx_status export_model(const cx_train_config *c, const cx_graph *g, const char *out,
                              char *path, size_t size) {
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
  cx_onnx_export_opts eo = {.opset = 13, .producer_version = CX_VERSION, .metadata = meta,
                            .n_metadata = classes ? 7 : 6};
  snprintf(path, size, "%s/model.onnx", out);
  cx_status s = cx_onnx_export(g, path, &eo);
  free(classes);
  return s;
}

/* ---- reporting ---- */

static void print_json(const train_args *a, const cx_train_config *c, const char *out,
                       const char *model, const cx_train_result *r) {
  printf("{\"config\":");
  cx_json_string(stdout, a->config);
  printf(",\"config_hash\":\"%s\",\"out_dir\":", c->hash);
  cx_json_string(stdout, out);
  printf(",\"model\":");
  if (*model) cx_json_string(stdout, model);
  else printf("null");
  printf(",\"steps\":%lld,\"total_steps\":%lld,\"resumed_from\":%lld,\"stopped\":%s,"
         "\"seconds\":%.3f,\"images_per_s\":%.1f,\"final_loss\":%.17g,\"warnings\":%d,"
         "\"checkpoint\":", (long long)r->steps, (long long)r->total_steps,
         (long long)r->resumed_step, r->stopped ? "true" : "false", r->seconds, r->images_per_s,
         r->final_loss, r->warnings);
  if (*r->checkpoint) cx_json_string(stdout, r->checkpoint);
  else printf("null");
  if (r->val.n)
    printf(",\"val\":{\"images\":%lld,\"top1\":%.17g,\"top5\":%.17g,\"loss\":%.17g}}\n",
           (long long)r->val.n, r->val.top1, r->val.top5, r->val.loss);
  else printf(",\"val\":null}\n");
}

static void print_text(const char *model, const cx_train_result *r) {
  printf("trained %lld of %lld steps in %.1f s (%.0f img/s), final loss %.4f\n",
         (long long)r->steps, (long long)r->total_steps, r->seconds, r->images_per_s,
         r->final_loss);
  if (r->val.n)
    printf("validation: top-1 %.2f%%  top-5 %.2f%%  loss %.4f (%lld images)\n", r->val.top1,
           r->val.top5, r->val.loss, (long long)r->val.n);
  if (*r->checkpoint) printf("checkpoint: %s\n", r->checkpoint);
  if (*model) printf("wrote %s\n", model);
  else if (r->stopped) printf("stopped before the end: continue with --resume\n");
}

/* ---- the command ---- */

static int parse(int argc, char **argv, train_args *a) {
  for (int i = 0; i < argc; i++) {
    const char *k = argv[i];
    if (!strcmp(k, "--json")) a->json = true;
    else if (!strcmp(k, "--resume")) a->resume = true;
    else if (!strcmp(k, "--out") || !strcmp(k, "--stop-after")) {
      if (i + 1 >= argc) return cx_cli_usage_error(&cx_cmd_train, "option '%s' needs a value", k);
      const char *v = argv[++i];
      char *end;
      if (k[2] == 'o') a->out = v;
      else if ((a->stop_after = strtoll(v, &end, 10)) < 1 || *end)
        return cx_cli_usage_error(&cx_cmd_train, "--stop-after '%s': a step number above 0", v);
    } else if (k[0] == '-') return cx_cli_usage_error(&cx_cmd_train, "unknown option '%s'", k);
    else if (!a->config) a->config = k;
    else return cx_cli_usage_error(&cx_cmd_train, "unexpected argument '%s'", k);
  }
  if (!a->config) return cx_cli_usage_error(&cx_cmd_train, "%s", "no config given (CONFIG.toml)");
  return 0;
}

typedef struct job {
  train_args a;
  cx_train_config c;
  cx_graph *g;
  char *old_input;
  const char *out;
  char resume[PATH_MAX_], model[PATH_MAX_];
  sinks k;
  cx_train_result r;
} job;

static cx_status prepare(job *j) {
  CX_TRY(cx_train_config_load(j->a.config, &j->c));
  j->out = j->a.out ? j->a.out : j->c.out_dir;
  if (!j->out)
    return cx_fail(CX_ERR_ARG, "%s: no output folder: set [run] out_dir or pass --out DIR",
                   j->a.config);
  CX_TRY(load_model(&j->c, &j->g, &j->old_input));
  CX_TRY(cx_train_config_check(&j->c, j->g));
  CX_TRY(prepare_out(&j->a, j->out, j->resume, sizeof j->resume));
  CX_TRY(copy_config(j->a.config, j->out));
  return open_sinks(j->out, j->a.resume, &j->k);
}

static cx_status train(job *j) {
  cx_train_opts *o = &j->c.opts;
  char ckdir[PATH_MAX_];
  snprintf(ckdir, sizeof ckdir, "%s/checkpoints", j->out);
  o->checkpoint_dir = ckdir;
  o->resume_from = *j->resume ? j->resume : NULL;
  o->stop_after = j->a.stop_after;
  o->interrupt = &interrupted;
  o->log = j->a.json ? stderr : stdout;
  o->progress_bar = !j->a.json && isatty(fileno(stdout));
  o->on_step = on_step;
  o->on_epoch = on_epoch;
  o->user = &j->k;
  if (o->resume_from) fprintf(o->log, "resuming from %s\n", o->resume_from);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  cx_status s = cx_train(j->g, o, &j->r);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  cx_status m = close_sinks(&j->k);
  j->k = (sinks){0};
  CX_TRY(s);
  if (j->r.stopped) return m;
  restore_input(j->g, j->old_input);
  j->old_input = NULL;
  CX_TRY(export_model(&j->c, j->g, j->out, j->model, sizeof j->model));
  return m;
}

static int run(int argc, char **argv) {
  job *j = calloc(1, sizeof *j);
  if (!j) return fprintf(stderr, "compress train: out of memory\n"), 1;
  int rc = parse(argc, argv, &j->a);
  if (rc) return free(j), rc;
  cx_status s = prepare(j);
  if (s == CX_OK) s = train(j);
  if (s == CX_OK && j->a.json) print_json(&j->a, &j->c, j->out, j->model, &j->r);
  else if (s == CX_OK) print_text(j->model, &j->r);
  rc = s != CX_OK ? cx_cli_fail(&cx_cmd_train) : 0;
  if (s == CX_OK && j->r.stopped && interrupted) {
    fprintf(stderr, "compress train: interrupted at step %lld; continue with --resume\n",
            (long long)j->r.steps);
    rc = 130;
  }
  if (j->k.metrics || j->k.tb) close_sinks(&j->k);
  free(j->old_input);
  cx_graph_free(j->g);
  cx_train_config_free(&j->c);
  free(j);
  return rc;
}

const cx_command cx_cmd_train = {
    .name = "train",
    .summary = "Train a model from a TOML config (model, data, optimizer, schedule)",
    .usage =
        "usage: compress train CONFIG.toml [--out DIR] [--resume] [--json]\n\n"
        "Trains the model that CONFIG.toml names on its data set (docs/training.md lists\n"
        "every key) and writes into the output folder ([run] out_dir, or --out):\n"
        "    model.onnx      the trained model (opset 13) with its input preprocessing\n"
        "                    in the metadata, for 'compress eval'\n"
        "    metrics.jsonl   loss, lr, gradient norm, accuracy, throughput per logged\n"
        "                    step; validation top-1/top-5/loss per epoch\n"
        "    tensorboard/    the same scalars for 'tensorboard --logdir'\n"
        "    checkpoints/    step-<N>.h5 every checkpoint_every steps and at the end\n"
        "    config.toml     a copy of the config\n"
        "The config, the data files and the model are checked before training starts.\n"
        "Ctrl-C writes a checkpoint after the current step and stops.\n\n"
        "    --out DIR    the output folder (instead of [run] out_dir)\n"
        "    --resume     continue from the newest checkpoint in DIR/checkpoints; the\n"
        "                 losses are the same, bit for bit, as those of a run that never\n"
        "                 stopped. A checkpoint of another config is refused\n"
        "    --json       progress on stderr, and one JSON object with the results on\n"
        "                 stdout\n",
    .run = run,
};
