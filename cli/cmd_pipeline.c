/* compress pipeline FILE.toml (or compress FILE.toml): the stages of a pipeline file in order,
 * skipping those already complete (docs/pipeline.md). */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../import/onnx.h"
#include "../train/checkpoint.h"
#include "commands.h"
#include "dist_cli.h"
#include "onnx_common.h"
#include "pipeline.h"

enum { PATH_MAX_ = CX_CLI_PATH_MAX };

typedef struct args {
  const char *file, *out, *only, *from, *device;
  int64_t stop_after; /* stop the stage that trains at this step, as if interrupted */
} args;

typedef struct runner {
  cx_stage_result counts; /* of the stage running, in this run: what its record added */
  cx_cli_sinks sinks;
  cx_pipeline p;
  args a;
  const char *out;
} runner;

static volatile sig_atomic_t interrupted;

static void on_signal(int sig) {
  (void)sig;
  interrupted = 1;
}

/* ---- the stage manifest (cli/pipeline_manifest.c) ---- */

static bool manifest_is(const runner *r, const char *stage, const char *what, const char *hash) {
  return cx_pipeline_manifest_read(r->out, stage, what, hash, NULL);
}

static void manifest_remove(const runner *r, const char *stage, const char *what) {
  char path[PATH_MAX_];
  cx_pipeline_manifest_path(r->out, stage, what, path, sizeof path);
  remove(path);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

static bool stage_complete(const runner *r, const cx_pipeline_stage *s) {
  char path[PATH_MAX_];
  snprintf(path, sizeof path, "%s/%s", r->out, s->output);
  return exists(path) && manifest_is(r, s->name, "done", s->hash);
}

/* Removes the checkpoints of an earlier run with another config. */
static void clear_checkpoints(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[PATH_MAX_ + 300];
  while (d && (e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (strncmp(e->d_name, "step-", 5) || n < 4 || strcmp(e->d_name + n - 3, ".h5")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    remove(path);
  }
  if (d) closedir(d);
}

/* ---- one stage ---- */

/* Whether the stage continues an interrupted run: its .started manifest holds its checkpoint
 * hash and its folder a checkpoint (into resume, with the time spent so far into *before); else
 * resume is "" and *before empty. Reads only. */
static bool find_resume(const runner *r, const cx_pipeline_stage *s, char *resume, size_t size,
                        cx_stage_result *before) {
  char ckdir[PATH_MAX_];
  snprintf(ckdir, sizeof ckdir, "%s/checkpoints/%s", r->out, s->name);
  if (cx_pipeline_manifest_read(r->out, s->name, "started", s->tc.hash, before) &&
      cx_checkpoint_find_last(ckdir, resume, size) == CX_OK)
    return true;
  resume[0] = 0;
  *before = cx_stage_result_empty();
  return false;
}

/* The output model of the stage's input stage, with its image input named "input". */
static cx_status load_input(runner *r, const cx_pipeline_stage *s, cx_graph **g) {
  *g = NULL;
  if (s->input < 0) return CX_OK;
  char path[PATH_MAX_], *old = NULL;
  snprintf(path, sizeof path, "%s/%s", r->out, r->p.stages[s->input].output);
  CX_TRY(cx_onnx_import(path, g, NULL));
  cx_cli_rename_input(*g, &old);
  free(old);
  return CX_OK;
}

static cx_stage_run stage_run(runner *r, cx_pipeline_stage *s, const cx_graph *input) {
  return (cx_stage_run){.p = &r->p, .s = s, .out = r->out, .input = input,
                        .opts = &s->tc.opts, .result = &r->counts};
}

/* Trains the stage's model g with the metrics writers and the record's extensions (input: the
 * input stage's model); *before: the time its earlier, interrupted runs took (resuming). */
static cx_status train_stage(runner *r, cx_stage_run *sr, cx_graph **g, cx_train_result *res,
                             cx_stage_result *before) {
  cx_pipeline_stage *s = (cx_pipeline_stage *)sr->s;
  cx_train_opts *o = &s->tc.opts;
  char ckdir[PATH_MAX_], resume[PATH_MAX_];
  snprintf(ckdir, sizeof ckdir, "%s/checkpoints/%s", r->out, s->name);
  bool resuming = find_resume(r, s, resume, sizeof resume, before);
  CX_TRY(cx_dist_barrier()); /* every rank has read what rank 0 may now change */
  if (cx_dist_is_root()) CX_TRY(cx_cli_make_dirs(ckdir));
  if (resuming) printf("%s: resuming from %s\n", s->name, resume);
  else if (cx_dist_is_root()) {
    clear_checkpoints(ckdir);
    CX_TRY(cx_pipeline_manifest_write(r->out, s->name, "started", s->tc.hash, NULL));
  }
  o->checkpoint_dir = ckdir;
  o->resume_from = *resume ? resume : NULL;
  o->interrupt = &interrupted;
  o->stop_after = r->a.stop_after;
  o->progress_bar = isatty(fileno(stdout));
  r->sinks.stage = s->name;
  cx_train_ext sinks = cx_cli_sinks_extension(&r->sinks);
  cx_status st = cx_dist_is_root() ? cx_stage_run_add(sr, &sinks) : CX_OK;
  cx_prune_bn_l1 bn = {.lambda = s->tc.bn_l1}; /* the training table's bn_l1 (network slimming) */
  cx_train_ext slim = cx_prune_bn_l1_extension(&bn);
  if (st == CX_OK && bn.lambda > 0) st = cx_stage_run_add(sr, &slim);
  if (st == CX_OK && s->def->begin) st = s->def->begin(sr);
  cx_cli_ddp ddp = {0};
  cx_train_ext dp;
  if (st == CX_OK) st = cx_cli_ddp_open(&ddp, s->tc.sync_bn);
  if (st == CX_OK && ddp.d) { /* last: the other extensions see averaged gradients */
    dp = cx_ddp_extension(ddp.d);
    st = cx_stage_run_add(sr, &dp);
  }
  /* this rank's share of the data; rank 0 alone checkpoints and evaluates */
  cx_train_opts mine = *o;
  cx_cli_dist_train_opts(&mine);
  if (st == CX_OK) st = cx_train(*g, &mine, res);
  if (st == CX_OK) cx_cli_ddp_print(&ddp, res, stdout);
  cx_cli_ddp_close(&ddp);
  if (st == CX_OK && !res->stopped && s->def->trained_model) st = s->def->trained_model(sr, g);
  o->extensions = NULL, o->n_extensions = 0; /* they lived in sr */
  return st;
}

static void print_result(const cx_pipeline_stage *s, const cx_train_result *res,
                         const cx_stage_result *out, const char *path) {
  printf("%s: ", s->name);
  if (res->steps)
    printf("%lld steps in %.1f s (%.0f img/s), ", (long long)res->steps, res->seconds,
           res->images_per_s);
  if (out->val.n) printf("validation top-1 %.2f%%, ", out->val.top1);
  printf("wrote %s\n", path);
  if (out->teacher_batches || out->cached_batches)
    printf("%s: teacher outputs of %lld batches computed, %lld read from the cache\n", s->name,
           (long long)out->teacher_batches, (long long)out->cached_batches);
}

/* The stage's results for the manifest: the training time of this run added to that of
 * earlier ones, and the model's accuracy (the trainer's last evaluation, or one made now). */
static cx_status stage_result(const runner *r, const cx_pipeline_stage *s, const cx_graph *g,
                              const cx_train_result *res, const cx_stage_result *before,
                              const cx_eval_result *start, cx_stage_result *out) {
  const cx_train_opts *o = &s->tc.opts;
  *out = cx_stage_result_empty();
  out->start = *start;
  out->teacher_batches = before->teacher_batches + r->counts.teacher_batches;
  out->cached_batches = before->cached_batches + r->counts.cached_batches;
  if (s->trains) {
    out->train_seconds = res->seconds;
    out->images_per_s = res->images_per_s;
    out->steps = res->steps;
    out->ranks = res->world;
    out->comm_wait = res->step_seconds > 0 ? res->sync_wait_s / res->step_seconds : 0;
  }
  out->val = res->val;
  if (!cx_dist_is_root()) return CX_OK; /* rank 0 reports */
  if (!out->val.n && o->val_path && !s->def->score_output) /* else: scored after export */
    CX_TRY(cx_evaluate(g, o->backend, o->val_path, o->val_part, &o->val_aug, o->batch_size,
                       &out->val));
  return CX_OK;
}

/* The stage's time over all its runs: the training time (which checkpoints carry, so that it
 * survives a run that was killed) plus what the runs spent outside training (loading, export,
 * evaluation after training), as far as the .started file kept it. */
static double stage_seconds(const cx_stage_result *before, const cx_train_result *res,
                            double seconds) {
  double outside = seconds - (res->seconds - res->resumed_seconds);
  if (isfinite(before->seconds) && isfinite(before->train_seconds))
    outside += before->seconds - before->train_seconds;
  return res->seconds + outside;
}

/* A stopped stage keeps its time so far in its .started file, for the report. */
static cx_status stopped(runner *r, const cx_pipeline_stage *s, const cx_train_result *res,
                         const cx_stage_result *before, double seconds) {
  cx_stage_result so_far = cx_stage_result_empty();
  so_far.seconds = stage_seconds(before, res, seconds);
  so_far.train_seconds = res->seconds;
  so_far.teacher_batches = before->teacher_batches + r->counts.teacher_batches;
  so_far.cached_batches = before->cached_batches + r->counts.cached_batches;
  if (cx_dist_is_root())
    CX_TRY(cx_pipeline_manifest_write(r->out, s->name, "started", s->tc.hash, &so_far));
  return cx_fail(CX_ERR_ARG, "%s: interrupted at step %lld; run the same command again to "
                 "continue from the checkpoint", s->name, (long long)res->steps);
}

/* The stage's accuracy as our runtime runs its exported file (cx_stage_def.score_output). */
static cx_status score_file(const cx_pipeline_stage *s, const char *path, cx_stage_result *out) {
  const cx_train_opts *o = &s->tc.opts;
  if (!o->val_path) return CX_OK;
  cx_graph *f = NULL;
  CX_TRY(cx_onnx_import(path, &f, NULL));
  cx_status st = cx_evaluate(f, o->backend, o->val_path, o->val_part, &o->val_aug,
                             o->batch_size, &out->val);
  cx_graph_free(f);
  return st;
}

static cx_status finish(runner *r, const cx_pipeline_stage *s, cx_graph *g, char *old,
                        cx_stage_result *result, const cx_train_result *res) {
  if (!cx_dist_is_root()) return free(old), CX_OK; /* rank 0 writes the stage's files */
  char path[PATH_MAX_];
  snprintf(path, sizeof path, "%s/%s", r->out, s->output);
  cx_cli_train_restore_input(g, old);
  CX_TRY(cx_cli_export_trained(&s->tc, g, path, &r->p.export));
  if (s->def->score_output) CX_TRY(score_file(s, path, result));
  CX_TRY(cx_pipeline_manifest_write(r->out, s->name, "done", s->hash, result));
  print_result(s, res, result, path);
  /* complete: a forced rerun starts afresh rather than resuming from the last step */
  manifest_remove(r, s->name, "started");
  return CX_OK;
}

/* The model the stage trains, evaluated before training where its record says what that model
 * is (cx_stage_def.start_label); rank 0 evaluates. start->n stays 0 otherwise. */
static cx_status score_start(const runner *r, const cx_pipeline_stage *s, const cx_graph *g,
                             cx_eval_result *start) {
  const cx_train_opts *o = &s->tc.opts;
  const char *label = s->def->start_label ? s->def->start_label(&r->p) : NULL;
  if (!label || !s->trains || !o->val_path || !cx_dist_is_root()) return CX_OK;
  CX_TRY(cx_evaluate(g, o->backend, o->val_path, o->val_part, &o->val_aug, o->batch_size, start));
  printf("%s: %s: validation top-1 %.2f%%\n", s->name, label, start->top1);
  return CX_OK;
}

/* The model the stage trains: its record's, or the one its table names. */
static cx_status load_model(cx_stage_run *sr, cx_pipeline_stage *s, cx_graph **g, char **old) {
  if (!s->def->load_model) return cx_cli_train_load_model(&s->tc, g, old);
  return s->def->load_model(sr, g, old);
}

static cx_status run_stage(runner *r, int id) {
  cx_pipeline_stage *s = &r->p.stages[id];
  char *old = NULL;
  double t0 = now();
  r->counts = (cx_stage_result){0}; /* counts the record adds (distillation) */
  CX_TRY(cx_dist_barrier()); /* every rank has decided to run it before its manifest goes */
  if (cx_dist_is_root()) manifest_remove(r, s->name, "done");
  printf("%s: %s\n", s->name, s->trains ? "training" : "exporting");
  fflush(stdout);
  cx_graph *g = NULL, *input = NULL;
  cx_train_result res = {0};
  cx_stage_result before = cx_stage_result_empty(), result;
  cx_eval_result start = {0};
  cx_status st = load_input(r, s, &input);
  /* one run of the record from its model to its end, so begin can reuse what load_model made */
  cx_stage_run sr = stage_run(r, s, input);
  if (st == CX_OK) st = load_model(&sr, s, &g, &old);
  if (st == CX_OK) st = score_start(r, s, g, &start);
  if (st == CX_OK && s->trains) st = train_stage(r, &sr, &g, &res, &before);
  cx_status e = s->def->end ? s->def->end(&sr) : CX_OK;
  if (st == CX_OK) st = e;
  if (st == CX_OK && res.stopped) st = stopped(r, s, &res, &before, now() - t0);
  else if (st == CX_OK) {
    st = stage_result(r, s, g, &res, &before, &start, &result);
    result.seconds = stage_seconds(&before, &res, now() - t0);
    if (st == CX_OK) {
      st = finish(r, s, g, old, &result, &res);
      old = NULL;
    }
  }
  free(old);
  cx_graph_free(g);
  cx_graph_free(input);
  /* the next stage reads what rank 0 wrote (its input model, the manifest) */
  if (st == CX_OK) st = cx_dist_barrier();
  return st;
}

/* ---- the order ---- */

static bool selected(const runner *r, int id) {
  if (r->a.only) return id == cx_pipeline_stage_find(r->a.only);
  return !r->a.from || id >= cx_pipeline_stage_find(r->a.from);
}

/* A stage that will run needs its input stage's model, complete or made by this run. */
static cx_status check_order(runner *r) {
  const char *opt[] = {r->a.only, r->a.from};
  for (int i = 0; i < 2; i++)
    if (opt[i] && (cx_pipeline_stage_find(opt[i]) < 0 ||
                   !r->p.stages[cx_pipeline_stage_find(opt[i])].present))
      return cx_fail(CX_ERR_ARG, "%s: no stage '%s' in this file (stages: teacher, scratch, "
                     "distill, prune, quantize; each runs when its table is there)", r->a.file,
                     opt[i]);
  for (int i = 0; i < CX_STAGE_COUNT; i++) {
    const cx_pipeline_stage *s = &r->p.stages[i], *in;
    if (!s->present || s->input < 0 || !selected(r, i)) continue;
    in = &r->p.stages[s->input];
    if (!selected(r, s->input) && !stage_complete(r, in))
      return cx_fail(CX_ERR_ARG, "%s: the %s stage needs the %s stage's %s/%s: run the %s stage "
                     "first", r->a.file, s->name, in->name, r->out, in->output, in->name);
  }
  return CX_OK;
}

/* Whether run_all runs the stage: present, selected, and forced or not complete. */
static bool will_run(const runner *r, int id) {
  const cx_pipeline_stage *s = &r->p.stages[id];
  if (!s->present || !selected(r, id)) return false;
  return r->a.only || r->a.from || !stage_complete(r, s);
}

static cx_status run_all(runner *r) {
  for (int i = 0; i < CX_STAGE_COUNT; i++) {
    cx_pipeline_stage *s = &r->p.stages[i];
    if (will_run(r, i)) CX_TRY(run_stage(r, i));
    else if (s->present && selected(r, i))
      printf("%s: complete (%s/%s), skipped\n", s->name, r->out, s->output);
  }
  return CX_OK;
}

/* Each stage that will train, checked as cx_train checks it (its data against its batch, its
 * schedule, the checkpoint it would continue from), before this run writes anything. */
/* Metrics of the stages that will continue from a checkpoint, as far as it goes
 * (cx_cli_metrics_rewind; a stage that starts afresh keeps its old lines, which the report's
 * last-run rule reads past). After the checks, before the writers open the file. */
static cx_status rewind_metrics(const runner *r) {
  for (int i = 0; i < CX_STAGE_COUNT; i++) {
    const cx_pipeline_stage *s = &r->p.stages[i];
    if (!s->trains || !will_run(r, i)) continue;
    char resume[PATH_MAX_];
    cx_stage_result before;
    cx_checkpoint_meta m;
    if (!find_resume(r, s, resume, sizeof resume, &before)) continue;
    CX_TRY(cx_checkpoint_peek(resume, &m));
    CX_TRY(cx_cli_metrics_rewind(r->out, s->name, m.step, m.epoch));
  }
  return CX_OK;
}

static cx_status check_stages(const runner *r) {
  for (int i = 0; i < CX_STAGE_COUNT; i++) {
    const cx_pipeline_stage *s = &r->p.stages[i];
    if (!s->trains || !will_run(r, i)) continue;
    char resume[PATH_MAX_];
    cx_stage_result before;
    cx_train_opts o = s->tc.opts;
    o.resume_from = find_resume(r, s, resume, sizeof resume, &before) ? resume : NULL;
    cx_cli_dist_train_opts(&o); /* the global batch against the ranks */
    cx_status st = cx_train_check(&o);
    if (st != CX_OK) return cx_error_prefix("%s: the %s stage", r->a.file, s->name), st;
  }
  return CX_OK;
}

static cx_status prepare(runner *r) {
  CX_TRY(cx_pipeline_load(r->a.file, &r->p));
  r->out = r->a.out ? r->a.out : r->p.out_dir;
  if (!r->out)
    return cx_fail(CX_ERR_ARG, "%s: no output folder: set [run] out_dir or pass --out DIR",
                   r->a.file);
  CX_TRY(check_order(r));
  const cx_backend *backend = NULL;
  cx_status d = r->a.device ? cx_cli_backend(r->a.device, &backend) : CX_OK;
  if (d != CX_OK) return cx_error_prefix("--device"), d;
  CX_TRY(cx_pipeline_check(&r->p, backend));
  return check_stages(r);
}

/* Every check has passed (on every rank): only now the output folder and its files, which
 * rank 0 alone writes. */
static cx_status make_outputs(runner *r) {
  if (!cx_dist_is_root()) return CX_OK;
  char path[PATH_MAX_];
  snprintf(path, sizeof path, "%s/stages", r->out);
  CX_TRY(cx_cli_make_dirs(path));
  CX_TRY(rewind_metrics(r));
  cx_cli_remove_stale_tmp(r->out, "stages");
  cx_cli_remove_stale_tmp(r->out, "teacher_cache");
  for (int i = 0; i < CX_STAGE_COUNT; i++) {
    snprintf(path, sizeof path, "checkpoints/%s", r->p.stages[i].name);
    cx_cli_remove_stale_tmp(r->out, path);
  }
  r->sinks.command = "compress pipeline";
  return cx_cli_sinks_open(r->out, true, &r->sinks);
}

/* The report of every complete stage, after the stages that ran (or none, all complete). */
static cx_status report(runner *r) {
  printf("report: measuring the models\n");
  fflush(stdout);
  int models = 0;
  CX_TRY(cx_pipeline_report(&r->p, r->out, &models));
  if (models)
    printf("report: %s/report.html (also report.md, report.json)\n", r->out);
  return CX_OK;
}

/* ---- the command ---- */

static int parse(int argc, char **argv, args *a) {
  for (int i = 0; i < argc; i++) {
    const char *k = argv[i];
    if (!strcmp(k, "--stop-after")) {
      char *end;
      if (i + 1 >= argc || (a->stop_after = strtoll(argv[++i], &end, 10)) < 1 || *end)
        return cx_cli_usage_error(&cx_cmd_pipeline, "%s", "--stop-after: a step number above 0");
    } else if (!strcmp(k, "--out") || !strcmp(k, "--only") || !strcmp(k, "--from") ||
               !strcmp(k, "--device")) {
      if (i + 1 >= argc)
        return cx_cli_usage_error(&cx_cmd_pipeline, "option '%s' needs a value", k);
      const char *v = argv[++i];
      if (k[2] == 'd') a->device = v;
      else if (k[2] == 'o' && k[3] == 'u') a->out = v;
      else if (k[2] == 'o') a->only = v;
      else a->from = v;
    } else if (k[0] == '-') return cx_cli_usage_error(&cx_cmd_pipeline, "unknown option '%s'", k);
    else if (!a->file) a->file = k;
    else return cx_cli_usage_error(&cx_cmd_pipeline, "unexpected argument '%s'", k);
  }
  if (!a->file) return cx_cli_usage_error(&cx_cmd_pipeline, "%s", "no pipeline file given");
  if (a->only && a->from)
    return cx_cli_usage_error(&cx_cmd_pipeline, "%s", "give --only or --from, not both");
  return 0;
}

static int run(int argc, char **argv) {
  runner *r = calloc(1, sizeof *r);
  if (!r) return fprintf(stderr, "compress pipeline: out of memory\n"), 1;
  int rc = parse(argc, argv, &r->a);
  if (rc) return free(r), rc;
  if (!cx_dist_is_root() && !freopen("/dev/null", "w", stdout)) /* rank 0 reports */
    return free(r), fprintf(stderr, "compress pipeline: cannot silence rank %d\n",
                            cx_dist_rank()), 1;
  /* each agreement: every rank stops together, with the message of the one that failed */
  cx_status s = cx_dist_agree(prepare(r));
  if (s == CX_OK) s = cx_dist_agree(make_outputs(r));
  if (s == CX_OK) {
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    s = run_all(r);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
  }
  if (r->sinks.metrics || r->sinks.tb) {
    cx_status m = cx_cli_sinks_close(&r->sinks);
    if (s == CX_OK) s = m;
  }
  if (s == CX_OK && cx_dist_is_root()) s = report(r);
  rc = s != CX_OK ? cx_cli_fail(&cx_cmd_pipeline) : 0;
  if (rc && interrupted) rc = 130;
  else if (!rc) printf("outputs in %s\n", r->out);
  cx_pipeline_free(&r->p);
  free(r);
  return rc;
}

const cx_command cx_cmd_pipeline = {
    .name = "pipeline",
    .summary = "Run a compression pipeline file: teacher, student, distillation, pruning, INT8",
    .usage =
        "usage: compress pipeline FILE.toml [--out DIR] [--only STAGE | --from STAGE]\n"
        "                                  [--device DEV]\n"
        "       compress FILE.toml [...]\n\n"
        "Runs the stages of a pipeline file in order (docs/pipeline.md lists every key):\n"
        "    teacher   [teacher]: a built-in model trained under [teacher.train], or an\n"
        "              ONNX model; writes teacher.onnx\n"
        "    scratch   [student.train]: the student trained from scratch (the baseline);\n"
        "              writes student_scratch.onnx\n"
        "    distill   [distill]: the student distilled from the teacher; writes\n"
        "              student.onnx\n"
        "    prune     [prune]: the student pruned (magnitude, N:M or channel pruning,\n"
        "              docs/prune.md) and fine-tuned, under distillation when there is\n"
        "              a teacher; writes student_pruned.onnx\n"
        "    quantize  [quantize]: the student quantized to INT8, calibrated (PTQ) or\n"
        "              fine-tuned with fake quantization (QAT, docs/quantize.md);\n"
        "              writes student_int8.onnx (QDQ)\n"
        "into the output folder ([run] out_dir, or --out), with checkpoints/<stage>/,\n"
        "metrics.jsonl (each line with its \"stage\"), tensorboard/ and stages/ (the\n"
        "manifest), and then report.md, report.html and report.json: every complete stage's\n"
        "model side by side (accuracy, size, MACs, latency, training time, curves).\n"
        "The file, the data and every model are checked before anything is written.\n"
        "A stage that is complete (its output there, its inputs and settings unchanged) is\n"
        "skipped; an interrupted one continues from its last checkpoint.\n\n"
        "    --out DIR       the output folder (instead of [run] out_dir)\n"
        "    --only STAGE    run this stage only, even if complete\n"
        "    --from STAGE    run this stage and the ones after it, even if complete\n"
        "    --device DEV    cpu, cuda or auto, instead of [run] device\n"
        "    --stop-after N  stop a training stage at step N with a checkpoint, as Ctrl-C\n"
        "                    does (the next run continues from there)\n",
    .run = run,
};
