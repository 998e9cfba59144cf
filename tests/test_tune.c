/* tune/: the [tune] table and its errors, the TOML writer (a written document parses back to the
 * same values, with the keys set), the trial records, and the samplers: deterministic, in range,
 * and TPE ahead of random search on a synthetic objective (median over seeds). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/toml.h"
#include "../tune/tune.h"
#include "check.h"

static cx_toml *parse(const char *text) {
  cx_toml *doc = NULL;
  cx_status s = cx_toml_parse_string(text, "t.toml", &doc);
  CHECK(s == CX_OK, "parse: %s", cx_last_error());
  return doc;
}

/* The [tune] of text fails with a message holding want. */
static void bad_tune(const char *text, const char *want) {
  cx_tune_config c;
  cx_toml *doc = parse(text);
  cx_status s = cx_tune_config_read(cx_toml_get(doc, "tune"), "t.toml", &c);
  CHECK(s != CX_OK, "'%s' was accepted", text);
  CHECK(s == CX_OK || strstr(cx_last_error(), want), "'%s': message '%s' lacks '%s'", text,
        cx_last_error(), want);
  cx_toml_free(doc);
}

/* The [tune] of text read into c (which borrows from the document returned, or NULL). */
static cx_toml *read_tune(const char *text, cx_tune_config *c) {
  cx_toml *doc = parse(text);
  cx_status s = cx_tune_config_read(cx_toml_get(doc, "tune"), "t.toml", c);
  CHECK(s == CX_OK, "'%s': %s", text, cx_last_error());
  if (s != CX_OK) cx_toml_free(doc), doc = NULL;
  return doc;
}

static void test_config(void) {
  cx_tune_config c;
  cx_toml *doc = parse("[tune]\ntrials = 7\nbudget = \"1h30m\"\nsampler = \"random\"\n"
                       "seed = 5\nobjective = \"distill.top1\"\n"
                       "\"distill.lr\" = {log = [1e-3, 0.3]}\n"
                       "\"distill.temperature\" = [1.0, 8.0]\n"
                       "\"quantize.epochs\" = {int = [1, 5]}\n"
                       "\"student.spec\" = [\"a\", \"b\", \"c\"]\n"
                       "\"distill.alpha\" = {choice = [0.5, 0.9]}\n");
  CHECK(cx_tune_config_read(cx_toml_get(doc, "tune"), "t.toml", &c) == CX_OK, "%s",
        cx_last_error());
  CHECK(c.trials == 7 && c.budget_s == 5400 && c.sampler.kind == CX_TUNE_RANDOM &&
        c.sampler.seed == 5 && c.sampler.n_startup == 10 && !strcmp(c.objective, "distill.top1"),
        "settings: %d %g %d", c.trials, c.budget_s, (int)c.sampler.kind);
  CHECK(c.space.n == 5, "%d dims", c.space.n);
  const cx_tune_dim *d = c.space.dims;
  CHECK(!strcmp(d[0].key, "distill.lr") && d[0].kind == CX_TUNE_LOG && d[0].lo == 1e-3 &&
        d[0].hi == 0.3, "log dim");
  CHECK(d[1].kind == CX_TUNE_FLOAT && d[1].lo == 1 && d[1].hi == 8, "float dim");
  CHECK(d[2].kind == CX_TUNE_INT && d[2].lo == 1 && d[2].hi == 5, "int dim");
  CHECK(d[3].kind == CX_TUNE_CHOICE && d[3].n_choices == 3, "choice dim");
  CHECK(d[4].kind == CX_TUNE_CHOICE && d[4].n_choices == 2, "two-number choice");
  cx_toml_free(doc);
  bad_tune("[tune]\n\"a.b\" = [2.0, 1.0]\n", "t.toml:2:9: 'tune.\"a.b\"': an inverted range");
  bad_tune("[tune]\n\"a.b\" = [1.0, 1.0]\n", "an empty range");
  bad_tune("[tune]\n\"a.b\" = {log = [0, 1]}\n", "a log range needs low > 0");
  bad_tune("[tune]\n\"a.b\" = {int = [1, 2.5]}\n", "integer bounds");
  bad_tune("[tune]\n\"a.b\" = {lg = [1, 2]}\n", "did you mean 'log'?");
  bad_tune("[tune]\n\"a.b\" = [\"x\"]\n", "one choice");
  bad_tune("[tune]\n\"a.b\" = [\"x\", 2]\n", "of one type");
  bad_tune("[tune]\n\"a.b\" = 3\n", "a search range");
  bad_tune("[tune]\ntrails = 3\n\"a.b\" = [1, 2]\n", "did you mean 'trials'?");
  bad_tune("[tune]\ntrials = 3\n", "no keys to search");
  bad_tune("[tune]\nbudget = \"10 minutes\"\n\"a.b\" = [1, 2]\n", "a duration such as");
  bad_tune("[tune]\nbudget = \"0s\"\n\"a.b\" = [1, 2]\n", "a budget above 0");
  bad_tune("[tune]\nsampler = \"grid\"\n\"a.b\" = [1, 2]\n", "\"tpe\" or \"random\"");
  bad_tune("[run]\nseed = 1\n", "no [tune] table");
}

