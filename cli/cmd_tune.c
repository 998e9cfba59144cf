/* compress tune FILE.toml: a hyperparameter search over the keys of a pipeline (docs/tune.md).
 * Each trial is the pipeline with the sampled keys, run in its own folder (cli/tune_trial.c);
 * the stages it does not change are taken from an earlier trial, so the teacher trains once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/file_replace.h"
#include "../train/train_config.h"
#include "commands.h"
#include "onnx_common.h"
#include "tune_trial.h"

enum { PATH_MAX_ = CX_CLI_PATH_MAX, MAX_TRIALS = 100000 };

typedef struct tuner {
  cx_tune_run run;
  const char *out; /* --out */
  cx_tune_trial *trials; /* trials[i] is number i + 1 */
  int n;
} tuner;

/* ---- the output folder ---- */

/* The output folder, absolute (a trial's pipeline file names it from elsewhere): --out, else
 * [run] out_dir resolved against the tune file's folder, as the pipeline resolves it. Made
 * later, once the checks have passed. */
static cx_status find_root(tuner *tu) {
  cx_tune_run *t = &tu->run;
  const char *out = tu->out;
  char path[PATH_MAX_], cwd[PATH_MAX_];
  if (!out) {
    const cx_toml *o = cx_toml_get(tu->run.doc, "run.out_dir");
    if (!o) return cx_fail(CX_ERR_ARG, "%s: no output folder: set [run] out_dir or pass --out DIR",
                           t->file);
    CX_TRY(cx_toml_as_string(o, &out));
    const char *slash = strrchr(t->file, '/');
    if (out[0] != '/' && slash)
      snprintf(path, sizeof path, "%.*s/%s", (int)(slash - t->file), t->file, out), out = path;
  }
  if (out[0] != '/' && !getcwd(cwd, sizeof cwd))
    return cx_fail(CX_ERR_IO, "cannot read the current folder");
  if (snprintf(t->root, sizeof t->root, "%s%s%s", out[0] == '/' ? "" : cwd,
               out[0] == '/' ? "" : "/", out) >= (int)sizeof t->root - 64)
    return cx_fail(CX_ERR_ARG, "%s: the output folder's path is too long", out);
  return CX_OK;
}

/* What the trials depend on: every table but [tune], and the space. root/tune.state holds it;
 * trials of another pipeline or space are not continued. */
static cx_status check_state(const tuner *tu, bool fresh) {
  const cx_tune_run *t = &tu->run;
  const cx_toml *nodes[64 + CX_TUNE_MAX_DIMS];
  const char *names[64 + CX_TUNE_MAX_DIMS];
  int n = 0;
  for (size_t i = 0; i < cx_toml_len(t->doc) && n < 64; i++) {
    const cx_toml *k = cx_toml_at(t->doc, i);
    if (strcmp(cx_toml_key(k), "tune")) nodes[n] = k, names[n++] = cx_toml_key(k);
  }
  for (int d = 0; d < t->cfg.space.n; d++)
    nodes[n] = t->cfg.space.dims[d].node, names[n++] = t->cfg.space.dims[d].key;
  char hash[CX_TRAIN_HASH_MAX + 1], path[PATH_MAX_ + 32], line[128] = "", goal[256];
  /* the objective and its constraint decide what the sampler learnt from */
  snprintf(goal, sizeof goal, "%s|%s|max_drop=%.17g|reference=%s", t->objective,
           t->cfg.goal == CX_TUNE_GOAL_PARETO ? cx_tune_cost_name(t->cfg.cost) : "",
           t->cfg.max_drop, t->reference);
  cx_train_config_hash(n, nodes, names, t->cfg.goal == CX_TUNE_GOAL_METRIC &&
                       isnan(t->cfg.max_drop) ? t->objective : goal, hash);
  snprintf(path, sizeof path, "%s/tune.state", t->root);
  FILE *f = fopen(path, "r");
  if (f) {
    if (!fgets(line, sizeof line, f)) line[0] = 0;
    fclose(f);
    line[strcspn(line, "\n")] = 0;
    if (strcmp(line, hash))
      return cx_fail(CX_ERR_ARG, "%s holds the trials of another pipeline, search space or "
                     "objective (%s changed since they ran): pass another --out, or remove %s",
                     t->root, t->file, t->root);
    return CX_OK;
  }
  if (!fresh)
    return cx_fail(CX_ERR_ARG, "%s has trials but no tune.state: remove it or pass another "
                   "--out", t->root);
  char text[CX_TRAIN_HASH_MAX + 2];
  snprintf(text, sizeof text, "%s\n", hash);
  return cx_file_replace(path, text, strlen(text));
}

