/* compress tune's trials: each one's pipeline file, the checks before anything runs, the stages
 * taken from earlier trials, and the trial run as a child `compress pipeline` (cli/tune_trial.h).
 *
 * Why a child process: the pipeline runner's entry point is its command; a child gets it whole
 * (the checks, the manifest, checkpoints, the report, SIGINT to a checkpoint), a trial that
 * fails or crashes does not take the tune down, and every trial starts with clean memory. */
#define _XOPEN_SOURCE 700 /* realpath, symlink */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../core/file_replace.h"
#include "pipeline.h"
#include "tune_trial.h"

enum { PATH_MAX_ = CX_CLI_PATH_MAX };

/* dir/name into buf (size PATH_MAX_); the tune's root is short enough that it always fits. */
static char *join(char *buf, const char *dir, const char *name) {
  if (snprintf(buf, PATH_MAX_, "%s/%s", dir, name) >= PATH_MAX_) buf[0] = 0;
  return buf;
}

void cx_tune_trial_dir(const cx_tune_run *t, int number, char *buf, size_t size) {
  if (snprintf(buf, size, "%s/trials/%04d", t->root, number) >= (int)size) buf[0] = 0;
}

/* ---- the pipeline file of a trial ---- */

static void toml_string_into(const char *s, char *buf, size_t size) {
  FILE *f = fmemopen(buf, size, "w");
  if (!f) return (void)(buf[0] = 0);
  cx_tune_toml_string(f, s);
  fclose(f);
}

/* table and key of a dotted key: "teacher.train.lr" -> "teacher.train", "lr" */
static void split_key(const char *dotted, char *table, size_t size, const char **key) {
  const char *dot = strrchr(dotted, '.');
  snprintf(table, size, "%.*s", (int)(dot - dotted), dotted);
  *key = dot + 1;
}

/* The sets of a trial: the paths, out_dir, and the space's keys at x (x NULL: none of them;
 * only >= 0: that dimension alone). tables holds their table names. */
static int trial_sets(const cx_tune_run *t, const double *x, int only, const char *out,
                      cx_tune_set *sets, char tables[][128]) {
  int n = 0;
  for (int i = 0; i < t->n_paths; i++) sets[n++] = t->paths[i];
  sets[n] = (cx_tune_set){.table = "run", .key = "out_dir"};
  toml_string_into(out, sets[n++].value, sizeof sets[0].value);
  for (int d = 0; x && d < t->cfg.space.n; d++) {
    if (only >= 0 && d != only) continue;
    const cx_tune_dim *dim = &t->cfg.space.dims[d];
    sets[n] = (cx_tune_set){.table = tables[d]};
    split_key(dim->key, tables[d], 128, &sets[n].key);
    FILE *f = fmemopen(sets[n].value, sizeof sets[n].value, "w");
    if (f) cx_tune_dim_write(f, dim, x[d]), fclose(f);
    n++;
  }
  return n;
}

static cx_status write_file(const cx_tune_run *t, const cx_tune_set *sets, int n,
                            const char *path, const char *comment) {
  cx_file_out o;
  CX_TRY(cx_file_out_open(path, &o));
  if (comment) fprintf(o.f, "# %s\n", comment);
  cx_status s = cx_tune_toml_write(o.f, t->doc, sets, n, "tune");
  if (s != CX_OK) return cx_file_out_abort(&o), s;
  return cx_file_out_commit(&o);
}

cx_status cx_tune_write_pipeline(const cx_tune_run *t, const double *x, const char *out,
                                 const char *path, const char *comment) {
  cx_tune_set sets[CX_TUNE_MAX_DIMS + 8];
  char tables[CX_TUNE_MAX_DIMS][128];
  int n = trial_sets(t, x, -1, out, sets, tables);
  return write_file(t, sets, n, path, comment);
}

/* ---- checks ---- */

/* [data] train and val, [teacher] and [student] onnx: relative to the tune file's folder, and
 * written as absolute paths, since a trial's file lives elsewhere. */