/* The document written with the keys set parses back to the same values. */
static void test_writer(void) {
  cx_toml *doc = parse("top = 1\n[run]\nseed = 3\n[data]\ntrain = \"a \\\"b\\\".h5\"\n"
                       "mean = [0.28600000000000003, 2.0]\n"
                       "[teacher.train]\nlr = 0.1\nsched = [{at = 1, v = 2.5}]\n"
                       "[tune]\n\"distill.lr\" = [0.1, 0.2]\n");
  cx_tune_set sets[3] = {{.table = "teacher.train", .key = "lr"},
                         {.table = "teacher.train", .key = "epochs"},
                         {.table = "export", .key = "opset"}};
  snprintf(sets[0].value, sizeof sets[0].value, "0.012345678901234567");
  snprintf(sets[1].value, sizeof sets[1].value, "4");
  snprintf(sets[2].value, sizeof sets[2].value, "17");
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  CHECK(cx_tune_toml_write(f, doc, sets, 3, "tune") == CX_OK, "%s", cx_last_error());
  fclose(f);
  cx_toml *back = parse(text);
  int64_t i = 0;
  double v = 0;
  const char *s = "";
  cx_toml_int(back, "top", 0, &i);
  CHECK(i == 1, "top = %lld", (long long)i);
  cx_toml_string(back, "data.train", "", &s);
  CHECK(!strcmp(s, "a \"b\".h5"), "a string with quotes: %s", s);
  cx_toml_as_float(cx_toml_at(cx_toml_get(back, "data.mean"), 0), &v);
  CHECK(v == 0.28600000000000003, "a float keeps its digits: %.17g", v);
  cx_toml_as_float(cx_toml_at(cx_toml_get(back, "data.mean"), 1), &v);
  CHECK(cx_toml_type_of(cx_toml_at(cx_toml_get(back, "data.mean"), 1)) == CX_TOML_FLOAT,
        "2.0 stays a float");
  cx_toml_float(back, "teacher.train.lr", 0, &v);
  CHECK(v == 0.012345678901234567, "set lr: %.17g", v);
  cx_toml_int(back, "teacher.train.epochs", 0, &i);
  CHECK(i == 4, "added epochs: %lld", (long long)i);
  cx_toml_int(back, "export.opset", 0, &i);
  CHECK(i == 17, "a new table: opset %lld", (long long)i);
  cx_toml_float(cx_toml_at(cx_toml_get(back, "teacher.train.sched"), 0), "v", 0, &v);
  CHECK(v == 2.5, "an array of tables: %g", v);
  CHECK(!cx_toml_get(back, "tune"), "the skipped table is left out");
  cx_toml_free(back);
  cx_toml_free(doc);
  free(text);
}

