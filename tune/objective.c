/* Objectives beyond a stage's accuracy: the costs a tune can minimise (each a number of the
 * pipeline's report.json), the max_drop constraint, and which trial is best under a minimised
 * cost or on the Pareto front of top-1 against a cost (docs/tune.md). */
#include <math.h>
#include <string.h>

#include "tune.h"

static const char *const names[CX_TUNE_COSTS] = {"macs", "macs_effective", "size",
                                                  "size_gzip", "latency", "latency_ort"};
/* the report.json keys they read (cli/report.c's columns) */
static const char *const fields[CX_TUNE_COSTS] = {"macs", "macs_effective", "onnx_bytes",
                                                   "onnx_gzip_bytes", "cpu_ms_batch1",
                                                   "ort_ms_batch1"};

const char *cx_tune_cost_name(cx_tune_cost c) { return names[c]; }
const char *cx_tune_cost_field(cx_tune_cost c) { return fields[c]; }

int cx_tune_cost_find(const char *name) {
  for (int c = 0; c < CX_TUNE_COSTS; c++)
    if (!strcmp(names[c], name)) return c;
  return -1;
}

bool cx_tune_feasible(double top1, double ref_top1, double max_drop) {
  if (isnan(max_drop)) return true;
  return isfinite(top1) && isfinite(ref_top1) && top1 >= ref_top1 - max_drop;
}

/* a better than b for the minimised cost: smaller cost, then higher top-1 */
static bool cheaper(const cx_tune_point *a, const cx_tune_point *b) {
  return a->cost < b->cost || (a->cost == b->cost && a->top1 > b->top1);
}

int cx_tune_best_min(const cx_tune_point *p, int n) {
  int best = -1;
  for (int i = 0; i < n; i++)
    if (p[i].feasible && isfinite(p[i].cost) && (best < 0 || cheaper(&p[i], &p[best]))) best = i;
  return best;
}

static bool finite_point(const cx_tune_point *p) { return isfinite(p->top1) && isfinite(p->cost); }

static bool dominates(const cx_tune_point *a, const cx_tune_point *b) {
  return a->top1 >= b->top1 && a->cost <= b->cost && (a->top1 > b->top1 || a->cost < b->cost);
}

void cx_tune_pareto_ranks(const cx_tune_point *p, int n, int *rank) {
  /* peel fronts: rank r is what no point still unranked dominates (n is small: O(n^3) is
   * nothing next to a trial) */
  for (int i = 0; i < n; i++) rank[i] = finite_point(&p[i]) ? -1 : n;
  for (int r = 0;; r++) {
    int placed = 0;
    for (int i = 0; i < n; i++) {
      if (rank[i] != -1) continue;
      bool dominated = false;
      for (int j = 0; j < n && !dominated; j++)
        dominated = j != i && (rank[j] == -1 || rank[j] == r) && dominates(&p[j], &p[i]);
      if (!dominated) rank[i] = r, placed++;
    }
    if (!placed) break;
  }
}

/* a better than b for the unconstrained front: higher top-1, then smaller cost */
static bool more_accurate(const cx_tune_point *a, const cx_tune_point *b) {
  return a->top1 > b->top1 || (a->top1 == b->top1 && a->cost < b->cost);
}

int cx_tune_best_pareto(const cx_tune_point *p, int n, const int *rank, bool constrained) {
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (rank[i] != 0 || (constrained && !p[i].feasible)) continue;
    if (best < 0 || (constrained ? cheaper(&p[i], &p[best]) : more_accurate(&p[i], &p[best])))
      best = i;
  }
  return best;
}

double cx_tune_pareto_score(double top1, int rank) { return top1 - 1000.0 * rank; }
