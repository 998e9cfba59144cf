/* compress tune's report (cli/tune_trial.h): the numbers each trial's pipeline report measured
 * (its report.json), and root/report.md and report.html with the trials table and the chart of
 * top-1 against a cost, the Pareto front highlighted. The chart is the pipeline report's SVG
 * (cli/svg_chart.c); every file is written under a temporary name and renamed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/file_replace.h"
#include "report.h"
#include "tune_trial.h"

enum { PATH_MAX_ = CX_CLI_PATH_MAX, LINE_MAX_ = 65536 };

/* ---- reading a trial's report.json ---- */

/* The number after "field": in an entry (null or missing: NAN). cli/report.c writes each model
 * as one line of JSON whose strings escape '"', so "field": occurs only as a key. */
static double field_value(const char *entry, const char *field) {
  char key[64];
  snprintf(key, sizeof key, "\"%s\":", field);
  const char *at = strstr(entry, key);
  if (!at) return NAN;
  char *end;
  double v = strtod(at + strlen(key), &end);
  return end == at + strlen(key) ? NAN : v;
}

cx_status cx_tune_report_costs(const char *dir, const char *model, double *cost) {
  char path[PATH_MAX_], want[128];
  snprintf(path, sizeof path, "%s/report.json", dir);
  snprintf(want, sizeof want, "{\"name\":\"%s\",", model);
  for (int c = 0; c < CX_TUNE_COSTS; c++) cost[c] = NAN;
  FILE *f = fopen(path, "r");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot read the trial's report", path);
  char *line = malloc(LINE_MAX_);
  bool found = false;
  while (line && !found && fgets(line, LINE_MAX_, f))
    if (!strncmp(line, want, strlen(want))) {
      found = true;
      for (int c = 0; c < CX_TUNE_COSTS; c++)
        cost[c] = field_value(line, cx_tune_cost_field((cx_tune_cost)c));
    }
  fclose(f);
  free(line);
  if (!line) return cx_fail(CX_ERR_NOMEM, "out of memory");
  if (!found) return cx_fail(CX_ERR_FORMAT, "%s: no model \"%s\" in it", path, model);
  return CX_OK;
}

/* ---- the table ---- */

/* The cost the chart and the front are about. */
static cx_tune_cost axis(const cx_tune_run *t) {
  return t->cfg.goal == CX_TUNE_GOAL_METRIC ? CX_TUNE_COST_LATENCY : t->cfg.cost;
}

static const char *const cost_units[CX_TUNE_COSTS] = {"MACs", "eff. MACs", "bytes",
                                                      "gzip bytes", "ms, batch 1",
                                                      "ORT ms, batch 1"};

typedef struct table {
  const cx_tune_run *t;
  const cx_tune_trial *trials;
  int n, best;
  int *rank; /* over all trials; complete ones only get < n */
} table;

static const char *status_of(const table *tb, int i) {
  const cx_tune_trial *tr = &tb->trials[i];
  if (tr->status == CX_TUNE_COMPLETE && !tr->feasible) return "infeasible";
  return cx_tune_status_name(tr->status);
}

static void number(char *buf, size_t size, double v, const char *fmt) {
  if (isfinite(v)) snprintf(buf, size, fmt, v);
  else snprintf(buf, size, "–");
}

enum { FIXED = 7, CELL = 96 }; /* columns after the keys */
static const char *const headers[FIXED] = {"top-1 (%)", "MACs", "latency (ms)", "size (bytes)",
                                           "status", "time (s)", "mark"};