static cx_status absolute_paths(cx_tune_run *t) {
  static const char *const keys[][2] = {{"data", "train"}, {"data", "val"},
                                        {"teacher", "onnx"}, {"student", "onnx"}};
  char dir[PATH_MAX_], *real;
  snprintf(dir, sizeof dir, "%s", t->file);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  if (!(real = realpath(dir, NULL)))
    return cx_fail(CX_ERR_IO, "%s: cannot resolve its folder: %s", t->file, strerror(errno));
  for (int i = 0; i < 4; i++) {
    const cx_toml *n = cx_toml_get(cx_toml_get(t->doc, keys[i][0]), keys[i][1]);
    const char *v;
    if (!n || cx_toml_type_of(n) != CX_TOML_STRING || cx_toml_as_string(n, &v) != CX_OK) continue;
    char path[PATH_MAX_];
    snprintf(path, sizeof path, "%s%s%s", v[0] == '/' ? "" : real, v[0] == '/' ? "" : "/", v);
    cx_tune_set *s = &t->paths[t->n_paths++];
    *s = (cx_tune_set){.table = keys[i][0], .key = keys[i][1]};
    toml_string_into(path, s->value, sizeof s->value);
  }
  free(real);
  return CX_OK;
}

/* Loads and checks the pipeline of sets from a temporary file (as `compress pipeline` does
 * before it runs); on failure the message without the temporary file's position (copied into
 * msg). */
static cx_status probe(const cx_tune_run *t, const char *tmp, const cx_tune_set *sets, int n,
                       cx_pipeline *p, char *msg, size_t size) {
  cx_status s = write_file(t, sets, n, tmp, NULL);
  if (s == CX_OK) s = cx_pipeline_load(tmp, p);
  /* the models and data too: class counts, input shapes, each stage's training keys */
  if (s == CX_OK && (s = cx_pipeline_check(p, NULL)) != CX_OK) cx_pipeline_free(p);
  remove(tmp);
  if (s == CX_OK) return CX_OK;
  const char *m = cx_last_error();
  if (!strncmp(m, tmp, strlen(tmp))) { /* "tmp:line:col: what" */
    const char *after = strstr(m + strlen(tmp), ": ");
    m = after ? after + 2 : m + strlen(tmp);
  }
  snprintf(msg, size, "%s", m);
  return s;
}

/* The point of dimension d at one end (end 0, 1) or, for a choice, choice `end`. */
static double probe_value(const cx_tune_dim *d, int end) {
  if (d->kind == CX_TUNE_CHOICE) return end;
  return cx_tune_dim_internal(d, end ? d->hi : d->lo);
}

static cx_status check_dim(const cx_tune_run *t, const char *tmp, int d) {
  const cx_tune_dim *dim = &t->cfg.space.dims[d];
  char table[128], msg[2048];
  const char *key;
  split_key(dim->key, table, sizeof table, &key);
  const cx_toml *tab = cx_toml_get(t->doc, table);
  if (!*table || !*key || !strcmp(table, "tune") || !tab ||
      cx_toml_type_of(tab) != CX_TOML_TABLE)
    return cx_toml_fail(dim->node, CX_ERR_FORMAT, "the file has no [%s] table: a key to search "
                        "is a key of one of the pipeline's tables (\"distill.lr\", "
                        "\"teacher.train.epochs\", ...)", table);
  if (!strcmp(table, "run") && !strcmp(key, "out_dir"))
    return cx_toml_fail(dim->node, CX_ERR_FORMAT, "each trial has its own out_dir");
  int ends = dim->kind == CX_TUNE_CHOICE ? dim->n_choices : 2;
  for (int e = 0; e < ends; e++) {
    double x[CX_TUNE_MAX_DIMS] = {0};
    x[d] = probe_value(dim, e);
    cx_tune_set sets[CX_TUNE_MAX_DIMS + 8];
    char tables[CX_TUNE_MAX_DIMS][128];
    int n = trial_sets(t, x, d, t->root, sets, tables);
    cx_pipeline p;
    cx_status s = probe(t, tmp, sets, n, &p, msg, sizeof msg);
    /* [1, 2] reads as a float range (tune/tune.h); an integer key refuses it */
    bool whole = dim->kind == CX_TUNE_FLOAT && dim->lo == floor(dim->lo) &&
                 dim->hi == floor(dim->hi);
    if (s != CX_OK)
      return cx_toml_fail(dim->node, s, "with %s = %s the pipeline is refused: %s%s", dim->key,
                          sets[n - 1].value, msg,
                          whole ? " (a list of two numbers is a float range: {int = [lo, hi]} "
                                  "searches integers, {choice = [...]} a list)"
                                : "");
    cx_pipeline_free(&p);
  }
  return CX_OK;
}