/* A complete trial within max_drop (no max_drop: every complete one). */
static void set_feasible(const cx_tune_run *t, cx_tune_trial *tr) {
  tr->feasible = tr->status == CX_TUNE_COMPLETE &&
                 cx_tune_feasible(tr->top1, tr->ref_top1, t->cfg.max_drop);
}

/* The trials recorded in root/trials: 0001, 0002, ... as far as they go. */
static cx_status load_trials(tuner *tu) {
  tu->trials = calloc((size_t)tu->run.cfg.trials + 1, sizeof *tu->trials);
  if (!tu->trials) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (tu->n = 0; tu->n < tu->run.cfg.trials; tu->n++) {
    char dir[PATH_MAX_], rec[PATH_MAX_ + 16];
    cx_tune_trial_dir(&tu->run, tu->n + 1, dir, sizeof dir);
    snprintf(rec, sizeof rec, "%s/trial.toml", dir);
    if (access(rec, F_OK)) break;
    CX_TRY(cx_tune_trial_read(dir, &tu->run.cfg.space, &tu->trials[tu->n]));
    set_feasible(&tu->run, &tu->trials[tu->n]);
  }
  return CX_OK;
}

/* ---- results ---- */

/* The trials as selection sees them: the final model's top-1 and the objective's cost (the
 * front's, for "pareto"); trials not complete have neither. */
static cx_tune_point *points(const tuner *tu, int n) {
  cx_tune_point *p = malloc(sizeof *p * (size_t)(n + 1));
  for (int i = 0; p && i < n; i++) {
    const cx_tune_trial *t = &tu->trials[i];
    bool done = t->status == CX_TUNE_COMPLETE;
    p[i] = (cx_tune_point){done ? t->top1 : NAN, done ? t->cost[tu->run.cfg.cost] : NAN,
                           t->feasible};
  }
  return p;
}

/* What the sampler maximises for a METRIC or MIN objective: the metric, a loss or a cost
 * negated. */
static double score(const tuner *tu, const cx_tune_trial *t) {
  bool lower = tu->run.cfg.goal == CX_TUNE_GOAL_MIN || tu->run.metric == CX_TUNE_METRIC_LOSS;
  return lower ? -t->value : t->value;
}

/* The best trial: the objective's best complete one (METRIC), the smallest feasible cost
 * (MIN), the front member cx_tune_best_pareto names (PARETO); -1: none. */
static int best_trial(const tuner *tu) {
  const cx_tune_config *c = &tu->run.cfg;
  if (c->goal == CX_TUNE_GOAL_METRIC) {
    int best = -1;
    for (int i = 0; i < tu->n; i++)
      if (tu->trials[i].status == CX_TUNE_COMPLETE &&
          (best < 0 || score(tu, &tu->trials[i]) > score(tu, &tu->trials[best])))
        best = i;
    return best;
  }
  cx_tune_point *p = points(tu, tu->n);
  int *rank = malloc(sizeof *rank * (size_t)(tu->n + 1)), best = -1;
  if (p && rank && c->goal == CX_TUNE_GOAL_MIN) best = cx_tune_best_min(p, tu->n);
  else if (p && rank) {
    cx_tune_pareto_ranks(p, tu->n, rank);
    best = cx_tune_best_pareto(p, tu->n, rank, !isnan(c->max_drop));
  }
  free(p), free(rank);
  return best;
}

