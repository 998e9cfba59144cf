/* compress train CONFIG.toml: one model trained from a config (docs/training.md, docs/cli.md). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/file_replace.h"
#include "../data/data.h"
#include "../export/onnx_export.h"
#include "../import/onnx.h"
#include "../models/zoo.h"
#include "../prune/channel.h"
#include "../train/checkpoint.h"
#include "../train/metrics.h"
#include "../train/tensorboard.h"
#include "../train/train_config.h"
#include "commands.h"
#include "device.h"
#include "dist_cli.h"
#include "onnx_common.h"
#include "train_common.h"

enum { PATH_MAX_ = CX_CLI_PATH_MAX };

typedef struct train_args {
  const char *config, *out, *device;
  bool resume, json, profile;
  int64_t stop_after;
  int64_t profile_after, profile_steps; /* -1 until given; --profile: 10 and 20 */
} train_args;

static volatile sig_atomic_t interrupted;

static void on_signal(int sig) {
  (void)sig;
  interrupted = 1;
}

/* ---- the output folder ---- */

/* A fresh run refuses a folder with checkpoints; --resume needs one. Reads only: the folder is
 * made after every check has passed. */
static cx_status find_resume(const train_args *a, const char *out, char *resume, size_t size) {
  char ckdir[PATH_MAX_];
  snprintf(ckdir, sizeof ckdir, "%s/checkpoints", out);
  struct stat st;
  if (a->resume) return cx_checkpoint_find_last(ckdir, resume, size);
  if (stat(ckdir, &st) == 0 && cx_checkpoint_find_last(ckdir, resume, size) == CX_OK)
    return cx_fail(CX_ERR_ARG, "%s already holds a run (%s): pass --resume to continue it, or "
                   "choose another output folder (--out)", out, resume);
  resume[0] = 0;
  return CX_OK;
}

/* A copy of the config beside the outputs, written under a temporary name and renamed. Its
 * first line says where relative paths in it point (comments do not change the config hash). */
static cx_status copy_config(const char *config, const char *out) {
  char path[PATH_MAX_], abs[PATH_MAX_], cwd[PATH_MAX_ - 200] = "";
  if (config[0] != '/' && !getcwd(cwd, sizeof cwd)) cwd[0] = 0;
  snprintf(abs, sizeof abs, "%s%s%s", cwd, *cwd ? "/" : "", config);
  snprintf(path, sizeof path, "%s/config.toml", out);
  FILE *in = fopen(config, "rb");
  if (!in) return cx_fail(CX_ERR_IO, "%s: cannot read: %s", config, strerror(errno));
  cx_file_out o;
  cx_status s = cx_file_out_open(path, &o);
  if (s != CX_OK) {
    fclose(in);
    return s;
  }
  fprintf(o.f, "# copied by compress train from %s; relative paths below are relative to that "
          "file's folder\n", abs);
  char buf[8192];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0 && fwrite(buf, 1, n, o.f) == n) {}
  bool read_failed = ferror(in) != 0;
  fclose(in);
  if (read_failed) {
    cx_file_out_abort(&o);
    return cx_fail(CX_ERR_IO, "%s: cannot read", config);
  }
  return cx_file_out_commit(&o);
}

/* ---- reporting ---- */

static void print_json(const train_args *a, const cx_train_config *c, const char *out,
                       const char *model, const cx_train_result *r, const cx_cli_ddp *ddp) {
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
  if (r->loss_scale > 0)
    printf(",\"loss_scale\":%.17g,\"skipped_steps\":%lld", r->loss_scale,
           (long long)r->skipped_steps);
  cx_cli_ddp_json(ddp, r, stdout);
  if (r->val.n)
    printf(",\"val\":{\"images\":%lld,\"top1\":%.17g,\"top5\":%.17g,\"loss\":%.17g}}\n",
           (long long)r->val.n, r->val.top1, r->val.top5, r->val.loss);
  else printf(",\"val\":null}\n");
}

static void print_text(const char *model, const cx_train_result *r, const cx_cli_ddp *ddp) {
  printf("trained %lld of %lld steps in %.1f s (%.0f img/s), final loss %.4f\n",
         (long long)r->steps, (long long)r->total_steps, r->seconds, r->images_per_s,
         r->final_loss);
  cx_cli_ddp_print(ddp, r, stdout);
  if (r->val.n)
    printf("validation: top-1 %.2f%%  top-5 %.2f%%  loss %.4f (%lld images)\n", r->val.top1,
           r->val.top5, r->val.loss, (long long)r->val.n);
  if (r->loss_scale > 0)
    printf("loss scale %g at the end; %lld step(s) skipped for overflow\n", r->loss_scale,
           (long long)r->skipped_steps);
  if (*r->checkpoint) printf("checkpoint: %s\n", r->checkpoint);
  if (*model) printf("wrote %s\n", model);
  else if (r->stopped) printf("stopped before the end: continue with --resume\n");
}

/* ---- the command ---- */