/* With max_drop: the reference, a stage of the file before the final one, with validation. */
static cx_status check_reference(cx_tune_run *t, const cx_pipeline *p, int last) {
  const cx_tune_config *c = &t->cfg;
  if (isnan(c->max_drop)) return CX_OK;
  int id = cx_pipeline_stage_find(c->reference);
  const cx_toml *at = c->reference_node ? c->reference_node : cx_toml_get(cx_toml_get(t->doc,
                                                                          "tune"), "max_drop");
  if (id < 0 || !p->stages[id].present || id >= last)
    return cx_toml_fail(at, CX_ERR_FORMAT, "max_drop counts from the top-1 of reference = "
                        "\"%s\", which must be a stage of this file before its final one (%s): "
                        "\"teacher\" or \"distill\" (the default)", cx_printable(c->reference),
                        p->stages[last].name);
  snprintf(t->reference, sizeof t->reference, "%s", c->reference);
  return CX_OK;
}

/* "<stage>.<metric>", default the last stage's top-1; the stage must be in the file and have
 * validation data. A cost or "pareto" is about the last stage's model and its top-1. */
static cx_status check_objective(cx_tune_run *t, const cx_pipeline *p) {
  static const char *const metrics[] = {"top1", "top5", "loss"};
  const char *o = t->cfg.objective;
  int last = -1;
  for (int i = 0; i < CX_STAGE_COUNT; i++)
    if (p->stages[i].present) last = i;
  t->final_model = cx_stage_defs[last].model;
  if (t->cfg.goal != CX_TUNE_GOAL_METRIC || !o)
    snprintf(t->objective, sizeof t->objective, "%s.top1", p->stages[last].name);
  else snprintf(t->objective, sizeof t->objective, "%s", o);
  const char *dot = strchr(t->objective, '.');
  snprintf(t->stage, sizeof t->stage, "%.*s", dot ? (int)(dot - t->objective) : 0, t->objective);
  t->metric = -1;
  for (int m = 0; dot && m < 3; m++)
    if (!strcmp(dot + 1, metrics[m])) t->metric = m;
  int id = cx_pipeline_stage_find(t->stage);
  if (t->metric < 0 || id < 0 || !p->stages[id].present)
    return cx_toml_fail(t->cfg.objective_node, CX_ERR_FORMAT, "the objective is \"<stage>.top1\", "
                        ".top5 or .loss of a stage of this file (teacher, scratch, distill, "
                        "prune, quantize), found \"%s\"", cx_printable(t->objective));
  if (!p->stages[id].tc.val_path)
    return cx_fail(CX_ERR_FORMAT, "%s: the objective %s is measured on the validation data: add "
                   "[data] val", t->file, t->objective);
  if (t->cfg.goal != CX_TUNE_GOAL_METRIC) /* what trials.jsonl and the messages call it */
    snprintf(t->objective, sizeof t->objective, "%s", o);
  return check_reference(t, p, last);
}

cx_status cx_tune_check(cx_tune_run *t) {
  CX_TRY(absolute_paths(t));
  char tmp[] = "/tmp/compress-tune-XXXXXX", file[sizeof tmp + 16], msg[2048];
  if (!mkdtemp(tmp)) return cx_fail(CX_ERR_IO, "cannot make a temporary folder: %s",
                                    strerror(errno));
  snprintf(file, sizeof file, "%s/probe.toml", tmp);
  cx_tune_set sets[8];
  int n = trial_sets(t, NULL, -1, t->root, sets, NULL);
  cx_pipeline p;
  cx_status s = probe(t, file, sets, n, &p, msg, sizeof msg);
  if (s != CX_OK) s = cx_fail(s, "%s: the pipeline (without [tune]): %s", t->file, msg);
  else {
    s = check_objective(t, &p);
    cx_pipeline_free(&p);
  }
  for (int d = 0; s == CX_OK && d < t->cfg.space.n; d++) s = check_dim(t, file, d);
  rmdir(tmp);
  return s;
}