/* trials.jsonl (every trial) and best.toml (the best one's pipeline), rewritten whole. */
static cx_status write_results(const tuner *tu) {
  const cx_tune_run *t = &tu->run;
  char path[PATH_MAX_ + 32], dir[PATH_MAX_], comment[PATH_MAX_ + 256];
  snprintf(path, sizeof path, "%s/trials.jsonl", t->root);
  cx_file_out o;
  CX_TRY(cx_file_out_open(path, &o));
  for (int i = 0; i < tu->n; i++)
    cx_tune_trial_json(o.f, &t->cfg.space, &tu->trials[i], t->objective);
  CX_TRY(cx_file_out_commit(&o));
  int b = best_trial(tu);
  CX_TRY(cx_tune_report_write(t, tu->trials, tu->n, b));
  if (b < 0) return CX_OK;
  cx_tune_trial_dir(t, tu->trials[b].number, dir, sizeof dir);
  snprintf(path, sizeof path, "%s/best.toml", t->root);
  snprintf(comment, sizeof comment, "compress tune %s: trial %d, %s %.4g (best of %d). Its "
           "outputs are in out_dir; set another out_dir to train it afresh.", t->file,
           tu->trials[b].number, t->objective, tu->trials[b].value, tu->n);
  return cx_tune_write_pipeline(t, tu->trials[b].x, dir, path, comment);
}

static void print_params(const cx_tune_space *sp, const double *x) {
  for (int d = 0; d < sp->n; d++) {
    printf("%s%s=", d ? " " : "", sp->dims[d].key);
    cx_tune_dim_write(stdout, &sp->dims[d], x[d]);
  }
}

/* ---- the loop ---- */

static double spent(const tuner *tu) {
  double s = 0;
  for (int i = 0; i < tu->n; i++) s += tu->trials[i].seconds;
  return s;
}

/* The mean time of a complete trial, or 0 when none is. */
static double trial_seconds(const tuner *tu) {
  double s = 0;
  int k = 0;
  for (int i = 0; i < tu->n; i++)
    if (tu->trials[i].status == CX_TUNE_COMPLETE) s += tu->trials[i].seconds, k++;
  return k ? s / k : 0;
}

/* A new trial's point: the sampler's, from the complete and pruned trials before it. With
 * max_drop the infeasible ones are bad; for "pareto" the score is by non-domination rank among
 * the complete trials before it (cx_tune_pareto_score). */
static cx_status sample(const tuner *tu, int index, double *x) {
  cx_tune_obs *obs = malloc(sizeof *obs * (size_t)(index + 1));
  cx_tune_point *p = points(tu, index);
  int *rank = malloc(sizeof *rank * (size_t)(index + 1));
  if (!obs || !p || !rank)
    return free(obs), free(p), free(rank), cx_fail(CX_ERR_NOMEM, "out of memory");
  bool pareto = tu->run.cfg.goal == CX_TUNE_GOAL_PARETO;
  if (pareto) cx_tune_pareto_ranks(p, index, rank);
  int n = 0;
  for (int i = 0; i < index; i++) {
    const cx_tune_trial *t = &tu->trials[i];
    bool pruned = t->status == CX_TUNE_PRUNED;
    if ((t->status == CX_TUNE_COMPLETE || pruned) && isfinite(t->value))
      obs[n++] = (cx_tune_obs){.x = t->x, .pruned = pruned,
                               .value = pareto ? cx_tune_pareto_score(t->top1, rank[i])
                                               : score(tu, t),
                               .infeasible = !pruned && !t->feasible};
  }
  cx_status s = cx_tune_sample(&tu->run.cfg.space, &tu->run.cfg.sampler, obs, n, index, x);
  free(obs), free(p), free(rank);
  return s;
}

/* What a complete trial's line says: the objective's value, and with a cost its top-1 and
 * whether it keeps max_drop. */