static void test_trial_record(void) {
  cx_tune_config c;
  cx_toml *doc = read_tune("[tune]\n\"distill.lr\" = {log = [1e-3, 0.3]}\n\"s.k\" = [\"x\", "
                           "\"y\"]\n", &c);
  if (!doc) return;
  char dir[] = "/tmp/cx_tune_XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  cx_tune_trial t = {.number = 3, .status = CX_TUNE_COMPLETE, .x = {log(0.0123456789), 1},
                     .value = 81.5, .top1 = 81.5, .top5 = NAN, .loss = 0.5, .seconds = 12.25},
                r;
  snprintf(t.shared, sizeof t.shared, "teacher");
  for (int k = 0; k < CX_TUNE_COSTS; k++)
    t.cost[k] = k == CX_TUNE_COST_LATENCY_ORT ? NAN : 1000.5 * k;
  t.ref_top1 = 82.25, t.feasible = true;
  CHECK(cx_tune_trial_write(dir, &c.space, &t) == CX_OK, "%s", cx_last_error());
  CHECK(cx_tune_trial_read(dir, &c.space, &r) == CX_OK, "%s", cx_last_error());
  CHECK(r.number == 3 && r.status == CX_TUNE_COMPLETE && r.x[0] == t.x[0] && r.x[1] == 1 &&
        r.value == 81.5 && isnan(r.top5) && r.seconds == 12.25 && !strcmp(r.shared, "teacher"),
        "the record reads back");
  CHECK(r.ref_top1 == 82.25 && r.cost[CX_TUNE_COST_SIZE] == 2001 &&
        isnan(r.cost[CX_TUNE_COST_LATENCY_ORT]), "its costs read back: %g %g", r.ref_top1,
        r.cost[CX_TUNE_COST_SIZE]);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cx_tune_trial_json(f, &c.space, &t, "distill.top1");
  fclose(f);
  CHECK(strstr(text, "\"params\": {\"distill.lr\": 0.01234567889") &&
        strstr(text, "\"s.k\": \"y\"") && strstr(text, "\"top5\": null") &&
        strstr(text, "\"size\": 2001.0") && strstr(text, "\"latency_ort\": null") &&
        strstr(text, "\"reference_top1\": 82.25, \"feasible\": true"), "json: %s", text);
  free(text);
  /* another space: refused */
  cx_tune_config c2;
  cx_toml *doc2 = read_tune("[tune]\n\"distill.lr\" = {log = [1e-3, 0.3]}\n\"s.j\" = [\"x\", "
                            "\"y\"]\n", &c2);
  if (doc2)
    CHECK(cx_tune_trial_read(dir, &c2.space, &r) != CX_OK &&
          strstr(cx_last_error(), "the search space changed"), "changed space: %s",
          cx_last_error());
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0, "rm");
  cx_toml_free(doc2);
  cx_toml_free(doc);
}

/* ---- samplers ---- */

/* A quadratic bowl over a float, a log, an int and a choice dimension; its maximum is 0. */
static double objective(const cx_tune_space *sp, const double *x) {
  double a = x[0] - 1.3, b = log10(cx_tune_dim_value(&sp->dims[1], x[1])) + 1.0;
  double n = (x[2] - 7) / 3.0, c = x[3] == 1 ? 0 : 1;
  return -(a * a + b * b + n * n + c);
}

/* The best value of a search of n trials. */
static double search(const cx_tune_space *sp, cx_tune_sampler s, int n) {
  double xs[64][CX_TUNE_MAX_DIMS];
  cx_tune_obs obs[64];
  double best = -INFINITY;
  for (int t = 0; t < n; t++) {
    CHECK(cx_tune_sample(sp, &s, obs, t, t, xs[t]) == CX_OK, "%s", cx_last_error());
    for (int d = 0; d < sp->n; d++) {
      const cx_tune_dim *dim = &sp->dims[d];
      double lo = cx_tune_dim_internal(dim, dim->lo), hi = cx_tune_dim_internal(dim, dim->hi);
      CHECK(xs[t][d] >= lo && xs[t][d] <= hi, "dim %d: %g outside [%g, %g]", d, xs[t][d], lo,
            hi);
      if (dim->kind == CX_TUNE_INT || dim->kind == CX_TUNE_CHOICE)
        CHECK(xs[t][d] == round(xs[t][d]), "dim %d: %g is not an integer", d, xs[t][d]);
    }
    obs[t] = (cx_tune_obs){.x = xs[t], .value = objective(sp, xs[t])};
    if (obs[t].value > best) best = obs[t].value;
  }
  return best;
}