/* ---- stages taken from earlier trials ---- */

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* dst becomes a link to what src is (the file itself, through any links). */
static cx_status link_to(const char *src, const char *dst) {
  char *real = realpath(src, NULL);
  if (!real) return cx_fail(CX_ERR_IO, "%s: %s", src, strerror(errno));
  remove(dst);
  int rc = symlink(real, dst);
  cx_status s = rc ? cx_fail(CX_ERR_IO, "cannot link %s to %s: %s", dst, real, strerror(errno))
                   : CX_OK;
  free(real);
  return s;
}

/* Takes stage s from the trial folder src into dir: its output linked, its manifest (the hash
 * the stage has in this trial too, and its results) written, the teacher's cache linked. */
static cx_status take_stage(const cx_pipeline_stage *s, const char *src, const char *dir,
                            const cx_stage_result *r) {
  char a[PATH_MAX_], b[PATH_MAX_];
  CX_TRY(link_to(join(a, src, s->output), join(b, dir, s->output)));
  CX_TRY(cx_pipeline_manifest_write(dir, s->name, "done", s->hash, r));
  join(a, src, "teacher_cache"), join(b, dir, "teacher_cache");
  if (!strcmp(s->name, "teacher") && exists(a) && !exists(b)) CX_TRY(link_to(a, b));
  return CX_OK;
}

static cx_status share_stages(const cx_tune_run *t, const cx_pipeline *p,
                              const cx_tune_trial *those, int n, const char *dir, char *shared,
                              size_t size) {
  for (int i = 0; i < CX_STAGE_COUNT; i++) {
    const cx_pipeline_stage *s = &p->stages[i];
    char out[PATH_MAX_], src[PATH_MAX_];
    join(out, dir, s->output);
    if (!s->present || !s->trains ||
        (exists(out) && cx_pipeline_manifest_read(dir, s->name, "done", s->hash, NULL)))
      continue; /* a stage that only exports is cheap; a complete one is there */
    for (int j = 0; j < n; j++) {
      cx_stage_result r;
      cx_tune_trial_dir(t, those[j].number, src, sizeof src);
      if (!exists(join(out, src, s->output)) || !cx_pipeline_manifest_read(src, s->name, "done", s->hash, &r))
        continue;
      CX_TRY(take_stage(s, src, dir, &r));
      size_t at = strlen(shared);
      snprintf(shared + at, size - at, "%s%s", at ? " " : "", s->name);
      break;
    }
  }
  return CX_OK;
}

cx_status cx_tune_share(const cx_tune_run *t, const cx_tune_trial *those, int n, const char *dir,
                        char *shared, size_t size) {
  char path[PATH_MAX_];
  snprintf(path, sizeof path, "%s/stages", dir);
  CX_TRY(cx_cli_make_dirs(path));
  snprintf(path, sizeof path, "%s/pipeline.toml", dir);
  cx_pipeline p;
  CX_TRY(cx_pipeline_load(path, &p));
  cx_status s = share_stages(t, &p, those, n, dir, shared, size);
  cx_pipeline_free(&p);
  return s;
}

/* ---- the run ---- */

static volatile sig_atomic_t child_pid, stop_signal;

/* While a trial runs, a signal to the tune goes to the trial (which checkpoints and stops) and
 * the tune stops after it. */