static void print_result(const tuner *tu, const cx_tune_trial *tr) {
  const cx_tune_run *t = &tu->run;
  if (t->cfg.goal == CX_TUNE_GOAL_METRIC && isnan(t->cfg.max_drop)) {
    printf("trial %d: %s %.4g (top-1 %.2f%%) in %.1f s\n", tr->number, t->objective, tr->value,
           tr->top1, tr->seconds);
    return;
  }
  const char *cost = cx_tune_cost_name(t->cfg.cost);
  printf("trial %d: %s %.4g, top-1 %.2f%%", tr->number, cost, tr->cost[t->cfg.cost], tr->top1);
  if (!isnan(t->cfg.max_drop))
    printf(" (%s %.2f%%, max_drop %g: %s)", t->reference, tr->ref_top1, t->cfg.max_drop,
           tr->feasible ? "feasible" : "infeasible");
  printf(" in %.1f s\n", tr->seconds);
}

/* Runs trial index (new, or "running" from an interrupted tune); *stop: interrupted. */
static cx_status run_trial(tuner *tu, int index, bool *stop) {
  cx_tune_run *t = &tu->run;
  cx_tune_trial *tr = &tu->trials[index];
  char dir[PATH_MAX_], path[PATH_MAX_ + 16], comment[PATH_MAX_];
  cx_tune_trial_dir(t, index + 1, dir, sizeof dir);
  if (index == tu->n) { /* new */
    *tr = (cx_tune_trial){.number = index + 1, .status = CX_TUNE_RUNNING, .value = NAN,
                          .top1 = NAN, .top5 = NAN, .loss = NAN, .ref_top1 = NAN};
    for (int c = 0; c < CX_TUNE_COSTS; c++) tr->cost[c] = NAN;
    CX_TRY(sample(tu, index, tr->x));
    CX_TRY(cx_cli_make_dirs(dir));
    snprintf(path, sizeof path, "%s/pipeline.toml", dir);
    snprintf(comment, sizeof comment, "compress tune %s: trial %d", t->file, tr->number);
    CX_TRY(cx_tune_write_pipeline(t, tr->x, dir, path, comment));
    CX_TRY(cx_tune_trial_write(dir, &t->cfg.space, tr));
    tu->n++;
  }
  CX_TRY(cx_tune_share(t, tu->trials, index, dir, tr->shared, sizeof tr->shared));
  printf("trial %d/%d: ", tr->number, t->cfg.trials);
  print_params(&t->cfg.space, tr->x);
  printf("%s%s%s\n", *tr->shared ? " (from an earlier trial: " : "", tr->shared,
         *tr->shared ? ")" : "");
  CX_TRY(cx_tune_trial_exec(t, tu->trials, index, dir, tr, stop));
  set_feasible(t, tr);
  CX_TRY(cx_tune_trial_write(dir, &t->cfg.space, tr));
  if (tr->status == CX_TUNE_COMPLETE) print_result(tu, tr);
  else if (tr->status == CX_TUNE_FAILED)
    printf("trial %d: failed; its output is in %s/log.txt\n", tr->number, dir);
  else if (tr->status == CX_TUNE_PRUNED)
    printf("trial %d: stopped early after %d epochs at %s %.4g (below the trials before it) in "
           "%.1f s\n", tr->number, cx_tune_rung_epochs(&t->cfg, tr->n_rungs - 1), t->objective,
           tr->value, tr->seconds);
  return write_results(tu);
}

/* Whether the budget leaves room for another trial (one as long as the mean so far). */
static bool budget_left(const tuner *tu) {
  double b = tu->run.cfg.budget_s;
  return !b || spent(tu) + trial_seconds(tu) <= b;
}