static int by_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void test_samplers(void) {
  cx_tune_config c;
  cx_toml *doc = read_tune("[tune]\n\"a.x\" = [-5.0, 5.0]\n\"a.y\" = {log = [1e-4, 10.0]}\n"
                           "\"a.n\" = {int = [1, 10]}\n\"a.c\" = [\"p\", \"q\", \"r\"]\n", &c);
  if (!doc) return;
  cx_tune_sampler tpe = c.sampler, rnd = c.sampler;
  rnd.kind = CX_TUNE_RANDOM;
  /* deterministic: the same point for the same trial, another for the next */
  double x1[CX_TUNE_MAX_DIMS], x2[CX_TUNE_MAX_DIMS], x3[CX_TUNE_MAX_DIMS];
  cx_tune_sample(&c.space, &rnd, NULL, 0, 4, x1);
  cx_tune_sample(&c.space, &rnd, NULL, 0, 4, x2);
  cx_tune_sample(&c.space, &rnd, NULL, 0, 5, x3);
  CHECK(!memcmp(x1, x2, sizeof(double) * 4) && x1[0] != x3[0], "random: a function of the trial");
  enum { SEEDS = 11, TRIALS = 40 };
  double bt[SEEDS], br[SEEDS];
  for (int s = 0; s < SEEDS; s++) {
    tpe.seed = rnd.seed = (uint64_t)(100 + s);
    bt[s] = search(&c.space, tpe, TRIALS);
    br[s] = search(&c.space, rnd, TRIALS);
    /* TPE is deterministic too: the same search twice gives the same best */
    if (s == 0) CHECK(search(&c.space, tpe, TRIALS) == bt[0], "TPE: not deterministic");
  }
  qsort(bt, SEEDS, sizeof *bt, by_double);
  qsort(br, SEEDS, sizeof *br, by_double);
  printf("quadratic, %d trials (10 random first), median best over %d seeds: TPE %.4f, "
         "random %.4f\n", TRIALS, SEEDS, bt[SEEDS / 2], br[SEEDS / 2]);
  CHECK(bt[SEEDS / 2] > br[SEEDS / 2], "TPE's median best %.4f is not above random's %.4f",
        bt[SEEDS / 2], br[SEEDS / 2]);
  cx_toml_free(doc);
}

/* Successive halving: Optuna's SuccessiveHalvingPruner rule, and the rungs. */
static void test_asha(void) {
  double others[] = {50, 40, 30, 20, 10, 60, 70};
  /* fewer than `reduction` at the rung: only the best goes on */
  CHECK(cx_tune_asha_promote(NULL, 0, 5, 3), "the first trial goes on");
  CHECK(cx_tune_asha_promote(others, 1, 50, 3), "a tie with the best goes on");
  CHECK(!cx_tune_asha_promote(others, 2, 45, 3), "45 among 50, 40 (reduction 3) stops");
  /* 8 values, reduction 3: the best 2 go on (8 // 3) */
  CHECK(cx_tune_asha_promote(others, 7, 65, 3), "65: second of 8 goes on");
  CHECK(!cx_tune_asha_promote(others, 7, 55, 3), "55: third of 8 stops");
  /* reduction 2: the best 4 of 8 */
  CHECK(cx_tune_asha_promote(others, 7, 45, 2) && !cx_tune_asha_promote(others, 7, 35, 2),
        "reduction 2");
  cx_tune_config c = {.min_epochs = 2, .reduction = 3};
  CHECK(cx_tune_rung_epochs(&c, 0) == 2 && cx_tune_rung_epochs(&c, 2) == 18, "rungs 2, 6, 18");
  /* a pruned trial is never a good one: with the only complete trial far from the pruned ones,
   * TPE's l(x) centres on it */
  cx_toml *doc = read_tune("[tune]\n\"a.x\" = [0.0, 10.0]\n", &c);
  if (!doc) return;
  double xs[12][1];
  cx_tune_obs obs[12];
  for (int i = 0; i < 12; i++) {
    xs[i][0] = i == 0 ? 9.5 : 0.5 + 0.01 * i;
    obs[i] = (cx_tune_obs){.x = xs[i], .value = i == 0 ? 10 : 90, .pruned = i != 0};
  }
  c.sampler.n_startup = 10;
  double x, near = 0;
  for (int t = 0; t < 20; t++) {
    cx_tune_sample(&c.space, &c.sampler, obs, 12, 100 + t, &x);
    near += x > 5;
  }
  CHECK(near >= 15, "TPE followed the pruned trials' values: %g of 20 near the complete one",
        near);
  cx_toml_free(doc);
}