static void on_signal(int sig) {
  stop_signal = sig;
  if (child_pid > 0) kill((pid_t)child_pid, sig);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- early stopping: the trial's metrics.jsonl read while it runs ---- */

typedef struct watch {
  const cx_tune_run *t;
  const cx_tune_trial *those; /* the trials before this one */
  int n;
  cx_tune_trial *tr;
  int epochs;         /* of the objective stage; 0: no early stopping */
  char metrics[PATH_MAX_];
  bool pruned;
} watch;

static double score_of(const cx_tune_run *t, double v) {
  return t->metric == CX_TUNE_METRIC_LOSS ? -v : v;
}

/* The objective's value after each epoch of the objective stage, from its validation lines
 * (the last line of an epoch wins, as after a resumed run); NAN where there is none yet. */
static void read_epochs(const watch *w, double *val, int max) {
  static const char *const keys[] = {"\"val_top1\":", "\"val_top5\":", "\"val_loss\":"};
  char stage[64], line[4096];
  snprintf(stage, sizeof stage, "\"stage\":\"%s\"", w->t->stage);
  for (int e = 0; e < max; e++) val[e] = NAN;
  FILE *f = fopen(w->metrics, "r");
  while (f && fgets(line, sizeof line, f)) {
    const char *v = strstr(line, keys[w->t->metric]), *e = strstr(line, "\"epoch\":");
    if (!v || !e || !strstr(line, stage) || !strchr(line, '\n')) continue; /* whole lines only */
    long epoch = strtol(e + 8, NULL, 10);
    if (epoch >= 0 && epoch < max) val[epoch] = strtod(v + strlen(keys[w->t->metric]), NULL);
  }
  if (f) fclose(f);
}

/* The rungs the trial has reached since the last look: each recorded, and whether it goes on
 * (false: stop it). */
static bool promoted(watch *w) {
  enum { MAX_EPOCHS = 4096 };
  double val[MAX_EPOCHS];
  int max = w->epochs < MAX_EPOCHS ? w->epochs : MAX_EPOCHS;
  read_epochs(w, val, max);
  cx_tune_trial *tr = w->tr;
  while (tr->n_rungs < CX_TUNE_MAX_RUNGS) {
    int e = cx_tune_rung_epochs(&w->t->cfg, tr->n_rungs);
    if (e >= w->epochs || e > max || isnan(val[e - 1])) return true; /* the last is no rung */
    double *others = malloc(sizeof *others * (size_t)(w->n + 1));
    int k = 0;
    for (int j = 0; others && j < w->n; j++)
      if (w->those[j].n_rungs > tr->n_rungs)
        others[k++] = score_of(w->t, w->those[j].rung[tr->n_rungs]);
    bool go = !others || cx_tune_asha_promote(others, k, score_of(w->t, val[e - 1]),
                                              w->t->cfg.reduction);
    free(others);
    tr->rung[tr->n_rungs++] = val[e - 1];
    if (!go) return false;
  }
  return true;
}

/* ---- the run ---- */

/* The exit status of `compress pipeline FILE` with its output in log; with early stopping the
 * trial is stopped (SIGTERM: it checkpoints and exits) at a rung it is not promoted from. */
static cx_status spawn(const cx_tune_run *t, const char *file, const char *log, watch *w,
                       int *status) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return cx_fail(CX_ERR_IO, "fork: %s", strerror(errno));
  if (pid == 0) {
    FILE *f = freopen(log, "a", stdout);
    if (!f || dup2(fileno(stdout), 2) < 0) _exit(127);
    signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL);
    execl(t->exe, "compress", "pipeline", file, (char *)NULL);
    fprintf(stderr, "compress tune: cannot run %s: %s\n", t->exe, strerror(errno));
    _exit(127);
  }
  child_pid = pid;
  for (;;) {
    pid_t r = waitpid(pid, status, w->epochs && !w->pruned ? WNOHANG : 0);
    if (r == pid) break;
    if (r < 0 && errno != EINTR)
      return child_pid = 0, cx_fail(CX_ERR_IO, "waitpid: %s", strerror(errno));
    if (r == 0 && !promoted(w)) {
      w->pruned = true;
      kill(pid, SIGTERM);
    } else if (r == 0) nanosleep(&(struct timespec){.tv_nsec = 200000000}, NULL);
  }
  child_pid = 0;
  if (w->epochs && !w->pruned) promoted(w); /* the rungs of its last epochs, for later trials */
  return CX_OK;
}

/* A stage's validation results from the trial's manifest (false: none). */
static bool stage_val(const cx_pipeline *p, const char *dir, const char *stage,
                      cx_stage_result *r) {
  const cx_pipeline_stage *s = &p->stages[cx_pipeline_stage_find(stage)];
  return cx_pipeline_manifest_read(dir, s->name, "done", s->hash, r) && r->val.n > 0;
}

/* The objective stage's validation results from the trial's manifest, the reference's top-1,
 * and the final model's costs from the trial's report.json (which a cost objective needs). */