/* The cells of trial i: its number, its keys, then the FIXED columns. */
static int cells(const table *tb, int i, char (*c)[CELL]) {
  const cx_tune_trial *tr = &tb->trials[i];
  const cx_tune_space *sp = &tb->t->cfg.space;
  int k = 0;
  snprintf(c[k++], CELL, "%d", tr->number);
  for (int d = 0; d < sp->n; d++) {
    FILE *f = fmemopen(c[k], CELL, "w");
    if (f) cx_tune_dim_write(f, &sp->dims[d], tr->x[d]), fclose(f);
    k++;
  }
  number(c[k++], CELL, tr->top1, "%.2f");
  number(c[k++], CELL, tr->cost[CX_TUNE_COST_MACS], "%.0f");
  number(c[k++], CELL, tr->cost[CX_TUNE_COST_LATENCY], "%.3f");
  number(c[k++], CELL, tr->cost[CX_TUNE_COST_SIZE], "%.0f");
  snprintf(c[k++], CELL, "%s", status_of(tb, i));
  number(c[k++], CELL, tr->seconds, "%.1f");
  snprintf(c[k++], CELL, "%s%s%s", i == tb->best ? "best" : "",
           i == tb->best && tb->rank[i] == 0 ? ", " : "", tb->rank[i] == 0 ? "front" : "");
  return k;
}

/* The line under the title: what was optimised and under which constraint. */
static void goal_text(const cx_tune_run *t, char *buf, size_t size) {
  const cx_tune_config *c = &t->cfg;
  int at = 0;
  if (c->goal == CX_TUNE_GOAL_METRIC)
    at = snprintf(buf, size, "Objective: %s (%s).", t->objective,
                  t->metric == CX_TUNE_METRIC_LOSS ? "minimised" : "maximised");
  else if (c->goal == CX_TUNE_GOAL_MIN)
    at = snprintf(buf, size, "Objective: the %s of the %s (report.json %s), minimised.",
                  cx_tune_cost_name(c->cost), t->final_model, cx_tune_cost_field(c->cost));
  else
    at = snprintf(buf, size, "Objective: the Pareto front of the %s's top-1 against its %s "
                  "(report.json %s).", t->final_model, cx_tune_cost_name(c->cost),
                  cx_tune_cost_field(c->cost));
  if (!isnan(c->max_drop) && at >= 0 && (size_t)at < size)
    snprintf(buf + at, size - (size_t)at, " Feasible: top-1 at most %g points below the %s "
             "stage's.", c->max_drop, t->reference);
}

static void markdown(const table *tb, FILE *f) {
  const cx_tune_run *t = tb->t;
  char goal[512], (*c)[CELL] = malloc(sizeof *c * (CX_TUNE_MAX_DIMS + FIXED + 1));
  if (!c) return;
  goal_text(t, goal, sizeof goal);
  fprintf(f, "# compress tune: %s\n\n%s\n\n", t->file, goal);
  if (tb->best >= 0)
    fprintf(f, "Best: trial %d (best.toml).\n\n", tb->trials[tb->best].number);
  fputs("| trial |", f);
  for (int d = 0; d < t->cfg.space.n; d++) fprintf(f, " %s |", t->cfg.space.dims[d].key);
  for (int k = 0; k < FIXED; k++) fprintf(f, " %s |", headers[k]);
  fputs("\n|", f);
  for (int k = 0; k < 1 + t->cfg.space.n + FIXED; k++) fputs("---|", f);
  fputc('\n', f);
  for (int i = 0; i < tb->n; i++) {
    int m = cells(tb, i, c);
    fputc('|', f);
    for (int k = 0; k < m; k++) fprintf(f, " %s |", c[k]);
    fputc('\n', f);
  }
  fprintf(f, "\nLatency: %s (report.json cpu_ms_batch1). The chart of top-1 against %s, the "
          "front highlighted: report.html. Each trial's own report: trials/NNNN/report.md.\n",
          cost_units[CX_TUNE_COST_LATENCY], cx_tune_cost_name(axis(t)));
  free(c);
}