/* ---- objectives ---- */

static void test_objective_config(void) {
  cx_tune_config c;
  cx_toml *doc = read_tune("[tune]\nobjective = \"macs\"\nmax_drop = 1.0\n"
                           "reference = \"teacher\"\n\"a.b\" = [1, 2]\n", &c);
  if (doc)
    CHECK(c.goal == CX_TUNE_GOAL_MIN && c.cost == CX_TUNE_COST_MACS && c.max_drop == 1.0 &&
          !strcmp(c.reference, "teacher"), "macs: goal %d cost %d", (int)c.goal, (int)c.cost);
  cx_toml_free(doc);
  doc = read_tune("[tune]\nobjective = \"pareto\"\n\"a.b\" = [1, 2]\n", &c);
  if (doc)
    CHECK(c.goal == CX_TUNE_GOAL_PARETO && c.cost == CX_TUNE_COST_LATENCY && isnan(c.max_drop) &&
          !strcmp(c.reference, "distill"), "pareto: the defaults");
  cx_toml_free(doc);
  doc = read_tune("[tune]\nobjective = \"pareto\"\nfront = \"size_gzip\"\nmax_drop = 0\n"
                  "\"a.b\" = [1, 2]\n", &c);
  if (doc) CHECK(c.cost == CX_TUNE_COST_SIZE_GZIP && c.max_drop == 0, "front = size_gzip");
  cx_toml_free(doc);
  doc = read_tune("[tune]\nobjective = \"top1\"\n\"a.b\" = [1, 2]\n", &c);
  if (doc) CHECK(c.goal == CX_TUNE_GOAL_METRIC && !c.objective, "top1: the last stage's");
  cx_toml_free(doc);
  CHECK(!strcmp(cx_tune_cost_field(CX_TUNE_COST_SIZE), "onnx_bytes") &&
        !strcmp(cx_tune_cost_field(CX_TUNE_COST_LATENCY), "cpu_ms_batch1"), "report.json keys");
  bad_tune("[tune]\nmax_drop = 1.0\n\"a.b\" = [1, 2]\n", "t.toml:2:12: 'tune.max_drop': "
           "max_drop bounds the accuracy a smaller model may lose: it needs objective");
  bad_tune("[tune]\nobjective = \"distill.top1\"\nmax_drop = 1.0\n\"a.b\" = [1, 2]\n",
           "it needs objective = \"macs\"");
  bad_tune("[tune]\nobjective = \"macs\"\nmax_drop = -0.5\n\"a.b\" = [1, 2]\n",
           "max_drop is points of top-1, 0 or more, found -0.5");
  bad_tune("[tune]\nobjective = \"flops\"\n\"a.b\" = [1, 2]\n",
           "t.toml:2:13: 'tune.objective': an objective is \"top1\"");
  bad_tune("[tune]\nobjective = \"flops\"\n\"a.b\" = [1, 2]\n", "\"latency_ort\"; found "
           "\"flops\"");
  bad_tune("[tune]\nobjective = \"macs\"\nreference = \"teacher\"\n\"a.b\" = [1, 2]\n",
           "reference is what max_drop counts from: set max_drop too");
  bad_tune("[tune]\nobjective = \"macs\"\nfront = \"size\"\n\"a.b\" = [1, 2]\n",
           "front is the cost axis of objective = \"pareto\"");
  bad_tune("[tune]\nobjective = \"pareto\"\nfront = \"speed\"\n\"a.b\" = [1, 2]\n",
           "front: one of \"macs\"");
  bad_tune("[tune]\nobjective = \"macs\"\nearly_stop = \"asha\"\n\"a.b\" = [1, 2]\n",
           "use early_stop = \"none\"");
}