static cx_status read_results(const cx_tune_run *t, const char *dir, cx_tune_trial *tr) {
  char path[PATH_MAX_];
  snprintf(path, sizeof path, "%s/pipeline.toml", dir);
  cx_pipeline p;
  CX_TRY(cx_pipeline_load(path, &p));
  cx_stage_result r, ref;
  bool ok = stage_val(&p, dir, t->stage, &r);
  bool ref_ok = !*t->reference || stage_val(&p, dir, t->reference, &ref);
  cx_pipeline_free(&p);
  if (!ok || !ref_ok)
    return cx_fail(CX_ERR_FORMAT, "%s: the %s stage left no validation results", dir,
                   ok ? t->reference : t->stage);
  tr->top1 = r.val.top1, tr->top5 = r.val.top5, tr->loss = r.val.loss;
  tr->ref_top1 = *t->reference ? ref.val.top1 : NAN;
  tr->value = t->metric == CX_TUNE_METRIC_TOP1   ? r.val.top1
              : t->metric == CX_TUNE_METRIC_TOP5 ? r.val.top5
                                                 : r.val.loss;
  cx_status s = cx_tune_report_costs(dir, t->final_model, tr->cost);
  if (t->cfg.goal == CX_TUNE_GOAL_METRIC) return cx_error_clear(), CX_OK; /* costs: if any */
  CX_TRY(s);
  double c = tr->cost[t->cfg.cost];
  if (!isfinite(c))
    return cx_fail(CX_ERR_FORMAT, "%s/report.json: %s has no %s (the objective's %s): its "
                   "report could not measure it", dir, t->final_model,
                   cx_tune_cost_field(t->cfg.cost), cx_tune_cost_name(t->cfg.cost));
  if (t->cfg.goal == CX_TUNE_GOAL_MIN) tr->value = c;
  return CX_OK;
}

/* The objective stage's epochs, when the tune stops trials early (else 0). */
static cx_status stage_epochs(const cx_tune_run *t, const char *file, int *epochs) {
  *epochs = 0;
  if (!t->cfg.asha) return CX_OK;
  cx_pipeline p;
  CX_TRY(cx_pipeline_load(file, &p));
  const cx_pipeline_stage *s = &p.stages[cx_pipeline_stage_find(t->stage)];
  *epochs = s->trains ? (int)s->tc.opts.epochs : 0;
  cx_pipeline_free(&p);
  return CX_OK;
}

cx_status cx_tune_trial_exec(const cx_tune_run *t, const cx_tune_trial *those, int n,
                             const char *dir, cx_tune_trial *tr, bool *interrupted) {
  char file[PATH_MAX_], log[PATH_MAX_];
  join(file, dir, "pipeline.toml");
  join(log, dir, "log.txt");
  watch w = {.t = t, .those = those, .n = n, .tr = tr};
  join(w.metrics, dir, "metrics.jsonl");
  /* A continued trial's rungs are decided again from its metrics.jsonl, against the same trials
   * before it: the record may hold a rung it was stopped at, or one the killed tune never
   * judged. */
  tr->n_rungs = 0;
  CX_TRY(stage_epochs(t, file, &w.epochs));
  struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  double t0 = now();
  int status = 0;
  cx_status s = spawn(t, file, log, &w, &status);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  tr->seconds += now() - t0;
  CX_TRY(s);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  *interrupted = stop_signal || (code == 130 && !w.pruned);
  tr->status = CX_TUNE_RUNNING;
  tr->value = tr->top1 = tr->top5 = tr->loss = tr->ref_top1 = NAN;
  for (int c = 0; c < CX_TUNE_COSTS; c++) tr->cost[c] = NAN;
  if (*interrupted) return CX_OK;
  if (w.pruned) {
    tr->status = CX_TUNE_PRUNED;
    tr->value = tr->rung[tr->n_rungs - 1];
    return CX_OK;
  }
  tr->status = CX_TUNE_FAILED;
  if (code) return CX_OK;
  if (read_results(t, dir, tr) != CX_OK) { /* failed: the log says why */
    FILE *f = fopen(log, "a");
    if (f) fprintf(f, "compress tune: %s\n", cx_last_error()), fclose(f);
    return CX_OK;
  }
  tr->status = CX_TUNE_COMPLETE;
  return CX_OK;
}