/* The chart: every complete trial, and the front sorted by cost. */
static void chart(const table *tb, FILE *f) {
  cx_tune_cost a = axis(tb->t);
  double *x = malloc(sizeof *x * (size_t)(4 * tb->n + 4)), *y = x + tb->n + 1;
  double *fx = y + tb->n + 1, *fy = fx + tb->n + 1;
  char (*label)[16] = malloc(sizeof *label * (size_t)(tb->n + 1));
  const char **names = malloc(sizeof *names * (size_t)(tb->n + 1));
  if (!x || !label || !names) return free(x), free(label), free(names);
  int n = 0, nf = 0;
  for (int i = 0; i < tb->n; i++) {
    const cx_tune_trial *tr = &tb->trials[i];
    if (tr->status != CX_TUNE_COMPLETE) continue;
    snprintf(label[n], sizeof label[n], "#%d", tr->number);
    names[n] = label[n], x[n] = tr->cost[a], y[n++] = tr->top1;
    if (tb->rank[i] != 0) continue;
    int k = nf++; /* insertion by cost */
    for (; k > 0 && fx[k - 1] > tr->cost[a]; k--) fx[k] = fx[k - 1], fy[k] = fy[k - 1];
    fx[k] = tr->cost[a], fy[k] = tr->top1;
  }
  char xl[96];
  snprintf(xl, sizeof xl, "%s (%s)", cx_tune_cost_name(a), cost_units[a]);
  cx_report_series s[2] = {{"trials", n, x, y}, {"Pareto front", nf, fx, fy}};
  cx_svg_chart c = {"Top-1 against cost, the final model of each trial", xl, "top-1 (%)", 0, 0,
                    2, s};
  cx_svg_scatter_chart(f, &c, names);
  free(x), free(label), free(names);
}

static void html(const table *tb, FILE *f) {
  const cx_tune_run *t = tb->t;
  char goal[512], (*c)[CELL] = malloc(sizeof *c * (CX_TUNE_MAX_DIMS + FIXED + 1));
  if (!c) return;
  goal_text(t, goal, sizeof goal);
  fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>compress tune</title>\n"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}</style></head><body>\n"
        "<h1>compress tune: ", f);
  cx_xml_text(f, t->file);
  fputs("</h1>\n<p>", f);
  cx_xml_text(f, goal);
  if (tb->best >= 0) fprintf(f, " Best: trial %d (best.toml).", tb->trials[tb->best].number);
  fputs("</p>\n", f);
  chart(tb, f);
  fputs("<table>\n<tr><th>trial</th>", f);
  for (int d = 0; d < t->cfg.space.n; d++) {
    fputs("<th>", f);
    cx_xml_text(f, t->cfg.space.dims[d].key);
    fputs("</th>", f);
  }
  for (int k = 0; k < FIXED; k++) fprintf(f, "<th>%s</th>", headers[k]);
  fputs("</tr>\n", f);
  for (int i = 0; i < tb->n; i++) {
    int m = cells(tb, i, c);
    fputs("<tr>", f);
    for (int k = 0; k < m; k++) {
      fputs("<td>", f);
      cx_xml_text(f, c[k]);
      fputs("</td>", f);
    }
    fputs("</tr>\n", f);
  }
  fputs("</table>\n</body></html>\n", f);
  free(c);
}

static cx_status write_one(const table *tb, const char *name, void (*w)(const table *, FILE *)) {
  char path[PATH_MAX_ + 32];
  snprintf(path, sizeof path, "%s/%s", tb->t->root, name);
  cx_file_out o;
  CX_TRY(cx_file_out_open(path, &o));
  w(tb, o.f);
  return cx_file_out_commit(&o);
}

cx_status cx_tune_report_write(const cx_tune_run *t, const cx_tune_trial *trials, int n,
                               int best) {
  table tb = {.t = t, .trials = trials, .n = n, .best = best};
  cx_tune_point *p = malloc(sizeof *p * (size_t)(n + 1));
  tb.rank = malloc(sizeof *tb.rank * (size_t)(n + 1));
  if (!p || !tb.rank) return free(p), free(tb.rank), cx_fail(CX_ERR_NOMEM, "out of memory");
  cx_tune_cost a = axis(t);
  for (int i = 0; i < n; i++) {
    bool done = trials[i].status == CX_TUNE_COMPLETE;
    p[i] = (cx_tune_point){done ? trials[i].top1 : NAN, trials[i].cost[a], trials[i].feasible};
  }
  cx_tune_pareto_ranks(p, n, tb.rank);
  cx_status s = write_one(&tb, "report.md", markdown);
  if (s == CX_OK) s = write_one(&tb, "report.html", html);
  free(p), free(tb.rank);
  return s;
}