/* Feasibility, the smallest feasible cost, non-domination ranks and the front's best. */
static void test_selection(void) {
  CHECK(cx_tune_feasible(89.0, 90.0, 1.0) && !cx_tune_feasible(88.99, 90.0, 1.0) &&
        cx_tune_feasible(10, 90, NAN) && !cx_tune_feasible(NAN, 90, 1) &&
        !cx_tune_feasible(90, NAN, 1), "top1 >= reference - max_drop");
  /* costs 5, 3, 3, 1, 2: the 1 and the 2 infeasible, the two 3s tie: the more accurate wins */
  cx_tune_point p[] = {{90, 5, true}, {85, 3, true}, {87, 3, true}, {80, 1, false},
                       {82, 2, false}, {88, NAN, true}};
  CHECK(cx_tune_best_min(p, 6) == 2, "best_min: %d, expected 2", cx_tune_best_min(p, 6));
  CHECK(cx_tune_best_min(p, 2) == 1 && cx_tune_best_min(p + 3, 2) == -1, "best_min: none");
  int rank[6];
  cx_tune_pareto_ranks(p, 6, rank);
  /* front: (90, 5), (87, 3), (82, 2), (80, 1); (85, 3) is dominated by (87, 3); NAN last */
  int want[] = {0, 1, 0, 0, 0, 6};
  for (int i = 0; i < 6; i++)
    CHECK(rank[i] == want[i], "rank of point %d: %d, expected %d", i, rank[i], want[i]);
  /* ranks against dominance, checked pairwise: a dominated point has a larger rank */
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 5; j++)
      if (p[j].top1 >= p[i].top1 && p[j].cost <= p[i].cost &&
          (p[j].top1 > p[i].top1 || p[j].cost < p[i].cost))
        CHECK(rank[i] > rank[j], "%d dominates %d but ranks %d >= %d", j, i, rank[j], rank[i]);
  cx_tune_point q[] = {{90, 4, true}, {70, 1, false}, {80, 2, true}, {80, 3, true},
                       {60, 2, true}};
  int rq[5];
  cx_tune_pareto_ranks(q, 5, rq);
  CHECK(rq[0] == 0 && rq[1] == 0 && rq[2] == 0 && rq[3] == 1 && rq[4] == 1, "ranks %d %d %d %d %d",
        rq[0], rq[1], rq[2], rq[3], rq[4]);
  CHECK(cx_tune_best_pareto(q, 5, rq, true) == 2,
        "constrained: the cheapest feasible front member");
  CHECK(cx_tune_best_pareto(q, 5, rq, false) == 0, "unconstrained: the most accurate");
  CHECK(cx_tune_pareto_score(99, 0) > cx_tune_pareto_score(1, 0) &&
        cx_tune_pareto_score(0, 0) > cx_tune_pareto_score(100, 1), "rank first, then top-1");
}

/* TPE under a constraint: the best-valued trials are infeasible, so they are bad ones and l(x)
 * centres on the feasible good ones; the same trials all feasible pull it the other way. */
static void test_tpe_infeasible(void) {
  cx_tune_config c;
  cx_toml *doc = read_tune("[tune]\n\"a.x\" = [0.0, 10.0]\n", &c);
  if (!doc) return;
  double xs[20][1];
  cx_tune_obs obs[20];
  for (int i = 0; i < 20; i++) { /* 10 high values at x ~ 9, 10 lower ones at x ~ 1 */
    bool high = i % 2 == 0;
    xs[i][0] = high ? 9 + 0.05 * i : 1 + 0.05 * i;
    obs[i] = (cx_tune_obs){.x = xs[i], .value = high ? -1 : -5, .infeasible = high};
  }
  c.sampler.n_startup = 10;
  int near_feasible = 0, near_high = 0;
  double x;
  for (int t = 0; t < 20; t++) {
    cx_tune_sample(&c.space, &c.sampler, obs, 20, 100 + t, &x);
    near_feasible += x < 5;
  }
  for (int i = 0; i < 20; i++) obs[i].infeasible = false;
  for (int t = 0; t < 20; t++) {
    cx_tune_sample(&c.space, &c.sampler, obs, 20, 100 + t, &x);
    near_high += x > 5;
  }
  CHECK(near_feasible >= 15, "TPE followed the infeasible trials: %d of 20 near the feasible",
        near_feasible);
  CHECK(near_high >= 15, "without the constraint TPE does not follow the best: %d of 20",
        near_high);
  cx_toml_free(doc);
}

int main(void) {
  test_objective_config();
  test_selection();
  test_tpe_infeasible();
  test_asha();
  test_config();
  test_writer();
  test_trial_record();
  test_samplers();
  printf("%s: %d failure(s)\n", fails ? "FAILED" : "passed", fails);
  return fails != 0;
}