static cx_status tune_all(tuner *tu, bool *stop) {
  for (int i = 0; i < tu->n && !*stop; i++)
    if (tu->trials[i].status == CX_TUNE_RUNNING) {
      printf("trial %d: continuing it (the last tune stopped during it)\n", i + 1);
      CX_TRY(run_trial(tu, i, stop));
    }
  while (!*stop && tu->n < tu->run.cfg.trials) {
    if (!budget_left(tu)) {
      printf("budget: %.0f s of %.0f s spent, and a trial takes about %.0f s: stopping after %d "
             "trials\n", spent(tu), tu->run.cfg.budget_s, trial_seconds(tu), tu->n);
      break;
    }
    CX_TRY(run_trial(tu, tu->n, stop));
    const cx_tune_trial *first = &tu->trials[0];
    if (tu->n == 1 && tu->run.cfg.budget_s && first->seconds > tu->run.cfg.budget_s)
      return cx_toml_fail(tu->run.cfg.budget_node, CX_ERR_ARG, "the budget is smaller than one "
                          "trial (trial 1 took %.0f s): raise it", first->seconds);
  }
  return CX_OK;
}

/* Everything checked before a trial runs: the file, the space against the pipeline, the
 * folder's trials, and a budget a trial of them already outlasts. */
static cx_status prepare(tuner *tu) {
  cx_tune_run *t = &tu->run;
  CX_TRY(cx_toml_parse_file(t->file, &t->doc));
  CX_TRY(cx_tune_config_read(cx_toml_get(t->doc, "tune"), t->file, &t->cfg));
  ssize_t len = readlink("/proc/self/exe", t->exe, sizeof t->exe - 1);
  if (len <= 0) return cx_fail(CX_ERR_IO, "cannot find this program (/proc/self/exe)");
  t->exe[len] = 0;
  CX_TRY(find_root(tu));
  CX_TRY(cx_tune_check(t));
  CX_TRY(cx_cli_make_dirs(t->root));
  CX_TRY(load_trials(tu));
  CX_TRY(check_state(tu, tu->n == 0));
  double one = trial_seconds(tu);
  if (t->cfg.budget_s && one > t->cfg.budget_s)
    return cx_toml_fail(t->cfg.budget_node, CX_ERR_ARG, "the budget (%.0f s) is smaller than one "
                        "trial (%.0f s on average so far): raise it", t->cfg.budget_s, one);
  return CX_OK;
}

static void summary(const tuner *tu) {
  int b = best_trial(tu), done = 0, pruned = 0, feasible = 0;
  for (int i = 0; i < tu->n; i++) done += tu->trials[i].status == CX_TUNE_COMPLETE;
  for (int i = 0; i < tu->n; i++) pruned += tu->trials[i].status == CX_TUNE_PRUNED;
  for (int i = 0; i < tu->n; i++) feasible += tu->trials[i].feasible;
  printf("%d trials (%d complete, %d stopped early) in %.1f s\n", tu->n, done, pruned,
         spent(tu));
  if (!isnan(tu->run.cfg.max_drop))
    printf("%d of the complete trials within max_drop = %g of %s's top-1\n", feasible,
           tu->run.cfg.max_drop, tu->run.reference);
  if (b < 0) return;
  const cx_tune_trial *best = &tu->trials[b];
  if (tu->run.cfg.goal == CX_TUNE_GOAL_METRIC)
    printf("best: trial %d, %s %.4g: ", b + 1, tu->run.objective, best->value);
  else
    printf("best: trial %d, %s %.4g, top-1 %.2f%%: ", b + 1,
           cx_tune_cost_name(tu->run.cfg.cost), best->cost[tu->run.cfg.cost], best->top1);
  print_params(&tu->run.cfg.space, tu->trials[b].x);
  printf("\nresults in %s/trials.jsonl and report.html, the best pipeline in %s/best.toml\n",
         tu->run.root, tu->run.root);
}

/* Why a tune that ran has no best trial. */
static cx_status no_best(const tuner *tu) {
  const cx_tune_trial *closest = NULL;
  for (int i = 0; i < tu->n; i++) {
    const cx_tune_trial *t = &tu->trials[i];
    if (t->status == CX_TUNE_COMPLETE &&
        (!closest || t->top1 - t->ref_top1 > closest->top1 - closest->ref_top1))
      closest = t;
  }
  if (!closest)
    return cx_fail(CX_ERR_ARG, "no trial completed: trials/%04d/log.txt says why the last one "
                   "failed", tu->n);
  return cx_fail(CX_ERR_ARG, "no complete trial is within max_drop = %g of %s's top-1 (the "
                 "closest, trial %d, is %.2f points below): raise max_drop or search smaller "
                 "compressions; no best.toml", tu->run.cfg.max_drop, tu->run.reference,
                 closest->number, closest->ref_top1 - closest->top1);
}