/* A number of steps, at least min. */
static int parse_steps(const char *k, const char *v, int64_t min, int64_t *out) {
  char *end, msg[300];
  long long n = strtoll(v, &end, 10);
  if (*v && !*end && n >= min) return *out = n, 0;
  snprintf(msg, sizeof msg, "%s '%.200s': a number of steps%s", k, v, min ? " above 0" : "");
  return cx_cli_usage_error(&cx_cmd_train, "%s", msg);
}

static int parse(int argc, char **argv, train_args *a) {
  for (int i = 0; i < argc; i++) {
    const char *k = argv[i];
    if (!strcmp(k, "--json")) a->json = true;
    else if (!strcmp(k, "--resume")) a->resume = true;
    else if (!strcmp(k, "--profile")) a->profile = true;
    else if (!strcmp(k, "--out") || !strcmp(k, "--stop-after") || !strcmp(k, "--device") ||
             !strcmp(k, "--profile-steps") || !strcmp(k, "--profile-after")) {
      if (i + 1 >= argc) return cx_cli_usage_error(&cx_cmd_train, "option '%s' needs a value", k);
      const char *v = argv[++i];
      int rc = 0;
      if (!strcmp(k, "--out")) a->out = v;
      else if (!strcmp(k, "--device")) a->device = v;
      else if (!strcmp(k, "--stop-after")) rc = parse_steps(k, v, 1, &a->stop_after);
      else if (!strcmp(k, "--profile-steps")) rc = parse_steps(k, v, 1, &a->profile_steps);
      else rc = parse_steps(k, v, 0, &a->profile_after);
      a->profile |= !strncmp(k, "--profile", 9);
      if (rc) return rc;
    } else if (k[0] == '-') return cx_cli_usage_error(&cx_cmd_train, "unknown option '%s'", k);
    else if (!a->config) a->config = k;
    else return cx_cli_usage_error(&cx_cmd_train, "unexpected argument '%s'", k);
  }
  if (!a->config) return cx_cli_usage_error(&cx_cmd_train, "%s", "no config given (CONFIG.toml)");
  if (a->profile_after < 0) a->profile_after = 10;
  if (a->profile_steps < 0) a->profile_steps = a->profile ? 20 : 0;
  return 0;
}

typedef struct job {
  train_args a;
  cx_train_config c;
  cx_graph *g;
  char *old_input;
  const char *out;
  char resume[PATH_MAX_], model[PATH_MAX_];
  cx_cli_sinks k;
  cx_cli_ddp ddp;
  cx_train_result r;
} job;

static cx_status prepare(job *j) {
  CX_TRY(cx_train_config_load(j->a.config, &j->c));
  if (j->a.device) {
    cx_status s = cx_cli_backend(j->a.device, &j->c.opts.backend);
    if (s != CX_OK) return cx_error_prefix("--device"), s;
  } else CX_TRY(cx_cli_backend_of(cx_toml_get(j->c.doc, "run"), &j->c.opts.backend));
  j->out = j->a.out ? j->a.out : j->c.out_dir;
  if (!j->out)
    return cx_fail(CX_ERR_ARG, "%s: no output folder: set [run] out_dir or pass --out DIR",
                   j->a.config);
  CX_TRY(cx_cli_train_load_model(&j->c, &j->g, &j->old_input));
  CX_TRY(cx_train_config_check(&j->c, j->g));
  CX_TRY(find_resume(&j->a, j->out, j->resume, sizeof j->resume));
  j->c.opts.resume_from = *j->resume ? j->resume : NULL;
  cx_cli_dist_train_opts(&j->c.opts); /* every rank resumes from the same checkpoint */
  cx_status s = cx_train_check(&j->c.opts);
  if (s != CX_OK) return cx_error_prefix("%s", j->a.config), s;
  return CX_OK;
}

/* Every check has passed (on every rank): only now the output folder and its files, which
 * rank 0 alone writes. */
static cx_status make_outputs(job *j) {
  if (!cx_dist_is_root()) return CX_OK;
  CX_TRY(cx_cli_make_dirs(j->out));
  cx_cli_remove_stale_tmp(j->out, "checkpoints");
  if (*j->resume) { /* what a killed run logged after its checkpoint goes */
    cx_checkpoint_meta m;
    CX_TRY(cx_checkpoint_peek(j->resume, &m));
    CX_TRY(cx_cli_metrics_rewind(j->out, NULL, m.step, m.epoch));
  }
  CX_TRY(copy_config(j->a.config, j->out));
  j->k.command = "compress train";
  return cx_cli_sinks_open(j->out, j->a.resume, &j->k);
}