static int parse(int argc, char **argv, tuner *tu) {
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--out")) {
      if (i + 1 >= argc) return cx_cli_usage_error(&cx_cmd_tune, "option '%s' needs a value", "--out");
      tu->out = argv[++i];
    } else if (argv[i][0] == '-')
      return cx_cli_usage_error(&cx_cmd_tune, "unknown option '%s'", argv[i]);
    else if (!tu->run.file) tu->run.file = argv[i];
    else return cx_cli_usage_error(&cx_cmd_tune, "unexpected argument '%s'", argv[i]);
  }
  if (!tu->run.file) return cx_cli_usage_error(&cx_cmd_tune, "%s", "no tune file given");
  return 0;
}

static int run(int argc, char **argv) {
  tuner *tu = calloc(1, sizeof *tu);
  if (!tu) return fprintf(stderr, "compress tune: out of memory\n"), 1;
  int rc = parse(argc, argv, tu);
  bool stop = false;
  if (!rc) {
    cx_status s = prepare(tu);
    if (s == CX_OK) s = tune_all(tu, &stop);
    if (tu->n) summary(tu);
    if (s == CX_OK && !stop && tu->n && best_trial(tu) < 0) s = no_best(tu);
    rc = s != CX_OK ? cx_cli_fail(&cx_cmd_tune) : 0;
    if (!rc && stop) {
      fprintf(stderr, "compress tune: interrupted; run the same command again to continue\n");
      rc = 130;
    }
  }
  cx_toml_free(tu->run.doc);
  free(tu->trials);
  free(tu);
  return rc;
}

const cx_command cx_cmd_tune = {
    .name = "tune",
    .summary = "Search a pipeline's keys (distill lr, temperature, ...) with TPE or at random",
    .usage =
        "usage: compress tune FILE.toml [--out DIR]\n\n"
        "Runs the pipeline of FILE.toml (docs/pipeline.md) as trials, each with the keys of its\n"
        "[tune] table sampled (docs/tune.md):\n"
        "    [tune]\n"
        "    trials = 16                     # how many\n"
        "    budget = \"30m\"                  # wall time for all of them (optional)\n"
        "    sampler = \"tpe\"                 # or \"random\"\n"
        "    seed = 1\n"
        "    early_stop = \"asha\"             # stop lagging trials by successive halving\n"
        "    objective = \"distill.top1\"      # <stage>.top1, .top5 or .loss (default:\n"
        "                                    # \"top1\", the last stage's top-1); or a cost\n"
        "                                    # of the final model to minimise: \"macs\",\n"
        "                                    # \"latency\", \"size\" (docs/tune.md); or\n"
        "                                    # \"pareto\": top-1 against front = \"latency\"\n"
        "    max_drop = 1.0                  # with a cost or pareto: feasible trials lose at\n"
        "    reference = \"distill\"           # most 1 point top-1 against this stage's\n"
        "    \"distill.lr\" = {log = [1e-3, 0.3]}\n"
        "    \"distill.temperature\" = [1.0, 8.0]\n"
        "    \"quantize.epochs\" = {int = [1, 5]}\n"
        "    \"student.spec\" = [\"mobilenet_v2:width=0.5\", \"resnet8\"]   # choices\n"
        "Each trial runs in DIR/trials/NNNN ([run] out_dir, or --out) and takes the stages it\n"
        "does not change from an earlier trial (the teacher trains once). Writes\n"
        "DIR/trials.jsonl (a line per trial), DIR/report.md and report.html (the trials table,\n"
        "top-1 against cost with the Pareto front) and DIR/best.toml (the best trial's pipeline).\n"
        "Run the same command again to continue an interrupted tune or to add trials.\n\n"
        "    --out DIR   the output folder (instead of [run] out_dir)\n",
    .run = run,
};