static cx_status train(job *j) {
  cx_train_opts *o = &j->c.opts;
  char ckdir[PATH_MAX_];
  snprintf(ckdir, sizeof ckdir, "%s/checkpoints", j->out);
  o->checkpoint_dir = ckdir;
  o->stop_after = j->a.stop_after;
  o->interrupt = &interrupted;
  o->log = j->a.json ? stderr : stdout;
  o->progress_bar = !j->a.json && isatty(fileno(stdout));
  cx_prune_bn_l1 bn = {.lambda = j->c.bn_l1};
  cx_train_ext ext[3];
  int n = 0;
  if (cx_dist_is_root()) ext[n++] = cx_cli_sinks_extension(&j->k);
  if (bn.lambda > 0) ext[n++] = cx_prune_bn_l1_extension(&bn); /* network slimming's penalty */
  CX_TRY(cx_cli_ddp_open(&j->ddp, j->c.sync_bn));
  CX_TRY(cx_cli_ddp_add(&j->ddp, ext, 3, &n)); /* last: the others see averaged gradients */
  o->extensions = ext;
  o->n_extensions = n;
  char trace[PATH_MAX_], json[PATH_MAX_];
  if (j->a.profile_steps > 0) {
    snprintf(trace, sizeof trace, "%s/profile_trace.json", j->out);
    snprintf(json, sizeof json, "%s/profile.json", j->out);
    o->profile_after = j->a.profile_after;
    o->profile_steps = j->a.profile_steps;
    o->profile_trace = trace;
    o->profile_json = json;
    o->profile_top = 20;
  }
  cx_cli_dist_train_opts(o); /* again: rank 0 alone checkpoints, evaluates and reports */
  if (o->resume_from && cx_dist_is_root()) fprintf(o->log, "resuming from %s\n", o->resume_from);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  cx_status s = cx_train(j->g, o, &j->r);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  cx_status m = cx_cli_sinks_close(&j->k);
  o->extensions = NULL, o->n_extensions = 0; /* they lived here */
  CX_TRY(s);
  if (j->r.stopped || !cx_dist_is_root()) return m;
  cx_cli_train_restore_input(j->g, j->old_input);
  j->old_input = NULL;
  snprintf(j->model, sizeof j->model, "%s/model.onnx", j->out);
  CX_TRY(cx_cli_export_trained(&j->c, j->g, j->model, NULL));
  return m;
}

static int run(int argc, char **argv) {
  job *j = calloc(1, sizeof *j);
  if (!j) return fprintf(stderr, "compress train: out of memory\n"), 1;
  j->a.profile_after = j->a.profile_steps = -1;
  int rc = parse(argc, argv, &j->a);
  if (rc) return free(j), rc;
  /* each agreement: every rank stops together, with the message of the one that failed */
  cx_status s = cx_dist_agree(prepare(j));
  if (s == CX_OK) s = cx_dist_agree(make_outputs(j));
  if (s == CX_OK) s = train(j);
  bool root = cx_dist_is_root();
  if (s == CX_OK && root && j->a.json) print_json(&j->a, &j->c, j->out, j->model, &j->r, &j->ddp);
  else if (s == CX_OK && root) print_text(j->model, &j->r, &j->ddp);
  rc = s != CX_OK ? cx_cli_fail(&cx_cmd_train) : 0;
  if (s == CX_OK && j->r.stopped && interrupted) {
    fprintf(stderr, "compress train: interrupted at step %lld; continue with --resume\n",
            (long long)j->r.steps);
    rc = 130;
  }
  if (j->k.metrics || j->k.tb) cx_cli_sinks_close(&j->k);
  cx_cli_ddp_close(&j->ddp);
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
        "usage: compress train CONFIG.toml [--out DIR] [--device DEV] [--resume] [--json]\n"
        "                     [--profile] [--profile-steps N] [--profile-after N]\n\n"
        "Trains the model that CONFIG.toml names on its data set (docs/training.md lists\n"
        "every key) and writes into the output folder ([run] out_dir, or --out):\n"
        "    model.onnx      the trained model (opset 13) with its input preprocessing\n"
        "                    in the metadata, for 'compress eval'\n"
        "    metrics.jsonl   loss, lr, gradient norm, accuracy, throughput per logged\n"
        "                    step; validation top-1/top-5/loss per epoch\n"
        "    tensorboard/    the same scalars for 'tensorboard --logdir'\n"
        "    checkpoints/    step-<N>.h5 every checkpoint_every steps and at the end\n"
        "    config.toml     a copy of the config\n"
        "The config, the data files, the model and the checkpoint to resume from are\n"
        "checked before the output folder is made or any file in it is written.\n"
        "Ctrl-C writes a checkpoint after the current step and stops.\n\n"
        "    --out DIR    the output folder (instead of [run] out_dir)\n"
        "    --device DEV cpu, cuda or auto (instead of [run] device; docs/cuda.md)\n"
        "    --resume     continue from the newest checkpoint in DIR/checkpoints; the\n"
        "                 losses are the same, bit for bit, as those of a run that never\n"
        "                 stopped. A checkpoint of another config is refused\n"
        "    --json       progress on stderr, and one JSON object with the results on\n"
        "                 stdout\n"
        "    --profile    time every op of a window of training steps (after 10 steps,\n"
        "                 20 steps): print the per-op table (forward, backward, data and\n"
        "                 optimizer time, share of the step) when the window ends, and\n"
        "                 write DIR/profile.json and DIR/profile_trace.json, a Chrome\n"
        "                 trace for ui.perfetto.dev (docs/profiling.md)\n"
        "    --profile-steps N, --profile-after N\n"
        "                 the window's length and the steps before it (imply --profile)\n",
    .run = run,
};
